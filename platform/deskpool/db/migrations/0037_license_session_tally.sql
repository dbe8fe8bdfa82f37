-- The license's sessions bounded from above without counting them (issue 39).
--
-- Every opening counted the desktops with a session (the union of open sessions, unused tokens
-- and pending logons, licensing.store.SESSION_DESKTOPS): at 9 a.m. the thousandth opening read
-- a thousand rows, 4.6 of its statement's 5.3 ms. The tally keeps, as rows change, how many
-- rows of each kind would count, ignoring the two clocks of the count (a token's expiry, a
-- pending logon's ten minutes): their sum is never below the count (each kind is a superset
-- of its part, and the union counts each desktop once). An opening far from the limit reads
-- the sum (sixty-four rows); one the sum leaves in doubt counts, with the growth lock alone.
--
-- Sixty-four shards, one per backend (pg_backend_pid() % 64): a change waits for another
-- transaction's only when both backends fall on one shard, and a transaction always changes
-- the same one. Tokens that expire unused are marked lapsed by the job that fails their
-- logons (sessions.store_logons.fail_unused_tokens), so that they leave the tally too.

ALTER TABLE connection_tokens ADD COLUMN lapsed boolean NOT NULL DEFAULT false;
UPDATE connection_tokens SET lapsed = true WHERE redeemed_at IS NULL AND expires_at <= now();
CREATE INDEX connection_tokens_unused ON connection_tokens (expires_at)
    WHERE redeemed_at IS NULL AND NOT lapsed;

CREATE TABLE license_session_tally (
    shard    smallint PRIMARY KEY,
    sessions bigint   NOT NULL DEFAULT 0
);
INSERT INTO license_session_tally (shard) SELECT generate_series(0, 63);

CREATE FUNCTION license_session_tally_add(delta integer) RETURNS void
LANGUAGE sql AS $$
    UPDATE license_session_tally SET sessions = sessions + delta
     WHERE shard = pg_backend_pid() % 64
$$;

-- Whether the row counted before the change and counts after it, by table; one row changes
-- the tally by one at most.
CREATE FUNCTION license_session_tally_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    counted boolean := false;
    counts boolean := false;
BEGIN
    IF TG_TABLE_NAME = 'desktop_sessions' THEN
        IF TG_OP <> 'INSERT' THEN
            counted := coalesce(OLD.ended_at IS NULL AND NOT OLD.read_only, false);
        END IF;
        IF TG_OP <> 'DELETE' THEN
            counts := coalesce(NEW.ended_at IS NULL AND NOT NEW.read_only, false);
        END IF;
    ELSIF TG_TABLE_NAME = 'connection_tokens' THEN
        IF TG_OP <> 'INSERT' THEN
            counted := coalesce(
                OLD.redeemed_at IS NULL AND OLD.shadow_of IS NULL AND NOT OLD.lapsed, false);
        END IF;
        IF TG_OP <> 'DELETE' THEN
            counts := coalesce(
                NEW.redeemed_at IS NULL AND NEW.shadow_of IS NULL AND NOT NEW.lapsed, false);
        END IF;
    ELSE  -- logons
        IF TG_OP <> 'INSERT' THEN
            counted := OLD.allocated_at IS NOT NULL AND OLD.token_issued_at IS NULL
                   AND OLD.failed_at IS NULL AND OLD.desktop_id IS NOT NULL;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            counts := NEW.allocated_at IS NOT NULL AND NEW.token_issued_at IS NULL
                  AND NEW.failed_at IS NULL AND NEW.desktop_id IS NOT NULL;
        END IF;
    END IF;
    IF counted <> counts THEN
        PERFORM license_session_tally_add(CASE WHEN counts THEN 1 ELSE -1 END);
    END IF;
    RETURN NULL;
END $$;

-- An update can change whether a row counts only through the columns named.
CREATE TRIGGER desktop_sessions_tally
    AFTER INSERT OR DELETE OR UPDATE OF ended_at, read_only ON desktop_sessions
    FOR EACH ROW EXECUTE FUNCTION license_session_tally_rows();
CREATE TRIGGER connection_tokens_tally
    AFTER INSERT OR DELETE OR UPDATE OF redeemed_at, shadow_of, lapsed ON connection_tokens
    FOR EACH ROW EXECUTE FUNCTION license_session_tally_rows();
CREATE TRIGGER logons_tally
    AFTER INSERT OR DELETE OR UPDATE OF allocated_at, token_issued_at, failed_at, desktop_id
    ON logons
    FOR EACH ROW EXECUTE FUNCTION license_session_tally_rows();

-- After the triggers (whose creation waits for the tables' writers), what already counts.
UPDATE license_session_tally SET sessions =
       (SELECT count(*) FROM desktop_sessions WHERE ended_at IS NULL AND NOT read_only)
     + (SELECT count(*) FROM connection_tokens
         WHERE redeemed_at IS NULL AND shadow_of IS NULL AND NOT lapsed)
     + (SELECT count(*) FROM logons
         WHERE allocated_at IS NOT NULL AND token_issued_at IS NULL AND failed_at IS NULL
           AND desktop_id IS NOT NULL)
 WHERE shard = 0;
