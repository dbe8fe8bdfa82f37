"""Configuration: every variable of SPEC.md, its default, its parsing and its errors."""

from __future__ import annotations

import pytest

from deskpool.config import (
    REDACTED,
    Config,
    HostPort,
    SettingRegistry,
    declare_core_settings,
    format_duration,
    load_config,
    parse_duration,
)
from deskpool.errors import ConfigError
from deskpool.host import discover

REQUIRED = {
    "DATABASE_URL": "postgresql://app:s3cr3t-pw@db.internal:5432/deskpool",
    "KVSTORE_ADDR": "127.0.0.1:6379",
}

# SPEC.md §5.3 and §8: every variable and its default, as the service reads it.
SPEC_DEFAULTS = {
    "APP_ENV": "development",
    "LOG_LEVEL": "info",
    "API_ADDR": HostPort("127.0.0.1", 8080),
    "API_SHUTDOWN_TIMEOUT": 10.0,
    "OPENAPI_PATH": "api/openapi/openapi.yaml",
    "API_CORS_ALLOWED_ORIGINS": (),
    "METRICS_ADDR": HostPort("0.0.0.0", 9090),
    "DATABASE_MAX_CONNS": 10,
    "KVSTORE_PASSWORD": "",
    "KVSTORE_DB": 0,
    "DBSERVER_PASSWORD": "",
    "SECRETS_MASTER_KEY": b"",
    "SECRETS_MASTER_KEY_PREVIOUS": b"",
    "GATEWAY_ADDR": HostPort("0.0.0.0", 8081),
    "DESKTOPD_ADDRESS": HostPort("desktopd", 4822),
    "GATEWAY_PUBLIC_WS_URL": "",
    "DESKTOPD_LOG_LEVEL": "info",
    "WORKER_POLL_INTERVAL": 60.0,
    "POOL_RECONCILE_INTERVAL": 30.0,
    "POOL_RECONCILE_BATCH_SIZE": 50,
    "GUEST_AGENT_WAIT_TIMEOUT": 600.0,
    "WINDOWS_READY_WAIT_TIMEOUT": 1800.0,
    "WORKER_LEASE_DURATION": 300.0,
    "WORKER_SHUTDOWN_TIMEOUT": 30.0,
    "AUDIT_RETENTION_MONTHS": 0,
    "AUDIT_MAINTENANCE_INTERVAL": 86400.0,
    "LICENSE_REPORT_URL": "",
    "LICENSE_REPORT_INTERVAL": 86400.0,
    "LICENSE_WATERMARK_INTERVAL": 3600.0,
    "LICENSE_MANIFEST_PATH": "",
    "AUTH_OIDC_ISSUER_URL": "",
    "AUTH_OIDC_AUDIENCE": "",
    "AUTH_OIDC_GROUPS_CLAIM": "groups",
    "AUTH_OIDC_ROLES_CLAIM": "roles",
    "AUTH_BOOTSTRAP_ADMIN_EMAILS": (),
    "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": (),
    "AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS": (),
    "WEB_PUBLIC_API_BASE_URL": "http://localhost:8080",
    "WEB_PUBLIC_OIDC_AUTHORITY": "",
    "WEB_PUBLIC_OIDC_CLIENT_ID": "",
    "WEB_PUBLIC_OIDC_SCOPE": "openid profile email groups",
    "WEB_PUBLIC_OIDC_LOGOUT_URL": "",
    "DBSERVER_DB": "deskpool",
    "DBSERVER_USER": "deskpool",
}


def core_settings() -> SettingRegistry:
    """Every part's settings: the core's, the platform areas', every installed plugin's.

    SPEC.md's variables are declared by the parts that read them (the api, worker, gateway and
    web components, the oidc auth provider, the http licensing reporter), so a deployment's
    configuration is all of them together.
    """
    registry = SettingRegistry()
    for setting in discover({}).settings():
        registry.add(setting)
    return registry


def load(**environ: str) -> Config:
    return load_config(core_settings(), {**REQUIRED, **environ})


def test_every_spec_variable_has_its_default() -> None:
    config = load_config(core_settings(), REQUIRED)
    for name, default in SPEC_DEFAULTS.items():
        assert config[name] == default, name


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("24h", 86400), ("1h30m", 5400), ("250ms", 0.25), ("1.5s", 1.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "5 minutes", "", "m", "-5s", "5d"])
def test_bad_durations_name_the_variable(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(POOL_RECONCILE_INTERVAL=text)
    assert "POOL_RECONCILE_INTERVAL" in str(caught.value)


def test_format_duration_round_trips() -> None:
    for text in ("30s", "5m", "24h", "1h30m", "250ms"):
        assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


def test_metrics_addr_empty_disables_but_unset_takes_the_default() -> None:
    assert load(METRICS_ADDR="")["METRICS_ADDR"] is None
    assert load()["METRICS_ADDR"] == HostPort("0.0.0.0", 9090)


def test_a_listen_address_may_ask_for_any_port_a_connect_address_may_not() -> None:
    config = load(API_ADDR="127.0.0.1:0", METRICS_ADDR="[::1]:0", GATEWAY_ADDR="0.0.0.0:0")
    assert config["API_ADDR"] == HostPort("127.0.0.1", 0)
    assert config["METRICS_ADDR"] == HostPort("::1", 0)
    assert config["GATEWAY_ADDR"] == HostPort("0.0.0.0", 0)
    with pytest.raises(ConfigError, match="KVSTORE_ADDR"):
        load(KVSTORE_ADDR="127.0.0.1:0")
    with pytest.raises(ConfigError, match="API_ADDR"):
        load(API_ADDR="127.0.0.1:65536")


def test_redis_addr_is_an_alias_of_kvstore_addr() -> None:
    config = load_config(
        core_settings(), {"DATABASE_URL": REQUIRED["DATABASE_URL"], "REDIS_ADDR": "cache:6380"}
    )
    assert config["KVSTORE_ADDR"] == HostPort("cache", 6380)
    assert config.source("KVSTORE_ADDR") == "REDIS_ADDR"


def test_missing_required_variables_are_all_reported() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(core_settings(), {"LOG_LEVEL": "loud", "API_ADDR": "nowhere"})
    message = str(caught.value)
    for name in ("DATABASE_URL", "KVSTORE_ADDR", "REDIS_ADDR", "LOG_LEVEL", "API_ADDR"):
        assert name in message


def test_secrets_never_appear_in_repr_or_display() -> None:
    key = "q" * 43 + "="
    config = load(
        KVSTORE_PASSWORD="kv-secret-pw", SECRETS_MASTER_KEY=key, DBSERVER_PASSWORD="dbs-pw"
    )
    shown = repr(config) + str(config.display())
    for secret in ("s3cr3t-pw", "kv-secret-pw", key, "dbs-pw"):
        assert secret not in shown
    assert REDACTED in shown
    assert "db.internal" in config.display()["DATABASE_URL"]


def test_an_invalid_master_key_is_named_but_never_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        load(SECRETS_MASTER_KEY="not-a-key-at-all-but-secret")
    assert "SECRETS_MASTER_KEY" in str(caught.value)
    assert "not-a-key-at-all-but-secret" not in str(caught.value)


def test_lists_and_bindings() -> None:
    config = load(
        API_CORS_ALLOWED_ORIGINS="https://a.example, https://b.example",
        AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS="vdi-admins=admins,staff=users",
    )
    assert config["API_CORS_ALLOWED_ORIGINS"] == ("https://a.example", "https://b.example")
    assert config["AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS"] == (
        ("vdi-admins", "admins"),
        ("staff", "users"),
    )
    with pytest.raises(ConfigError, match="AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS"):
        load(AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS="no-equals-sign")


def test_config_is_frozen() -> None:
    config = load()
    with pytest.raises(AttributeError):
        config.x = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config["APP_ENV"] = "prod"  # type: ignore[index]


def test_a_setting_declared_twice_is_an_error() -> None:
    registry = core_settings()
    with pytest.raises(ValueError, match="APP_ENV is declared twice"):
        declare_core_settings(registry)
