-- Idempotency keys (issue 34, Build 2): a write sent with an Idempotency-Key header is run in
-- one transaction with its key and its response, so a retry of a change whose commit outcome
-- was unknown is answered the stored response instead of being applied twice.
CREATE TABLE idempotency_keys (
    principal_id text        NOT NULL,
    key          text        NOT NULL,
    fingerprint  text        NOT NULL,
    status       integer     NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    body         bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (principal_id, key)
);

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
