-- People and service principals are two kinds of user (deskpool.identity.kinds): a person
-- ('human') and a client of the client credentials grant ('service') with the same subject are
-- two users, keyed by issuer, subject and kind, so a person never holds a client's grants.
--
-- Rows from before were keyed by issuer and subject alone. A row with an email or a name was
-- signed in by a person: 'human'. A row with neither may have been a client's (clients' tokens
-- carry neither) or a person's whose tokens carry neither: it is 'unsettled', and the next
-- sign-in of that subject settles it to its own kind, keeping its grants, groups and
-- entitlements (deskpool.identity.store.UPSERT_USER_CTES); a sign-in of the other kind after that
-- gets a user of its own. Existing users keep working either way.
ALTER TABLE users
    ADD COLUMN kind text NOT NULL DEFAULT 'human'
        CHECK (kind IN ('human', 'service', 'unsettled'));
UPDATE users SET kind = 'unsettled' WHERE email IS NULL AND display_name IS NULL;
ALTER TABLE users DROP CONSTRAINT users_issuer_subject_key;
ALTER TABLE users ADD CONSTRAINT users_issuer_subject_kind_key UNIQUE (issuer, subject, kind);
