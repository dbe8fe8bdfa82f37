"""Configuration: declared settings, read once from the environment into one frozen structure.

Every variable deskpool reads is declared as a :class:`Setting` with its type, default,
whether it is required or secret, and its description (in the style of tox 4's configuration
declarations). Each part declares the variables it reads: the core its own
(:func:`declare_core_settings`), the platform's areas theirs (:mod:`deskpool.area_settings`),
components and plugins theirs through the ``deskpool_declare_settings`` hook. This module is the
machinery: :func:`load_config` validates them all with voluptuous, reports every problem at
once, and returns a :class:`Config`. The configuration reference in
``docs/reference/configuration.md`` is generated from the same declarations.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import voluptuous as vol

from deskpool.errors import ConfigError
from deskpool_driver_api import REDACTED as REDACTED  # shown in place of every secret

T = TypeVar("T")


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


# --------------------------------------------------------------------------- value types


def parse_duration(text: str) -> float:
    """Parse ``30s``, ``5m``, ``24h``, ``1h30m`` or ``250ms`` into seconds.

    :raises voluptuous.Invalid: for anything else, including a bare number.
    """
    raw = text.strip()
    if not raw or _DURATION_PART.sub("", raw):
        raise vol.Invalid(f"expected a duration such as 30s, 5m or 24h, got {raw!r}")
    return sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(raw))


def format_duration(seconds: float) -> str:
    """Format seconds the way a duration is written in configuration (``90`` -> ``1m30s``)."""
    if seconds and seconds < 1:
        return f"{round(seconds * 1000)}ms"
    rest = int(seconds)
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"


@dataclass(frozen=True)
class HostPort:
    """A ``host:port`` listen or connect address."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (IPv4 or IPv6)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_host_port(text: str) -> HostPort:
    """Parse ``host:port`` (IPv6 hosts in brackets)."""
    raw = text.strip()
    match = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d{1,5})|([^:\s\[\]]+):(\d{1,5})", raw)
    if not match:
        raise vol.Invalid(f"expected host:port, got {raw!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 0 < port < 65536:
        raise vol.Invalid(f"port {port} is out of range 1-65535")
    return HostPort(host, port)


def parse_bool(text: str) -> bool:
    """Parse the usual spellings of a boolean."""
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise vol.Invalid(f"expected true or false, got {text!r}")


def parse_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """Return a parser of integers within ``[minimum, maximum]``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise vol.Invalid(f"expected a whole number, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise vol.Invalid(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise vol.Invalid(f"must be at most {maximum}, got {value}")
        return value

    return parse


def parse_list(text: str) -> tuple[str, ...]:
    """Parse a comma-separated list, dropping blanks."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_choice(*choices: str) -> Callable[[str], str]:
    """Return a parser that accepts one of ``choices`` (case-insensitive)."""

    def parse(text: str) -> str:
        lowered = text.strip().lower()
        if lowered not in choices:
            raise vol.Invalid(f"expected one of {', '.join(choices)}, got {text!r}")
        return lowered

    return parse


def parse_url(*schemes: str) -> Callable[[str], str]:
    """Return a parser of absolute URLs with one of ``schemes``; empty stays empty."""

    def parse(text: str) -> str:
        raw = text.strip()
        if not raw:
            return ""
        parts = urlsplit(raw)
        if parts.scheme not in schemes or not parts.netloc:
            raise vol.Invalid(f"expected a {' or '.join(schemes)} URL, got {_safe_url(raw)!r}")
        return raw

    return parse


def parse_database_url(text: str) -> str:
    """Accept a PostgreSQL connection URL."""
    raw = text.strip()
    parts = urlsplit(raw)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise vol.Invalid("expected a postgresql:// connection URL")
    return raw


def parse_bindings(text: str) -> tuple[tuple[str, str], ...]:
    """Parse ``<claim value>=<local group key>`` pairs separated by commas."""
    pairs = []
    for item in parse_list(text):
        claim, sep, group = item.partition("=")
        if not sep or not claim.strip() or not group.strip():
            raise vol.Invalid(f"expected <claim value>=<local group key>, got {item!r}")
        pairs.append((claim.strip(), group.strip()))
    return tuple(pairs)


def parse_master_key(text: str) -> bytes:
    """Decode a 32-byte key written in standard or URL-safe base64.

    The message never repeats the value: it is a secret, even when it is a wrong one.
    """
    raw = text.strip()
    if not raw:
        return b""
    padded = raw + "=" * (-len(raw) % 4)
    try:
        decoder = base64.urlsafe_b64decode if ("-" in raw or "_" in raw) else base64.b64decode
        key = decoder(padded.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise vol.Invalid("is not valid base64 (expected 32 random bytes, base64)") from None
    if len(key) != 32:
        raise vol.Invalid(f"decodes to {len(key)} bytes; a master key is exactly 32 bytes")
    return key


def _safe_url(url: str) -> str:
    """Return ``url`` with any password replaced, for messages and display."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{REDACTED}@{netloc}"))


def redact_url_password(url: str) -> str:
    """Public form of :func:`_safe_url`: a connection URL with its password hidden."""
    return _safe_url(url)


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

    __slots__ = ("_settings", "_sources", "_values")
    _values: dict[str, Any]
    _settings: dict[str, Setting]
    _sources: dict[str, str]

    def __init__(
        self,
        values: Mapping[str, Any],
        settings: Mapping[str, Setting],
        sources: Mapping[str, str],
    ) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_settings", dict(settings))
        object.__setattr__(self, "_sources", dict(sources))

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
            return _safe_url(value)
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
    return Config(values, declared, sources)


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
        parse_host_port,
        "0.0.0.0:9090",
        "Ops listener for `/metrics`, `/healthz` and `/readyz`, shared by the api and worker.",
        type_name="host:port",
        empty_disables=True,
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
