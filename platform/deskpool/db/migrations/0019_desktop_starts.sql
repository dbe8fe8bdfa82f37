-- Start on connect (deskpool.starts): a user who opens a pool when no desktop is ready gets a
-- powered-off desktop powered on for him. The desktop is reserved to him (desktops.assigned_user,
-- set in the same transaction as this row and the power-on job), and this row says which logon
-- waits for it. The worker that brings the desktop to ready hands it to the user (in_use) and
-- records the logon's powered_on phase; the row goes when the user's connection token is issued,
-- or when the start failed or was abandoned (the logon then records why). The desktop is not a
-- foreign key: a start whose desktop was deleted is found and its logon failed by the session
-- check.
CREATE TABLE desktop_starts (
    desktop_id    uuid PRIMARY KEY,
    pool_id       uuid NOT NULL,
    user_id       uuid NOT NULL,
    logon_id      uuid,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    powered_on_at timestamptz
);
CREATE INDEX desktop_starts_user ON desktop_starts (user_id);
