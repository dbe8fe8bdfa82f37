-- Event subscriptions (webhooks, deskpool.webhooks). A subscription sends the events its
-- filters select to its URL, signed after the Standard Webhooks specification with its own
-- secret (sealed in sealed_secrets, kind webhook.signing, never stored in clear here).
CREATE TABLE webhook_subscriptions (
    id               uuid PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    url              text NOT NULL,
    -- Event types and prefix wildcards ('session.*', 'audit.pool.*', '*'), deskpool.events.
    event_types      text[] NOT NULL,
    enabled          boolean NOT NULL DEFAULT true,
    -- Why the platform disabled it (after failing for WEBHOOK_DISABLE_AFTER), and when.
    disabled_reason  text,
    disabled_at      timestamptz,
    -- Since when its oldest pending delivery has been failing; NULL while it delivers.
    failing_since    timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- The worker sending its deliveries, until when (one at a time keeps them in order).
    lease_holder     text,
    lease_until      timestamptz
);
CREATE INDEX webhook_subscriptions_types ON webhook_subscriptions USING gin (event_types)
    WHERE enabled;

-- The outbox: one row per event and subscription, written by deskpool.audit.record_audit_event
-- in the event's own transaction. tx_id orders them as committed-and-final: a row is sent only
-- once every transaction that could still write an earlier one has ended (its tx_id is below
-- the oldest running transaction's), so the order per subscription is (tx_id, id), never
-- overtaken by a late commit.
CREATE TABLE webhook_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id            xid8 NOT NULL DEFAULT pg_current_xact_id(),
    subscription_id  uuid NOT NULL REFERENCES webhook_subscriptions ON DELETE CASCADE,
    -- Standard Webhooks' webhook-id: the same for every delivery of one event.
    message_id       text NOT NULL,
    event_type       text NOT NULL,
    audit_event_id   bigint,
    occurred_at      timestamptz NOT NULL,
    payload          jsonb NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    -- What a redelivery or a replay was made of, if it was.
    redelivery_of    bigint
);
CREATE INDEX webhook_deliveries_pending
    ON webhook_deliveries (subscription_id, tx_id, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_listed ON webhook_deliveries (subscription_id, id DESC);

-- Every attempt of a delivery: when, the HTTP status or the error, how long it took.
CREATE TABLE webhook_attempts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id      bigint NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
    attempted_at     timestamptz NOT NULL DEFAULT now(),
    status_code      integer,
    error            text,
    duration_ms      integer NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
