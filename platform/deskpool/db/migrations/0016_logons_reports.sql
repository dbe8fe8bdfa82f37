-- Logon timing (issue 26): one row per attempt to open a desktop, with the time each phase was
-- reached, on the database's clock. Meanings follow deskpool.sessions.logons; the usage reports
-- of deskpool.reports read this table and desktop_sessions. Users, pools, desktops and sessions
-- are not foreign keys: the history outlives them.
CREATE TABLE logons (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id              uuid NOT NULL,
    pool_id              uuid NOT NULL,
    desktop_id           uuid,
    session_id           uuid,
    asked_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    allocated_at         timestamptz,
    -- Set by start on connect (a powered-off desktop started for its user); null otherwise.
    powered_on_at        timestamptz,
    guest_ready_at       timestamptz,
    token_issued_at      timestamptz,
    tunnel_opened_at     timestamptz,
    daemon_connected_at  timestamptz,
    first_frame_at       timestamptz,
    failed_at            timestamptz,
    failure_reason       text
);
CREATE INDEX logons_session ON logons (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX logons_period ON logons (asked_at, pool_id);

-- The logon a connection token belongs to (null for a read-only view of another session).
ALTER TABLE connection_tokens ADD COLUMN logon_id uuid;

-- Usage reports read the sessions that overlap a period, for a pool or for all: those that
-- ended after its start or are still open (a btree finds IS NULL too), started before its end.
CREATE INDEX desktop_sessions_ended ON desktop_sessions (ended_at);
CREATE INDEX desktop_sessions_pool_ended ON desktop_sessions (pool_id, ended_at);
