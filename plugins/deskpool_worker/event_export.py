"""What the worker pushes to other systems: webhook deliveries and the syslog export.

The worker runs one :class:`~deskpool.webhooks.sender.WebhookSender` for as long as it runs,
and a :class:`~deskpool.syslog_export.streamer.SyslogStreamer` when ``SYSLOG_ADDRESS`` is set;
their settings are the worker's own (only the worker sends), in the reference's section
:data:`SECTION`.
"""

from __future__ import annotations

import socket
import ssl
from datetime import timedelta

from deskpool.config import Config, SettingRegistry, parse_duration
from deskpool.config_values import parse_bool, parse_choice, parse_host_port, parse_int
from deskpool.runtime import Runtime
from deskpool.syslog_export.model import FACILITIES, Origin
from deskpool.syslog_export.streamer import StreamSettings, SyslogStreamer
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


def declare_syslog_settings(registry: SettingRegistry) -> None:
    """Declare the syslog export's settings."""
    export = registry.section(SECTION, owner="worker")
    export.add(
        "SYSLOG_ADDRESS",
        parse_host_port,
        None,
        "host:port of a syslog server (TCP) the worker streams every audit event to, as RFC "
        "5424 messages with octet-counting framing (RFC 6587). Unset or empty: no export.",
        type_name="host:port",
        empty_disables=True,
    )
    export.add(
        "SYSLOG_TLS",
        parse_bool,
        "false",
        "Speak TLS to the syslog server (RFC 5425), verifying its certificate and name.",
        type_name="boolean",
    )
    export.add(
        "SYSLOG_TLS_CA_FILE",
        str,
        None,
        "PEM file of the certificate authorities the syslog server's certificate is verified "
        "against; unset: the system's.",
        type_name="path",
    )
    export.add(
        "SYSLOG_HOSTNAME",
        str,
        None,
        "HOSTNAME of the syslog messages; unset: this machine's name.",
    )
    export.add(
        "SYSLOG_FACILITY",
        parse_choice(*FACILITIES),
        "authpriv",
        "Facility of the syslog messages (the severity follows the event's outcome: info for "
        "success, warning for denied, err for failure).",
        type_name="facility name",
    )
    export.add(
        "SYSLOG_BATCH_SIZE",
        parse_int(1, 10000),
        "500",
        "Most audit events written before the export's cursor moves past them (a server that "
        "went away receives at most this many again).",
        type_name="integer",
    )
    export.add(
        "SYSLOG_CONFIRM_WAIT",
        parse_duration,
        "500ms",
        "How long the connection must stay open after a batch is written before the cursor "
        "moves past it (syslog over TCP has no acknowledgement).",
        type_name="duration",
    )


def syslog_streamer(runtime: Runtime, worker_id: str) -> SyslogStreamer | None:
    """The worker's syslog streamer; ``None`` when ``SYSLOG_ADDRESS`` is not set."""
    config = runtime.config
    address = config["SYSLOG_ADDRESS"]
    if address is None:
        return None
    tls = None
    if config["SYSLOG_TLS"]:
        tls = ssl.create_default_context(cafile=config["SYSLOG_TLS_CA_FILE"] or None)
    origin = Origin(
        hostname=config["SYSLOG_HOSTNAME"] or socket.gethostname(),
        facility=FACILITIES[config["SYSLOG_FACILITY"]],
    )
    return SyslogStreamer(
        runtime,
        StreamSettings(
            host=address.host,
            port=address.port,
            origin=origin,
            holder=worker_id,
            tls=tls,
            batch_size=int(config["SYSLOG_BATCH_SIZE"]),
            confirm_wait=config.duration("SYSLOG_CONFIRM_WAIT"),
        ),
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
