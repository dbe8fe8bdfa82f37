-- Image rollouts (deskpool.rollouts), a pool's image history, and the notices that warn a user
-- before a forced log-off (deskpool.notices). Meanings follow deskpool.rollouts.model and
-- deskpool.notices.model; the SQL is in deskpool.rollouts.store and deskpool.notices.store.
-- Each desktop's template (desktops.template, 0007) is the template its current VM was built
-- from.

CREATE TABLE rollouts (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    pool_id            uuid NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    from_template      text NOT NULL,
    to_template        text NOT NULL,
    canary             integer NOT NULL DEFAULT 1 CHECK (canary >= 0),
    batch_size         integer NOT NULL DEFAULT 1 CHECK (batch_size >= 1),
    min_ready          integer NOT NULL CHECK (min_ready >= 0),
    surge              integer NOT NULL DEFAULT 0 CHECK (surge >= 0),
    in_use             text NOT NULL DEFAULT 'wait_for_logoff'
                       CHECK (in_use IN ('wait_for_logoff', 'force_logoff')),
    warning_seconds    integer NOT NULL DEFAULT 300 CHECK (warning_seconds >= 0),
    message            text NOT NULL DEFAULT '',
    start_at           timestamptz NOT NULL DEFAULT now(),
    stop_on_error      boolean NOT NULL DEFAULT true,
    recreate_assigned  boolean NOT NULL DEFAULT false,
    state              text NOT NULL DEFAULT 'scheduled'
                       CHECK (state IN ('scheduled', 'canary', 'rolling', 'paused',
                                        'succeeded', 'failed', 'cancelled')),
    -- The state a paused rollout resumes into.
    paused_from        text CHECK (paused_from IN ('scheduled', 'canary', 'rolling')),
    reason             text NOT NULL DEFAULT '',
    created_by         text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
-- At most one active rollout per pool.
CREATE UNIQUE INDEX rollouts_one_active ON rollouts (pool_id)
    WHERE state IN ('scheduled', 'canary', 'rolling', 'paused');
CREATE INDEX rollouts_pool ON rollouts (pool_id, created_at DESC, id DESC);

-- What a rollout did to each desktop it touched. Desktops are not foreign keys: the history
-- outlives them.
CREATE TABLE rollout_desktops (
    rollout_id    uuid NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    desktop_id    uuid NOT NULL,
    desktop_name  text NOT NULL,
    role          text NOT NULL CHECK (role IN ('canary', 'batch')),
    state         text NOT NULL
                  CHECK (state IN ('waiting_for_logoff', 'warned', 'replacing', 'replaced',
                                   'failed')),
    warned_at     timestamptz,
    logoff_at     timestamptz,
    error         text,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rollout_id, desktop_id)
);
CREATE INDEX rollout_desktops_desktop ON rollout_desktops (desktop_id);

-- Every template a pool has run: when it became the pool's, who made it so, and how.
CREATE TABLE pool_images (
    id          bigserial PRIMARY KEY,
    pool_id     uuid NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    template    text NOT NULL,
    since       timestamptz NOT NULL DEFAULT now(),
    set_by      text NOT NULL,
    how         text NOT NULL CHECK (how IN ('created', 'changed', 'rollout', 'reverted')),
    rollout_id  uuid REFERENCES rollouts (id) ON DELETE SET NULL
);
CREATE INDEX pool_images_pool ON pool_images (pool_id, since DESC, id DESC);
INSERT INTO pool_images (pool_id, template, since, set_by, how)
     SELECT id, template, created_at, 'system:migration', 'created' FROM pools;

-- A notice to the user of a desktop: their session ends at ends_at, because of reason.
-- Users and desktops are not foreign keys: the history outlives them.
CREATE TABLE desktop_notices (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    desktop_id  uuid NOT NULL,
    pool_id     uuid NOT NULL,
    user_id     uuid NOT NULL,
    ends_at     timestamptz NOT NULL,
    reason      text NOT NULL,
    message     text NOT NULL DEFAULT '',
    source      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    cleared_at  timestamptz
);
CREATE UNIQUE INDEX desktop_notices_open ON desktop_notices (desktop_id, user_id, source)
    WHERE cleared_at IS NULL;
CREATE INDEX desktop_notices_user ON desktop_notices (user_id) WHERE cleared_at IS NULL;
