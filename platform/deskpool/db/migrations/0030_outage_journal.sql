-- The acts of a database outage written back (deskpool.outage_brokering.replay): every entry
-- of the Redis journal applied, by its stream id, recorded in the transaction that applies
-- it, so an entry is applied once whoever replays it and however often.
CREATE TABLE outage_journal (
    entry_id    text PRIMARY KEY,
    kind        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    -- Empty when the act was written as journaled; otherwise what differed (a desktop that
    -- was no longer the user's to take, say).
    outcome     text NOT NULL DEFAULT ''
);
