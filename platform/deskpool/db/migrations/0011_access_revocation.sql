-- Access that is taken away ends at once (deskpool.revocation). Whether a user still holds a
-- desktop or a shadow can depend on the OIDC group and role claims of their token (a claim
-- bound to a group entitled to a pool); the claims of the user's latest sign-in are kept here
-- so a change made while the user is away can be judged without their token.
ALTER TABLE users
    ADD COLUMN claimed_groups text[] NOT NULL DEFAULT '{}',
    ADD COLUMN claimed_roles  text[] NOT NULL DEFAULT '{}';

-- Open sessions by user: what a revocation looks for.
CREATE INDEX desktop_sessions_open_user ON desktop_sessions (user_id) WHERE ended_at IS NULL;
