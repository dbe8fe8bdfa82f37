-- The syslog export (deskpool.syslog_export): the audit trail streamed from a cursor.
-- Each event records the transaction that wrote it; the export reads events in (tx_id, id)
-- order and only below the oldest running transaction, so an event committed late by an
-- earlier transaction is never skipped. Events recorded before this migration have no tx_id
-- and are not exported.
ALTER TABLE audit_events ADD COLUMN tx_id xid8;
ALTER TABLE audit_events ALTER COLUMN tx_id SET DEFAULT pg_current_xact_id();
CREATE INDEX audit_events_tx ON audit_events (tx_id, id);

-- Where the export is (after the event event_id of the transaction tx_id), and the worker
-- streaming it until lease_until (one at a time). One row.
CREATE TABLE syslog_cursor (
    only_row      boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    tx_id         xid8 NOT NULL DEFAULT '0',
    event_id      bigint NOT NULL DEFAULT 0,
    sent_at       timestamptz,
    lease_holder  text,
    lease_until   timestamptz
);
INSERT INTO syslog_cursor DEFAULT VALUES;
