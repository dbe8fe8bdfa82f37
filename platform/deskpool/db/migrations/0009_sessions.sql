-- Desktop sessions: pool session policies, gateway leases, session records and connection
-- tokens. Meanings follow deskpool.sessions.model; the SQL is in deskpool.sessions.store.

-- A pool without a row has the default policy (deskpool.sessions.model.DEFAULT_POLICY).
CREATE TABLE pool_session_policies (
    pool_id               uuid PRIMARY KEY REFERENCES pools (id) ON DELETE CASCADE,
    protocol              text NOT NULL DEFAULT 'auto' CHECK (protocol IN ('auto', 'rdp', 'vnc')),
    after_disconnect      text NOT NULL DEFAULT 'logoff_after_delay'
                          CHECK (after_disconnect IN
                                 ('logoff_immediately', 'logoff_after_delay', 'never')),
    logoff_delay          integer NOT NULL DEFAULT 600 CHECK (logoff_delay >= 0),
    idle_timeout          integer CHECK (idle_timeout > 0),
    max_session_duration  integer CHECK (max_session_duration > 0),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- One row per live gateway process; a gateway renews its lease with every heartbeat. The
-- sessions of a gateway whose lease expired end with the reason gateway_lost.
CREATE TABLE gateway_leases (
    gateway_id        text PRIMARY KEY,
    started_at        timestamptz NOT NULL DEFAULT now(),
    heartbeat_at      timestamptz NOT NULL DEFAULT now(),
    lease_expires_at  timestamptz NOT NULL
);

-- One row per tunnel. Users, desktops and pools are not foreign keys: the history outlives them.
CREATE TABLE desktop_sessions (
    id                       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id                  uuid NOT NULL,
    desktop_id               uuid NOT NULL,
    pool_id                  uuid NOT NULL,
    desktop_name             text NOT NULL,
    protocol                 text NOT NULL,
    read_only                boolean NOT NULL DEFAULT false,
    shadow_of                uuid REFERENCES desktop_sessions (id) ON DELETE SET NULL,
    gateway_id               text NOT NULL,
    connection_id            text,
    started_at               timestamptz NOT NULL DEFAULT now(),
    connected_at             timestamptz,
    last_activity_at         timestamptz NOT NULL DEFAULT now(),
    ended_at                 timestamptz,
    end_reason               text,
    bytes_to_desktop         bigint NOT NULL DEFAULT 0,
    bytes_to_browser         bigint NOT NULL DEFAULT 0,
    disconnect_requested_at  timestamptz,
    disconnect_reason        text
);
CREATE INDEX desktop_sessions_open ON desktop_sessions (gateway_id) WHERE ended_at IS NULL;
CREATE INDEX desktop_sessions_desktop ON desktop_sessions (desktop_id, started_at DESC);
CREATE INDEX desktop_sessions_user ON desktop_sessions (user_id, started_at DESC);
CREATE INDEX desktop_sessions_order ON desktop_sessions (started_at DESC, id DESC);

-- Single-use connection tokens: the key is the token's SHA-256, the target is sealed by the
-- secret store (kind session.connection_token, owner the key in hex, field target).
CREATE TABLE connection_tokens (
    token_key      bytea PRIMARY KEY,
    user_id        uuid NOT NULL,
    desktop_id     uuid NOT NULL,
    pool_id        uuid NOT NULL,
    protocol       text NOT NULL,
    shadow_of      uuid,
    sealed_target  bytea NOT NULL,
    issued_at      timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    redeemed_at    timestamptz,
    session_id     uuid
);
CREATE INDEX connection_tokens_expiry ON connection_tokens (expires_at);
CREATE INDEX connection_tokens_desktop ON connection_tokens (desktop_id, issued_at DESC);
