-- The lease clock (deskpool.sessions.lease_clock): when a process last reached the database
-- to hold or judge the gateways' leases. A silence longer than a lease means nobody could
-- (the database was away): the leases that ran out in it restart instead of ending their
-- gateways' sessions as gateway_lost. One row.
CREATE TABLE lease_clock (
    only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    touched_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO lease_clock DEFAULT VALUES;

-- When the lease was last restarted by the lease clock; a lease restarts at most once
-- without a heartbeat in between.
ALTER TABLE gateway_leases ADD COLUMN restarted_at timestamptz;
