"""What the worker pushes to other systems: webhook deliveries (and their settings).

The worker runs one :class:`~deskpool.webhooks.sender.WebhookSender` for as long as it runs;
its settings are the worker's own (only the worker sends), in the reference's section
:data:`SECTION`.
"""

from __future__ import annotations

from datetime import timedelta

from deskpool.config import Config, SettingRegistry, parse_duration
from deskpool.runtime import Runtime
from deskpool.webhooks.model import RetryPolicy
from deskpool.webhooks.sender import SenderSettings, WebhookSender

#: The reference section of these settings.
SECTION = "Event export"


def declare_settings(registry: SettingRegistry) -> None:
    """Declare the webhook sender's settings."""
    export = registry.section(SECTION, owner="worker")
    export.add(
        "WEBHOOK_RETRY_BACKOFF",
        parse_duration,
        "5s",
        "Wait before retrying a webhook delivery that failed once; it doubles with each "
        "further failure, up to WEBHOOK_RETRY_MAX_BACKOFF.",
        type_name="duration",
    )
    export.add(
        "WEBHOOK_RETRY_MAX_BACKOFF",
        parse_duration,
        "1h",
        "Longest wait between two attempts of a webhook delivery.",
        type_name="duration",
    )
    export.add(
        "WEBHOOK_DISABLE_AFTER",
        parse_duration,
        "120h",
        "How long a webhook's deliveries may keep failing before the webhook is disabled "
        "(it says why; enabling it again sends its pending deliveries).",
        type_name="duration",
    )
    export.add(
        "WEBHOOK_TIMEOUT",
        parse_duration,
        "10s",
        "How long a webhook delivery waits for the receiver's answer.",
        type_name="duration",
    )


def retry_policy(config: Config) -> RetryPolicy:
    """The webhook retry policy the configuration sets."""
    return RetryPolicy(
        backoff=timedelta(seconds=config.duration("WEBHOOK_RETRY_BACKOFF")),
        max_backoff=timedelta(seconds=config.duration("WEBHOOK_RETRY_MAX_BACKOFF")),
        disable_after=timedelta(seconds=config.duration("WEBHOOK_DISABLE_AFTER")),
    )


def webhook_sender(runtime: Runtime, worker_id: str) -> WebhookSender:
    """The worker's webhook sender."""
    config = runtime.config
    return WebhookSender(
        runtime,
        SenderSettings(
            holder=worker_id,
            policy=retry_policy(config),
            timeout=config.duration("WEBHOOK_TIMEOUT"),
        ),
    )
