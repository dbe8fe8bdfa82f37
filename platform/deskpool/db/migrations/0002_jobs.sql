-- The job queue: every slow or risky operation runs as a job in the worker.
--
-- A job is claimed with FOR UPDATE SKIP LOCKED (due jobs, highest priority first) under a
-- lease of WORKER_LEASE_DURATION. Each claim increments the job's fencing token (fence); a
-- heartbeat, a completion, a failure or a release is accepted only with the current token, so
-- a worker whose lease expired and was reclaimed cannot record a late result.
CREATE TABLE jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind              text NOT NULL,
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    state             text NOT NULL DEFAULT 'queued'
                      CHECK (state IN ('queued', 'running', 'succeeded', 'dead', 'cancelled')),
    priority          integer NOT NULL DEFAULT 0,
    run_at            timestamptz NOT NULL DEFAULT now(),
    attempts          integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    idempotency_key   text,
    resource_type     text,
    resource_id       text,
    fence             bigint NOT NULL DEFAULT 0,
    worker            text,
    lease_expires_at  timestamptz,
    heartbeat_at      timestamptz,
    reclaims          integer NOT NULL DEFAULT 0,
    last_error        text,
    errors            jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz
);

-- Claims walk queued jobs in priority order; the other states have small partial indexes of
-- their own, so claims and completions touch as few index entries as possible and heartbeats
-- (which change no indexed column) can be HOT updates.
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_running ON jobs (id) WHERE state = 'running';
CREATE INDEX jobs_dead ON jobs (kind, id) WHERE state = 'dead';
-- A desktop's (or any resource's) jobs.
CREATE INDEX jobs_resource ON jobs (resource_type, resource_id, id DESC)
    WHERE resource_type IS NOT NULL;
-- Enqueueing the same key twice gives the same job.
CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- New jobs wake idle workers at once (LISTEN deskpool_jobs); polling is only the fallback.
CREATE FUNCTION deskpool_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('deskpool_jobs', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_enqueued AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION deskpool_jobs_notify();

-- Periodic tasks: each run is claimed with a conditional update, so it happens once per
-- interval across every worker, and a run holds a lease (with its own fencing token) so two
-- runs of one task never overlap.
CREATE TABLE periodic_tasks (
    name              text PRIMARY KEY,
    fence             bigint NOT NULL DEFAULT 0,
    worker            text,
    lease_expires_at  timestamptz,
    last_started_at   timestamptz,
    last_finished_at  timestamptz,
    last_outcome      text CHECK (last_outcome IN ('succeeded', 'failed', 'interrupted')),
    last_error        text,
    runs              bigint NOT NULL DEFAULT 0
);
