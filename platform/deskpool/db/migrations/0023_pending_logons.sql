-- A logon whose desktop was allocated but whose connection token is not issued yet (nor the
-- logon failed) holds a session for the license's count (deskpool.licensing.store): without
-- it, a burst of openings committed their allocations before any of their tokens existed and
-- every one of them passed the session limit. This partial index finds those few rows in a
-- table that keeps the whole history.
CREATE INDEX logons_pending ON logons (allocated_at)
    WHERE allocated_at IS NOT NULL AND token_issued_at IS NULL AND failed_at IS NULL;
