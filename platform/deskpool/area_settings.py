"""The settings of the platform's areas: those that platform code reads, in any component.

A setting is declared by the part that reads it. The platform may not count on a plugin being
loaded (components are plugins, and a process loads only the ones it runs), so a setting that
platform code reads, or that more than one component reads, is declared here by the area it
belongs to: the browser-facing addresses (the API's CORS, the gateway's origin check and the
console all read them), identity's bootstrap, the sessions' tunnel URL, pool reconciliation and
licensing. The core's own settings (database, key-value store, secrets, logging, ops listener,
plugin choice) are in :mod:`deskpool.config`; a setting only one component or plugin reads is
declared by it through ``deskpool_declare_settings``.
"""

from __future__ import annotations

from deskpool.config import (
    SettingRegistry,
    parse_bindings,
    parse_duration,
    parse_int,
    parse_list,
    parse_url,
)

__all__ = ["declare_area_settings"]


def declare_area_settings(registry: SettingRegistry) -> None:
    """Declare every area's settings."""
    _declare_browser_settings(registry)
    _declare_identity_settings(registry)
    _declare_session_settings(registry)
    _declare_pool_settings(registry)
    _declare_licensing_settings(registry)
    _declare_recording_settings(registry)


def _declare_browser_settings(registry: SettingRegistry) -> None:
    """The browser side of the deployment: the API, the gateway and the console read these."""
    registry.section("General, API and ops").add(
        "API_CORS_ALLOWED_ORIGINS",
        parse_list,
        "",
        "Comma-separated browser origins allowed to call the API (exact origins, or `*` without "
        "credentials). Unset in a process that runs the web component on port 0 "
        "(`WEB_ADDR=127.0.0.1:0`): the origin it bound.",
        type_name="list",
        required="Yes, if the console is served from a different origin",
    )
    web = registry.section("Web console (browser side)")
    web.add(
        "WEB_PUBLIC_API_BASE_URL",
        parse_url("http", "https"),
        "http://localhost:8080",
        "Public base URL of the API that the browser calls. Unset in a process that runs the api "
        "on port 0 (`API_ADDR=127.0.0.1:0`): `http://` the address it bound.",
        type_name="url",
        required="Yes in production",
    )
    web.add(
        "WEB_PUBLIC_OIDC_CLIENT_ID",
        str,
        "",
        "OIDC client ID of the console application.",
        required="Yes",
    )
    web.add(
        "WEB_PUBLIC_OIDC_SCOPE",
        str,
        "openid profile email groups",
        "Scopes requested at sign-in. Include `offline_access` for silent token refresh.",
    )


def _declare_identity_settings(registry: SettingRegistry) -> None:
    """Who becomes an administrator at first sign-in, and the configured group bindings.

    The auth provider plugin declares its own settings in the same section (the oidc plugin:
    ``AUTH_OIDC_ISSUER_URL``, ``AUTH_OIDC_AUDIENCE``, ``AUTH_OIDC_GROUPS_CLAIM``...).
    """
    auth = registry.section("Authentication")
    auth.add(
        "AUTH_BOOTSTRAP_ADMIN_EMAILS",
        parse_list,
        "",
        "Email addresses that receive the `platform_admin` role automatically at first sign-in "
        "(only when the token's `email_verified` is `true`, and only for the first account with "
        "the address; see docs/operators/access.md).",
        type_name="list",
        required="Recommended for first login",
    )
    auth.add(
        "AUTH_BOOTSTRAP_ADMIN_SUBJECTS",
        parse_list,
        "",
        "Same mechanism, matched on the OIDC subject (exactly).",
        type_name="list",
    )
    auth.add(
        "AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS",
        parse_bindings,
        "",
        "Comma-separated list of `<claim value>=<local group key>` bootstrap bindings (applied at "
        "startup: created, or removed when no longer listed).",
        type_name="bindings",
    )


def _declare_session_settings(registry: SettingRegistry) -> None:
    """The tunnel URL the API hands out with a connection token (the gateway serves it)."""
    registry.section("Gateway and desktop daemon").add(
        "GATEWAY_PUBLIC_WS_URL",
        parse_url("wss", "ws"),
        "",
        "Public `wss://` URL of the gateway tunnel, returned in the connection-token response. "
        "Unset in a process that runs the gateway on port 0 (`GATEWAY_ADDR=127.0.0.1:0`): "
        "`ws://` the address it bound, `/websocket-tunnel`.",
        type_name="url",
        required="Yes for browser desktop access",
    )


def _declare_pool_settings(registry: SettingRegistry) -> None:
    """Pool reconciliation and the provisioning waits of SPEC §8.5."""
    pools = registry.section("Worker and reconciliation")
    pools.add(
        "POOL_RECONCILE_INTERVAL",
        parse_duration,
        "30s",
        "How often pool reconciliation runs.",
        type_name="duration",
    )
    pools.add(
        "POOL_RECONCILE_BATCH_SIZE",
        parse_int(1, 100000),
        "50",
        "Maximum number of pools reconciled per cycle.",
        type_name="integer",
    )
    pools.add(
        "GUEST_AGENT_WAIT_TIMEOUT",
        parse_duration,
        "10m",
        "How long provisioning waits for the guest agent before that step fails.",
        type_name="duration",
    )
    pools.add(
        "WINDOWS_READY_WAIT_TIMEOUT",
        parse_duration,
        "30m",
        "How long provisioning waits for Windows Sysprep/OOBE before that step fails.",
        type_name="duration",
    )


def _declare_licensing_settings(registry: SettingRegistry) -> None:
    """The licensing tasks' cadences and the build manifest (the reporter declares its URL)."""
    licensing = registry.section("Licensing")
    licensing.add(
        "LICENSE_REPORT_INTERVAL",
        parse_duration,
        "24h",
        "Activation-report cadence, with jitter.",
        type_name="duration",
    )
    licensing.add(
        "LICENSE_WATERMARK_INTERVAL",
        parse_duration,
        "1h",
        "How often the worker persists the monotonic license-expiry watermark.",
        type_name="duration",
    )
    licensing.add(
        "LICENSE_MANIFEST_PATH",
        str,
        "",
        "Path of the signed build manifest used for tamper detection.",
        type_name="path",
        shown_default="empty, meaning a file named after the executable with a manifest suffix",
    )


def _declare_recording_settings(registry: SettingRegistry) -> None:
    """Session recordings: the gateway writes them, the API serves them, the worker expires them."""
    recordings = registry.section("Session recordings")
    recordings.add(
        "RECORDINGS_PATH",
        str,
        "/var/lib/deskpool/recordings",
        "Folder where the `files` recording store keeps recordings (sealed chunk files; every "
        "gateway, api and worker process must see the same folder).",
        type_name="path",
    )
    recordings.add(
        "RECORDINGS_RETENTION_DAYS",
        parse_int(0, 36500),
        "90",
        "Days a session recording is kept after it started; the worker deletes older ones. "
        "0 keeps every recording.",
        type_name="integer",
    )
    recordings.add(
        "RECORDINGS_CHUNK_SECONDS",
        parse_duration,
        "2s",
        "Longest time recorded output waits in the gateway's recording writer before it is "
        "written as a chunk (a writer whose gateway was killed still writes what it was handed).",
        type_name="duration",
    )
    recordings.add(
        "RECORDINGS_MAINTENANCE_INTERVAL",
        parse_duration,
        "1h",
        "How often the worker deletes recordings older than `RECORDINGS_RETENTION_DAYS`.",
        type_name="duration",
    )
