-- The free ready desktops of each pool, oldest first (issue 39). An opening takes the oldest
-- one (FOR UPDATE SKIP LOCKED) and listing one's pools asks whether there is one: through
-- (pool_id, state) both read every ready desktop of the pool, sorted it, or were planned as a
-- sequential scan of every desktop (a pool is a large share of a small table). This index
-- holds only the desktops an opening may take, in the order it takes them: the first entry
-- not locked is the answer.
CREATE INDEX desktops_free_ready ON desktops (pool_id, created_at, name, id)
 WHERE state = 'ready' AND assigned_user IS NULL AND NOT in_session AND NOT used_since_refresh;
-- The free desktops start on connect may take (powered off, or on their way to ready): asked
-- for only when a pool has no free ready one.
CREATE INDEX desktops_free_startable ON desktops (pool_id)
 WHERE assigned_user IS NULL AND NOT in_session
   AND state IN ('powered_off', 'provisioning', 'starting', 'waiting_for_agent',
                 'waiting_for_windows', 'refreshing');
