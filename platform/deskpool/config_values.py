"""The value types of settings: how the text of an environment variable becomes a value.

Each ``parse_*`` turns a variable's raw text into its typed value or raises
``voluptuous.Invalid`` with a message that names what was expected (never a secret's value);
:func:`deskpool.config.load_config` adds the variable's name. Re-exported by
:mod:`deskpool.config`, where settings are declared.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import voluptuous as vol

from deskpool_driver_api import REDACTED

__all__ = [
    "HostPort",
    "format_duration",
    "is_loopback_host",
    "parse_bindings",
    "parse_bool",
    "parse_choice",
    "parse_database_url",
    "parse_duration",
    "parse_host_port",
    "parse_int",
    "parse_list",
    "parse_listen_address",
    "parse_master_key",
    "parse_url",
    "redact_url_password",
    "safe_url",
]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


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
    return _host_port(text, lowest=1)


def parse_listen_address(text: str) -> HostPort:
    """Parse a listen address ``host:port``; port 0 asks for any free port."""
    return _host_port(text, lowest=0)


def _host_port(text: str, *, lowest: int) -> HostPort:
    raw = text.strip()
    match = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d{1,5})|([^:\s\[\]]+):(\d{1,5})", raw)
    if not match:
        raise vol.Invalid(f"expected host:port, got {raw!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not lowest <= port < 65536:
        raise vol.Invalid(f"port {port} is out of range {lowest}-65535")
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
            raise vol.Invalid(f"expected a {' or '.join(schemes)} URL, got {safe_url(raw)!r}")
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


def safe_url(url: str) -> str:
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
    return safe_url(url)
