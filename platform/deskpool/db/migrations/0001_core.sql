-- The platform's own facts that must survive restarts (first-run state, watermarks).
CREATE TABLE platform_state (
    key         text PRIMARY KEY,
    value       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
