-- Capacity and power schedules (deskpool.schedules): a schedule's weekly phases and exception
-- dates are JSON documents whose meaning follows deskpool.schedules.model (the SQL is in
-- deskpool.schedules.store). A pool may reference one; without one it keeps its own min_size
-- and spare around the clock. The reconciler records what each pool had at each pass in
-- pool_capacity_samples (pruned after SCHEDULE_SAMPLES_RETENTION), next to the phase and
-- targets in force then.

CREATE TABLE schedules (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL,
    time_zone   text NOT NULL,
    phases      jsonb NOT NULL,
    exceptions  jsonb NOT NULL DEFAULT '[]'::jsonb,
    generation  integer NOT NULL DEFAULT 1 CHECK (generation >= 1),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX schedules_name ON schedules (lower(name));

-- A schedule in use by a pool cannot be deleted (the service answers 409 first).
ALTER TABLE pools ADD COLUMN schedule_id uuid REFERENCES schedules (id) ON DELETE RESTRICT;
CREATE INDEX pools_schedule ON pools (schedule_id) WHERE schedule_id IS NOT NULL;

CREATE TABLE pool_capacity_samples (
    pool_id      uuid NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL,
    ready        integer NOT NULL,
    in_use       integer NOT NULL,
    powered_off  integer NOT NULL,
    other        integer NOT NULL,
    phase        text,
    min_ready    integer,
    spare        integer,
    PRIMARY KEY (pool_id, at)
);
CREATE INDEX pool_capacity_samples_at ON pool_capacity_samples (at);
