-- Hypervisor cluster connections. Each record names the hypervisor driver that reaches the
-- cluster (an entry point of deskpool.hypervisor_drivers; a record may outlive its driver's
-- package, and then reads as driver_status "not_installed"), its endpoint, TLS settings and
-- driver options. Credentials are not here: they are sealed by the secret store in
-- sealed_secrets as ("cluster.credentials", <cluster id>, "values") and deleted with the record.
-- The last_check_* columns keep the outcome of the last connection check.
CREATE TABLE clusters (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name              text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    driver            text NOT NULL CHECK (driver ~ '^[A-Za-z0-9_-]{1,100}$'),
    endpoint          text NOT NULL CHECK (length(endpoint) BETWEEN 1 AND 2048),
    tls_verify        boolean NOT NULL DEFAULT true,
    ca_certificate    text,
    fingerprint       text CHECK (fingerprint ~ '^([0-9A-F]{2}:){31}[0-9A-F]{2}$'),
    options           jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(options) = 'object'),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    last_check_at     timestamptz,
    last_check_ok     boolean,
    last_check_error  text
);

-- Names are unique regardless of case ("Lab" and "lab" would confuse everyone).
CREATE UNIQUE INDEX clusters_name_key ON clusters (lower(name));
