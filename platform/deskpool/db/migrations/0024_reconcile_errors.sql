-- A pool whose reconciliation fails says so (deskpool.reconciliation.failures): why, in words
-- and as a code, and since when it has been failing; the three are cleared together by the
-- next pass that succeeds. A failing pool is still attempted at the back of the queue:
-- batches take the pools attempted longest ago first (reconcile_attempted_at, set by every
-- pass, failed or not), so failing pools never crowd the others out of a batch.
ALTER TABLE pools
    ADD COLUMN reconcile_error_code   text,
    ADD COLUMN reconcile_error_reason text,
    ADD COLUMN reconcile_error_since  timestamptz,
    ADD COLUMN reconcile_attempted_at timestamptz,
    ADD CONSTRAINT pools_reconcile_error_whole CHECK (
        (reconcile_error_code IS NULL) = (reconcile_error_reason IS NULL)
        AND (reconcile_error_code IS NULL) = (reconcile_error_since IS NULL)
    );

UPDATE pools SET reconcile_attempted_at = reconciled_at;

DROP INDEX pools_reconcile_order;
CREATE INDEX pools_reconcile_order ON pools (reconcile_attempted_at NULLS FIRST, id);
