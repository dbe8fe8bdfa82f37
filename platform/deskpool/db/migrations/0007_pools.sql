-- Desktop pools, their desktops, entitlements and the orphans the reconciler reported.
-- Field meanings follow deskpool.pools.model (Pool, Desktop); states follow deskpool.pools.states.

CREATE TABLE pools (
    id                     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                   text NOT NULL,
    description            text NOT NULL DEFAULT '',
    cluster_id             uuid NOT NULL REFERENCES clusters (id),
    template               text NOT NULL,
    kind                   text NOT NULL CHECK (kind IN ('non_persistent', 'persistent')),
    os_type                text NOT NULL CHECK (os_type IN ('linux', 'windows')),
    clone_mode             text NOT NULL DEFAULT 'linked' CHECK (clone_mode IN ('linked', 'full')),
    min_size               integer NOT NULL CHECK (min_size >= 0),
    max_size               integer NOT NULL CHECK (max_size >= min_size),
    spare                  integer NOT NULL DEFAULT 0 CHECK (spare >= 0 AND spare <= max_size),
    naming_pattern         text NOT NULL,
    target_nodes           text[] NOT NULL DEFAULT '{}',
    storage                text,
    state                  text NOT NULL DEFAULT 'enabled'
                           CHECK (state IN ('enabled', 'disabled', 'draining')),
    generation             bigint NOT NULL DEFAULT 1,
    reconciled_generation  bigint NOT NULL DEFAULT 0,
    reconciled_at          timestamptz,
    health                 jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- Active Directory join of Windows desktops: {"domain", "username", "organizational_unit"};
    -- the password is sealed in sealed_secrets (kind pool.domain_join, field password).
    domain_join            jsonb,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX pools_name ON pools (lower(name));
CREATE INDEX pools_cluster ON pools (cluster_id);
-- The reconciler takes the oldest-reconciled pools first.
CREATE INDEX pools_reconcile_order ON pools (reconciled_at NULLS FIRST, id);

CREATE TABLE desktops (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    pool_id             uuid NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    cluster_id          uuid NOT NULL REFERENCES clusters (id),
    name                text NOT NULL,
    state               text NOT NULL,
    vm_id               text,
    node                text,
    template            text,
    assigned_user       uuid REFERENCES users (id) ON DELETE SET NULL,
    in_session          boolean NOT NULL DEFAULT false,
    used_since_refresh  boolean NOT NULL DEFAULT false,
    failed_step         text,
    last_error          text,
    failure_count       integer NOT NULL DEFAULT 0,
    last_failed_at      timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    state_changed_at    timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
-- Names are unique across a cluster (host names compare without case).
CREATE UNIQUE INDEX desktops_cluster_name ON desktops (cluster_id, lower(name));
CREATE INDEX desktops_pool_state ON desktops (pool_id, state);
CREATE INDEX desktops_assigned ON desktops (assigned_user) WHERE assigned_user IS NOT NULL;

CREATE TABLE pool_entitlements (
    pool_id       uuid NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    subject_type  text NOT NULL CHECK (subject_type IN ('user', 'group')),
    subject_id    uuid NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, subject_type, subject_id)
);
CREATE INDEX pool_entitlements_subject ON pool_entitlements (subject_id);

CREATE TABLE pool_orphans (
    cluster_id   uuid NOT NULL REFERENCES clusters (id) ON DELETE CASCADE,
    vm_id        text NOT NULL,
    name         text NOT NULL,
    pool_id      uuid,
    desktop_id   uuid,
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, vm_id)
);
