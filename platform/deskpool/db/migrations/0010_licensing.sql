-- Licensing: the installed license, the instance's id, the monotonic expiry watermark, the
-- last judged license state, and the activation-report bookkeeping. Each table holds one row
-- per deployment (slot 1).

CREATE TABLE license_installation (
    slot          smallint PRIMARY KEY DEFAULT 1 CHECK (slot = 1),
    license_id    text NOT NULL,
    document      text NOT NULL,
    installed_at  timestamptz NOT NULL DEFAULT now(),
    installed_by  text NOT NULL
);

-- The instance id (reported in activation reports, bound into the watermark's MAC), the
-- watermark, and the license state last judged by the worker (to audit each change once).
CREATE TABLE license_watermark (
    slot              smallint PRIMARY KEY DEFAULT 1 CHECK (slot = 1),
    instance_id       uuid NOT NULL DEFAULT gen_random_uuid(),
    instant           timestamptz,
    seq               bigint NOT NULL DEFAULT 0,
    evidence          text CHECK (evidence IN ('tampered', 'backwards')),
    evidence_detail   text,
    evidence_at       timestamptz,
    mac               bytea,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    judged_status     text,
    judged_edition    text,
    judged_at         timestamptz
);
INSERT INTO license_watermark (slot) VALUES (1);

CREATE TABLE license_reports (
    slot                  smallint PRIMARY KEY DEFAULT 1 CHECK (slot = 1),
    next_due_at           timestamptz,
    last_attempt_at       timestamptz,
    last_success_at       timestamptz,
    last_outcome          text,
    last_error            text,
    consecutive_failures  integer NOT NULL DEFAULT 0,
    sent                  bigint NOT NULL DEFAULT 0
);
INSERT INTO license_reports (slot) VALUES (1);
