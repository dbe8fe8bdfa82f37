-- Session recordings (issue 26 §3). Meanings follow deskpool.recordings.model; the SQL is in
-- deskpool.recordings.store. The chunks themselves are in the recording store (RECORDING_STORE),
-- sealed; a row says where (store, store_key) and how many plaintext bytes each chunk holds.

ALTER TABLE pool_session_policies
    ADD COLUMN recording_enabled      boolean NOT NULL DEFAULT false,
    ADD COLUMN recording_include_keys boolean NOT NULL DEFAULT false;

-- Users, pools and sessions are not foreign keys: a recording outlives them until retention.
CREATE TABLE session_recordings (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id    uuid NOT NULL UNIQUE,
    pool_id       uuid NOT NULL,
    user_id       uuid NOT NULL,
    desktop_name  text NOT NULL,
    include_keys  boolean NOT NULL,
    store         text NOT NULL,
    store_key     text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    -- Plaintext bytes of each chunk, in order; size_bytes is their sum.
    chunk_sizes   bigint[] NOT NULL DEFAULT '{}',
    size_bytes    bigint NOT NULL DEFAULT 0,
    -- The recording stopped early (the writer fell behind); what was written plays.
    truncated     boolean NOT NULL DEFAULT false
);

CREATE INDEX session_recordings_started ON session_recordings (started_at DESC, id DESC);
CREATE INDEX session_recordings_pool ON session_recordings (pool_id, started_at DESC);
CREATE INDEX session_recordings_user ON session_recordings (user_id, started_at DESC);
