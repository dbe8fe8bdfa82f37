-- Identity and access: users (created at first sign-in), local groups, custom roles, grants of
-- roles or single permissions to users or groups, and OIDC group claim bindings.
-- deskpool stores no passwords and no API keys (SPEC.md §5.1 rule 3).

CREATE TABLE users (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    issuer        text NOT NULL,
    subject       text NOT NULL,
    email         text,
    display_name  text,
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (issuer, subject)
);
CREATE INDEX users_email ON users (lower(email));

CREATE TABLE groups (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    key          text NOT NULL UNIQUE CHECK (key ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    name         text NOT NULL,
    description  text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE group_members (
    group_id  uuid NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    user_id   uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    added_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members (user_id);

-- Custom roles; the built-in ones are defined in code and cannot be changed.
CREATE TABLE roles (
    key          text PRIMARY KEY CHECK (key ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    description  text NOT NULL DEFAULT '',
    permissions  text[] NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE grants (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    subject_type  text NOT NULL CHECK (subject_type IN ('user', 'group')),
    subject_id    uuid NOT NULL,
    role_key      text,
    permission    text,
    source        text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'bootstrap')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((role_key IS NULL) <> (permission IS NULL))
);
CREATE UNIQUE INDEX grants_unique
    ON grants (subject_type, subject_id, coalesce(role_key, ''), coalesce(permission, ''));
CREATE INDEX grants_subject ON grants (subject_id);

CREATE TABLE oidc_group_bindings (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    claim_value  text NOT NULL,
    group_id     uuid NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    source       text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'bootstrap')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (claim_value, group_id)
);
