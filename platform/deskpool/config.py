"""Configuration: declared settings, read once from the environment into one frozen structure.

Every variable deskpool reads is declared as a :class:`Setting` with its type, default,
whether it is required or secret, and its description (in the style of tox 4's configuration
declarations). Each part declares the variables it reads: the core its own
(:func:`declare_core_settings`), the platform's areas theirs (:mod:`deskpool.area_settings`),
components and plugins theirs through the ``deskpool_declare_settings`` hook. This module is the
machinery: :func:`load_config` validates them all with voluptuous, reports every problem at
once, and returns a :class:`Config`. The configuration reference in
``docs/reference/configuration.md`` is generated from the same declarations. The value types
(``parse_*``, :class:`HostPort`) are in :mod:`deskpool.config_values`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import voluptuous as vol

from deskpool.config_values import HostPort as HostPort
from deskpool.config_values import format_duration as format_duration
from deskpool.config_values import is_loopback_host as is_loopback_host
from deskpool.config_values import parse_bindings as parse_bindings
from deskpool.config_values import parse_bool as parse_bool
from deskpool.config_values import parse_choice as parse_choice
from deskpool.config_values import parse_database_url as parse_database_url
from deskpool.config_values import parse_duration as parse_duration
from deskpool.config_values import parse_host_port as parse_host_port
from deskpool.config_values import parse_int as parse_int
from deskpool.config_values import parse_list as parse_list
from deskpool.config_values import parse_listen_address as parse_listen_address
from deskpool.config_values import parse_master_key as parse_master_key
from deskpool.config_values import parse_url as parse_url
from deskpool.config_values import redact_url_password as redact_url_password
from deskpool.config_values import safe_url
from deskpool.errors import ConfigError
from deskpool_driver_api import REDACTED as REDACTED  # shown in place of every secret

T = TypeVar("T")


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Setting:
    """The declaration of one environment variable.

    :param name: the variable's name.
    :param parse: turns the raw string into the typed value; raises ``voluptuous.Invalid``.
    :param default: the raw default applied when the variable is unset, or ``None`` for none.
    :param description: one or two sentences for the reference.
    :param section: the reference section the variable is listed under.
    :param type_name: how the reference names the type (``duration``, ``host:port``...).
    :param required: how the reference states whether it is required (SPEC.md's wording).
    :param must_be_set: the process refuses to start while the variable is unset.
    :param secret: the value never appears in ``repr``, logs or ``config show``.
    :param aliases: other names accepted for the same variable (the first set one wins).
    :param empty_disables: an explicitly empty value means "disabled" (``None``), while an
        unset variable takes the default.
    :param shown_default: how the reference writes the default, when not the raw default.
    """

    name: str
    parse: Callable[[str], Any]
    default: str | None
    description: str
    section: str = "General"
    type_name: str = "string"
    required: str = "No"
    must_be_set: bool = False
    secret: bool = False
    aliases: tuple[str, ...] = ()
    empty_disables: bool = False
    shown_default: str | None = None
    owner: str = "deskpool"

    def documented_default(self) -> str:
        """The default as the reference writes it."""
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default == "":
            return "empty"
        return f"`{self.default}`"


class SettingRegistry:
    """Collects :class:`Setting` declarations from the platform and from plugins."""

    def __init__(self) -> None:
        self._settings: dict[str, Setting] = {}

    def add(self, setting: Setting) -> None:
        """Declare ``setting``; a second declaration of the same name is an error."""
        if setting.name in self._settings:
            other = self._settings[setting.name].owner
            raise ValueError(f"{setting.name} is declared twice ({other} and {setting.owner})")
        self._settings[setting.name] = setting

    def __iter__(self) -> Iterator[Setting]:
        return iter(self._settings.values())

    def __contains__(self, name: object) -> bool:
        return name in self._settings

    def __len__(self) -> int:
        return len(self._settings)

    def section(self, title: str, owner: str = "deskpool") -> SettingSection:
        """A declarer of settings listed under ``title`` in the reference, owned by ``owner``."""
        return SettingSection(self, title, owner)


@dataclass(frozen=True)
class SettingSection:
    """Declares settings of one reference section and one owner into a registry.

    ``registry.section("Worker and reconciliation", owner="worker").add(name, parse, default,
    text, type_name="duration")`` is ``registry.add(Setting(...))`` with the shared fields filled.
    """

    registry: SettingRegistry
    title: str
    owner: str = "deskpool"

    def add(
        self, name: str, parse: Callable[[str], Any], default: str | None, text: str, **kw: Any
    ) -> None:
        """Declare one setting of this section."""
        self.registry.add(
            Setting(name, parse, default, text, section=self.title, owner=self.owner, **kw)
        )


# --------------------------------------------------------------------------- the structure


class Config(Mapping[str, Any]):
    """The frozen configuration of one process: every declared variable, typed.

    Read values by name (``config["API_ADDR"]``). Secrets are kept, but never shown:
    ``repr``, :meth:`display` and logs see :data:`REDACTED` instead.
    """

    __slots__ = ("_environ", "_settings", "_sources", "_values")
    _values: dict[str, Any]
    _settings: dict[str, Setting]
    _sources: dict[str, str]
    _environ: dict[str, str]

    def __init__(
        self,
        values: Mapping[str, Any],
        settings: Mapping[str, Setting],
        sources: Mapping[str, str],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_settings", dict(settings))
        object.__setattr__(self, "_sources", dict(sources))
        object.__setattr__(self, "_environ", dict(environ or {}))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Config is read-only")

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{name} is not a declared setting") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.display().items())
        return f"Config({shown})"

    def typed(self, name: str, kind: type[T]) -> T:
        """Return ``config[name]``, checked to be of ``kind`` (for type checkers)."""
        value = self[name]
        if not isinstance(value, kind):
            raise TypeError(f"{name} is {type(value).__name__}, not {kind.__name__}")
        return value

    def duration(self, name: str) -> float:
        """Return a duration setting in seconds."""
        return float(self[name])

    def setting(self, name: str) -> Setting:
        """Return the declaration of ``name``."""
        return self._settings[name]

    def settings(self) -> list[Setting]:
        """Every declaration, in declaration order."""
        return list(self._settings.values())

    def source(self, name: str) -> str:
        """Where the value came from: ``env`` (or the alias used) or ``default``."""
        return self._sources.get(name, "default")

    def environment(self) -> dict[str, str]:
        """The variables this configuration was read from, as they were set (secrets included).

        Reading them again (:func:`load_config`) gives the same configuration: a helper process
        this one starts gets them so that it runs as configured (the gateway's recording writer).
        Never for display or logs: :meth:`display` is.
        """
        return dict(self._environ)

    def display(self) -> dict[str, str]:
        """Every value as text, with secrets and passwords in URLs redacted."""
        shown: dict[str, str] = {}
        for name, setting in self._settings.items():
            value = self._values.get(name)
            shown[name] = _display_value(setting, value)
        return shown


def _display_value(setting: Setting, value: Any) -> str:
    if value is None:
        return "(disabled)" if setting.empty_disables else ""
    if setting.secret:
        if setting.name == "DATABASE_URL" and isinstance(value, str):
            return safe_url(value)
        return REDACTED if value not in ("", b"") else ""
    if setting.type_name == "duration" and isinstance(value, float):
        return format_duration(value)
    if isinstance(value, tuple):
        return ",".join("=".join(item) if isinstance(item, tuple) else str(item) for item in value)
    return str(value)


def load_config(settings: Iterable[Setting], environ: Mapping[str, str]) -> Config:
    """Read every declared setting from ``environ``.

    :raises ConfigError: listing every missing or invalid variable, by name, at once.
    """
    declared = {setting.name: setting for setting in settings}
    raw: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    read: dict[str, str] = {}
    problems: list[str] = []
    for name, setting in declared.items():
        found = next(
            ((key, environ[key]) for key in (name, *setting.aliases) if key in environ), None
        )
        if found is None:
            raw[name] = setting.default
            if setting.must_be_set:
                names = " or ".join((name, *setting.aliases))
                problems.append(f"{names} is not set; it is required ({setting.description})")
        else:
            sources[name] = found[0]
            raw[name] = found[1]
            read[found[0]] = found[1]

    def validator(setting: Setting) -> Callable[[str | None], Any]:
        def validate(value: str | None) -> Any:
            if value is None:
                return None
            if setting.empty_disables and value.strip() == "":
                return None
            return setting.parse(value)

        return validate

    schema = vol.Schema({name: validator(setting) for name, setting in declared.items()})
    try:
        values = schema(raw)
    except vol.MultipleInvalid as invalid:
        for error in invalid.errors:
            name = str(error.path[0]) if error.path else "?"
            used = sources.get(name, name)
            problems.append(f"{used}: {error.error_message}")
        values = {}
    if problems:
        raise ConfigError(sorted(set(problems), key=problems.index))
    return Config(values, declared, sources, read)


# --------------------------------------------------------------------------- the reference


#: The reference's sections in the order it lists them: SPEC.md's order, then the
#: implementation's own. A section no part names here follows them, in declaration order.
SECTION_ORDER = (
    "General, API and ops",
    "Plugins",
    "Authentication",
    "Web console (browser side)",
    "Database and key-value store",
    "Secrets at rest",
    "Gateway and desktop daemon",
    "Worker and reconciliation",
    "Event export",
    "Licensing",
    "HTTP listeners",
)


def render_reference(settings: Iterable[Setting]) -> str:
    """Render the Markdown configuration reference from the declarations.

    The settings are declared by the parts that read them (the core, the platform's areas, each
    component and plugin), so a section gathers several parts' declarations: sections follow
    :data:`SECTION_ORDER`, and inside a section each part's settings stay together, in the order
    the parts declare them (the core's first).
    """
    by_section: dict[str, list[Setting]] = {title: [] for title in SECTION_ORDER}
    for setting in settings:
        by_section.setdefault(setting.section, []).append(setting)
    by_section = {title: members for title, members in by_section.items() if members}
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `deskpool config doc` from the declarations; do not edit. -->",
        "",
        "Every deskpool process is configured only through environment variables, read once at",
        "startup into one frozen structure. Durations are written with the suffixes `ms`, `s`,",
        "`m` and `h` (`30s`, `5m`, `24h`, `1h30m`). Secret values never appear in logs or in",
        "`deskpool config show`. All problems are reported together, each naming its variable.",
        "",
    ]
    for section, members in by_section.items():
        lines += [f"## {section}", ""]
        lines += ["| Variable | Type | Default | Required | Secret | Meaning |"]
        lines += ["|---|---|---|---|---|---|"]
        for s in members:
            meaning = s.description
            if s.aliases:
                meaning += f" Also read as `{'`, `'.join(s.aliases)}`."
            if s.empty_disables:
                meaning += " An explicitly empty value disables it."
            if s.owner != "deskpool":
                meaning += f" Declared by the `{s.owner}` plugin."
            secret = "Yes" if s.secret else "No"
            row = (
                f"| `{s.name}` | {s.type_name} | {s.documented_default()} | {s.required} "
                f"| {secret} | {meaning} |"
            )
            lines.append(row)
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the core's settings


def declare_core_settings(registry: SettingRegistry) -> None:
    """Declare the core's own settings.

    They are logging, the ops listener, the choice of plugins, the database, the key-value
    store and the secrets at rest. Every other setting is declared by the part that reads it: the platform's areas in
    :mod:`deskpool.area_settings`, the HTTP listeners in :mod:`deskpool.listener`, components and
    plugins through ``deskpool_declare_settings``.
    """
    general = registry.section("General, API and ops")
    general.add(
        "APP_ENV",
        str,
        "development",
        "Deployment label, informational only. Logs are JSON unless it is `development`.",
    )
    general.add(
        "LOG_LEVEL",
        parse_choice("debug", "info", "warn", "error"),
        "info",
        "One of debug, info, warn, error.",
        type_name="choice",
    )
    general.add(
        "METRICS_ADDR",
        parse_listen_address,
        "0.0.0.0:9090",
        "Ops listener for `/metrics`, `/healthz` and `/readyz`, shared by the api and worker.",
        type_name="host:port",
        empty_disables=True,
    )
    general.add(
        "LISTEN_ADDRESSES_FILE",
        str,
        "",
        "When set, the process writes to this file, once all its components started, a JSON "
        "object of the address each of its listeners bound, by name (`api`, `gateway`, `web`, "
        '`ops`...: `{"api": "127.0.0.1:41873"}`). A listen address with port 0 '
        "(`API_ADDR=127.0.0.1:0`) binds a free port the system picks; this file, and the "
        "listener's `listening on` log line, say which.",
        type_name="path",
    )

    plugins = registry.section("Plugins")
    for name, default, text in (
        (
            "AUTH_PROVIDER",
            "oidc",
            "auth provider plugin (entry point in `deskpool.auth_providers`)",
        ),
        (
            "SECRET_STORE",
            "envelope",
            "secret store plugin (entry point in `deskpool.secret_stores`)",
        ),
        (
            "LICENSE_REPORTER",
            "http",
            "licensing reporter plugin (entry point in `deskpool.license_reporters`)",
        ),
        (
            "RECORDING_STORE",
            "files",
            "session recording store plugin (entry point in `deskpool.recording_stores`)",
        ),
    ):
        plugins.add(name, str, default, f"Name of the {text}.", type_name="name")
    plugins.add(
        "PLUGINS_DISABLED",
        parse_list,
        "",
        "Comma-separated entry-point names (or `group:name`) that are not loaded, in any group.",
        type_name="list",
    )

    data = registry.section("Database and key-value store")
    data.add(
        "DATABASE_URL",
        parse_database_url,
        None,
        "Relational database connection string (PostgreSQL).",
        type_name="url",
        required="Yes",
        must_be_set=True,
        secret=True,
        shown_default="`postgresql://127.0.0.1:5432/deskpool?sslmode=disable` (documented, not applied: it must be set)",
    )
    data.add(
        "DATABASE_MAX_CONNS",
        parse_int(1, 1000),
        "10",
        "Maximum connection pool size, per process.",
        type_name="integer",
    )
    data.add(
        "DATABASE_ACQUIRE_TIMEOUT",
        parse_duration,
        "5s",
        "How long a request waits for a database connection with none given back (a request "
        "holding every connection, a full server making no room) before it is answered 503 "
        "`dependency_unavailable`. While connections come back, a request waits its turn, six "
        "times this at most: a burst is served late, not refused. Opening "
        "one connection is bounded to 1.5 s each try, and after a statement's answer timed out "
        "requests fail at once for 2 s: a server that stopped answering costs a request about "
        "`DATABASE_STATEMENT_TIMEOUT` + 0.5 s at most.",
        type_name="duration",
    )
    data.add(
        "DATABASE_STATEMENT_TIMEOUT",
        parse_duration,
        "1s",
        "Longest a statement of a request may run: the server cancels it (`statement_timeout`), "
        "and the client gives up on an answer 0.5 s later (a server that stopped answering). A "
        "request meeting either is answered 503 `dependency_unavailable`. A worker's jobs and "
        "periodic tasks have their own bound (`WORKER_STATEMENT_TIMEOUT`). A `DATABASE_URL` "
        "option or a role setting does not override it.",
        type_name="duration",
    )
    data.add(
        "DBSERVER_DB",
        str,
        "deskpool",
        "Database created on first start by the bundled database container; must match `DATABASE_URL`. Not read by the service.",
    )
    data.add(
        "DBSERVER_USER",
        str,
        "deskpool",
        "Superuser role created on first start by the bundled database container; must match `DATABASE_URL`. Not read by the service.",
    )
    data.add(
        "DBSERVER_PASSWORD",
        str,
        "",
        "Password of `DBSERVER_USER` for the bundled database container. Not read by the service.",
        secret=True,
    )
    data.add(
        "KVSTORE_ADDR",
        parse_host_port,
        None,
        "host:port of the key-value store (Redis).",
        type_name="host:port",
        required="Yes",
        must_be_set=True,
        aliases=("REDIS_ADDR",),
        shown_default="`127.0.0.1:6379` (documented, not applied: it must be set)",
    )
    data.add("KVSTORE_PASSWORD", str, "", "Password, if the store requires one.", secret=True)
    data.add("KVSTORE_DB", parse_int(0, 15), "0", "Logical database index.", type_name="integer")
    data.add(
        "KVSTORE_TIMEOUT",
        parse_duration,
        "1s",
        "How long connecting to the key-value store and each of its answers may take; past it "
        "the command fails and the next ones fail at once for 2 s (the caller's degraded "
        "behaviour, or 503 `dependency_unavailable`). Also how long a command waits for one "
        "of the process's 100 connections to the store when all are busy (then it fails "
        "alone).",
        type_name="duration",
    )
    data.add(
        "KVSTORE_KEY_PREFIX",
        str,
        "deskpool:",
        "Prefix of every key deskpool writes, so several deployments (or test runs) can share one store.",
    )

    secrets = registry.section("Secrets at rest")
    secrets.add(
        "SECRETS_MASTER_KEY",
        parse_master_key,
        "",
        "Envelope encryption key for stored credentials: 32 random bytes, base64. `deskpool secrets generate-key` prints one.",
        type_name="base64 key",
        required="Yes for production",
        secret=True,
    )
    secrets.add(
        "SECRETS_MASTER_KEY_PREVIOUS",
        parse_master_key,
        "",
        "The retiring master key, set only during a key-rotation window.",
        type_name="base64 key",
        secret=True,
    )
