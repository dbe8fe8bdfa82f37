-- The read-only viewers of a session (issue 39). Ending a session looks for the open ones
-- (shadow_of = the session ending); no index served it, so PostgreSQL read every open session
-- at every session's end: at 5 p.m. as many times as sessions end. Few sessions are viewers:
-- only they are in this index.
CREATE INDEX desktop_sessions_shadows ON desktop_sessions (shadow_of) WHERE shadow_of IS NOT NULL;
