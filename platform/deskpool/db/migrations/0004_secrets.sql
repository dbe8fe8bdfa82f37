-- Secrets at rest: every credential deskpool stores, sealed by the secret store (SECRET_STORE).
-- One row per (kind, owner, field): "cluster.credentials" / <cluster id> / "api_token".
-- key_id repeats the master key id recorded inside the sealed value, so that counting values per
-- key (`deskpool secrets status`, the startup rules) never decrypts anything. version counts the
-- writes of a row; re-wrapping compares and sets it, so a value changed meanwhile is never
-- overwritten. updated_at is when the credential last changed (a re-wrap leaves it alone).
CREATE TABLE sealed_secrets (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    kind          text NOT NULL,
    owner_id      text NOT NULL,
    field         text NOT NULL,
    key_id        text NOT NULL,
    sealed        bytea NOT NULL,
    version       bigint NOT NULL DEFAULT 1,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    rewrapped_at  timestamptz,
    CONSTRAINT sealed_secrets_context_key UNIQUE (kind, owner_id, field)
);

CREATE INDEX sealed_secrets_key_id_idx ON sealed_secrets (key_id);
