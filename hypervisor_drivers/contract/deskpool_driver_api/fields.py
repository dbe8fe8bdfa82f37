"""The connection fields a driver declares: what an administrator fills in to connect a cluster.

A driver class publishes :attr:`~deskpool_driver_api.HypervisorDriver.connection_fields`, a
tuple of :class:`ConnectionField`. Each field is either a *credential* (``secret=True``: kept
sealed in the connection's ``credentials``, write-only, never shown back) or an *option*
(``secret=False``: kept in the connection's ``options`` and shown back). The platform lists the
declaration to the console, which renders a form from it, and checks what an administrator
sends against it (:func:`connection_problems`) before the driver's own validation runs.

**Secret options** (new in 0.4). An option may be a secret too while the driver reads it among
its options: a token it compares, a password inside a ``json`` option. ``sealed=True`` makes
the whole option secret (a string kind); ``sealed_keys`` names the keys of a ``json`` option's
object value that are (``("password",)`` for ``{"host": ..., "password": ...}``). The platform
keeps their values sealed like credentials, apart from the stored options, never shows them
back, and marks them write-only in its document; the driver still finds them in
``connection.options`` (:func:`split_secret_options` and :func:`merge_secret_options` are how
the platform takes them out and puts them back; :func:`secret_option_pointers` names them).

The endpoint and the TLS settings (verification, CA certificate, pinned fingerprint) belong to
every connection and are not declared here.

Kinds and the JSON values they take:

===========  ===================================================================  ==========
kind         value                                                                credential
===========  ===================================================================  ==========
``text``     a non-empty string                                                   yes
``url``      an absolute URL (``scheme://host...``)                               yes
``secret``   a non-empty string typed into a password input                       only
``choice``   one of :attr:`ConnectionField.choices`                                yes
``integer``  an integer (not a boolean), within ``minimum``/``maximum``           no
``number``   an integer or a finite float, within ``minimum``/``maximum``         no
``boolean``  ``true`` or ``false``                                                no
``list``     a non-empty list of non-empty strings                                no
``json``     any JSON value; only the driver checks it                            no
===========  ===================================================================  ==========

Credentials are strings, so a credential's kind is ``text``, ``url``, ``secret`` or ``choice``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CREDENTIAL_KINDS",
    "FIELD_NAME",
    "ConnectionField",
    "FieldKind",
    "FieldProblem",
    "connection_problems",
    "declaration_problems",
    "merge_secret_options",
    "secret_option_pointers",
    "split_secret_options",
    "value_problem",
]

#: What a field's name may be (the platform's rule for credential and option names).
FIELD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


class FieldKind(enum.StrEnum):
    """What kind of value a field takes, and so which input the console shows."""

    TEXT = "text"
    URL = "url"
    SECRET = "secret"
    CHOICE = "choice"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    LIST = "list"
    JSON = "json"


#: The kinds a credential (a string) may have.
CREDENTIAL_KINDS = frozenset({FieldKind.TEXT, FieldKind.URL, FieldKind.SECRET, FieldKind.CHOICE})
_RANGED = frozenset({FieldKind.INTEGER, FieldKind.NUMBER})


@dataclass(frozen=True)
class ConnectionField:
    """One field of a driver's connection form.

    :param name: the key in ``credentials`` or ``options`` (letters, digits, ``_.-``).
    :param label: what the form calls it (``API token secret``).
    :param kind: the value it takes (:class:`FieldKind`).
    :param required: the connection must set it (a required field has no default).
    :param default: the value the driver uses when it is not set (options only), shown as
        the form's initial value; ``None`` for none.
    :param help: one or two sentences shown under the input.
    :param secret: a write-only credential (``credentials[name]``); otherwise an option
        (``options[name]``).
    :param choices: the values of a ``choice`` field.
    :param minimum: the least value of an ``integer`` or ``number`` field (inclusive).
    :param maximum: the greatest value of an ``integer`` or ``number`` field (inclusive).
    :param placeholder: an example shown in the empty input (``deskpool@pve!deskpool``).
    :param sealed: an option (not a credential) whose whole value is a secret: sealed at rest,
        write-only, read by the driver in ``options``; a string kind, without a default.
    :param sealed_keys: for a ``json`` option whose value is an object: the keys of that
        object whose values are secrets, kept like a ``sealed`` option's.
    """

    name: str
    label: str
    kind: FieldKind = FieldKind.TEXT
    required: bool = False
    default: Any = None
    help: str = ""
    secret: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    placeholder: str = ""
    sealed: bool = False
    sealed_keys: tuple[str, ...] = ()

    @property
    def location(self) -> str:
        """``credentials`` or ``options``: where the connection keeps the value."""
        return "credentials" if self.secret else "options"

    @property
    def pointer(self) -> str:
        """The JSON pointer of the value in a cluster's body (``/credentials/token_id``)."""
        return f"/{self.location}/{_escape(self.name)}"

    @property
    def secret_pointers(self) -> tuple[str, ...]:
        """The JSON pointers, into ``options``, of this option's secret values.

        None for a credential: credentials are secret as a whole.
        """
        if self.secret:
            return ()
        if self.sealed:
            return (f"/{_escape(self.name)}",)
        return tuple(f"/{_escape(self.name)}/{_escape(key)}" for key in self.sealed_keys)

    def as_json(self) -> dict[str, Any]:
        """The declaration as JSON (what the platform lists to the console)."""
        default = list(self.default) if isinstance(self.default, tuple) else self.default
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind.value,
            "required": self.required,
            "default": default,
            "help": self.help,
            "secret": self.secret,
            "choices": list(self.choices),
            "minimum": self.minimum,
            "maximum": self.maximum,
            "placeholder": self.placeholder,
            "sealed": self.sealed,
            "sealed_keys": list(self.sealed_keys),
        }


@dataclass(frozen=True)
class FieldProblem:
    """Why a connection does not match the declaration, and where.

    :param pointer: the JSON pointer of the value (``/options/request_timeout``).
    :param message: what is wrong, without the value (it may be a secret).
    """

    pointer: str
    message: str


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _finite_number(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (isinstance(value, int) or math.isfinite(value))
    )


def value_problem(field: ConnectionField, value: Any) -> str | None:
    """Why ``value`` is not a valid value of ``field``, or ``None`` when it is.

    The message never repeats the value.
    """
    kind = field.kind
    if kind in (FieldKind.TEXT, FieldKind.SECRET):
        return None if isinstance(value, str) and value else "Must be a non-empty string."
    if kind is FieldKind.URL:
        if isinstance(value, str) and value:
            parts = urlsplit(value)
            if parts.scheme and parts.netloc:
                return None
        return "Must be an absolute URL (scheme://host...)."
    if kind is FieldKind.CHOICE:
        if isinstance(value, str) and value in field.choices:
            return None
        return f"Must be one of: {', '.join(field.choices)}."
    if kind is FieldKind.BOOLEAN:
        return None if isinstance(value, bool) else "Must be true or false."
    if kind is FieldKind.LIST:
        if (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(item, str) and item for item in value)
        ):
            return None
        return "Must be a non-empty list of non-empty strings."
    if kind in _RANGED:
        if kind is FieldKind.INTEGER and (isinstance(value, bool) or not isinstance(value, int)):
            return "Must be an integer."
        if not _finite_number(value):
            return "Must be a number."
        if field.minimum is not None and value < field.minimum:
            return f"Must be at least {field.minimum:g}."
        if field.maximum is not None and value > field.maximum:
            return f"Must be at most {field.maximum:g}."
        return None
    return None  # JSON: the driver checks it


def declaration_problems(fields: Iterable[ConnectionField]) -> list[str]:
    """What is wrong with a driver's declaration (an empty list when it is well-formed).

    Checked: each entry is a :class:`ConnectionField` with a valid, unique name, a label and a
    known kind; credentials are strings (:data:`CREDENTIAL_KINDS`) without defaults, and a
    ``secret`` input is a credential; choices exactly for ``choice`` fields (unique, non-empty),
    bounds only for ``integer`` and ``number`` (minimum not above maximum); a required field
    has no default, and a default is a valid value of its field.
    """
    problems: list[str] = []
    seen: set[str] = set()
    for index, field in enumerate(fields):
        if not isinstance(field, ConnectionField):
            problems.append(f"entry {index} is a {type(field).__name__}, not a ConnectionField")
            continue
        where = f"field {field.name!r}"
        if not isinstance(field.name, str) or not FIELD_NAME.fullmatch(field.name):
            problems.append(f"{where}: the name must be 1 to 100 letters, digits, '_', '.', '-'")
        if field.name in seen:
            problems.append(f"{where}: declared twice")
        seen.add(field.name)
        if not isinstance(field.label, str) or not field.label.strip():
            problems.append(f"{where}: needs a label")
        if not isinstance(field.kind, FieldKind):
            problems.append(f"{where}: the kind must be a FieldKind")
            continue
        if field.secret and field.kind not in CREDENTIAL_KINDS:
            problems.append(f"{where}: a credential is a string, not {field.kind.value}")
        if field.kind is FieldKind.SECRET and not (field.secret or field.sealed):
            problems.append(
                f"{where}: a secret input must be a credential (secret=True) or a sealed option"
            )
        if field.sealed:
            if field.secret:
                problems.append(f"{where}: a credential is sealed already; sealed is for options")
            if field.kind not in CREDENTIAL_KINDS:
                problems.append(f"{where}: a sealed option is a string, not {field.kind.value}")
            if field.default is not None:
                problems.append(f"{where}: a sealed option has no default")
        if field.sealed_keys:
            keys = field.sealed_keys
            if field.kind is not FieldKind.JSON or field.secret or field.sealed:
                problems.append(f"{where}: only a json option (not sealed) has sealed keys")
            if not all(isinstance(key, str) and FIELD_NAME.fullmatch(key) for key in keys):
                problems.append(f"{where}: sealed keys are 1 to 100 letters, digits, '_.-'")
            elif len(set(keys)) != len(keys):
                problems.append(f"{where}: sealed keys repeat")
        if field.secret and field.default is not None:
            problems.append(f"{where}: a credential has no default")
        if field.kind is FieldKind.CHOICE:
            if not field.choices or not all(isinstance(c, str) and c for c in field.choices):
                problems.append(f"{where}: a choice needs non-empty choices")
            elif len(set(field.choices)) != len(field.choices):
                problems.append(f"{where}: choices repeat")
        elif field.choices:
            problems.append(f"{where}: only a choice field has choices")
        bounds = (field.minimum, field.maximum)
        if field.kind in _RANGED:
            if any(b is not None and not _finite_number(b) for b in bounds):
                problems.append(f"{where}: minimum and maximum must be numbers")
            elif (
                field.minimum is not None
                and field.maximum is not None
                and field.minimum > field.maximum
            ):
                problems.append(f"{where}: the minimum is above the maximum")
        elif bounds != (None, None):
            problems.append(f"{where}: only integer and number fields have bounds")
        if field.required and field.default is not None:
            problems.append(f"{where}: a required field has no default")
        if field.default is not None and not field.secret:
            reason = value_problem(field, field.default)
            if reason is not None:
                problems.append(f"{where}: the default is invalid ({reason})")
    return problems


def connection_problems(
    fields: Sequence[ConnectionField],
    credentials: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None,
) -> list[FieldProblem]:
    """Where ``credentials`` and ``options`` disagree with the declaration ``fields``.

    Undeclared names, missing required fields and invalid values are problems. ``None`` for
    ``credentials`` or ``options`` skips that side (a change that leaves it as it is).
    """
    problems: list[FieldProblem] = []
    for secret, given in ((True, credentials), (False, options)):
        if given is None:
            continue
        declared = {field.name: field for field in fields if field.secret is secret}
        location = "credentials" if secret else "options"
        for name in sorted(set(given) - set(declared)):
            known = ", ".join(sorted(declared)) or "none"
            problems.append(
                FieldProblem(
                    f"/{location}/{_escape(name)}",
                    f"The driver declares no {location[:-1]} named {name!r} (declared: {known}).",
                )
            )
        for field in declared.values():
            if field.name not in given:
                if field.required:
                    problems.append(FieldProblem(field.pointer, f"{field.label} is required."))
                continue
            reason = value_problem(field, given[field.name])
            if reason is not None:
                problems.append(FieldProblem(field.pointer, reason))
    return problems


def secret_option_pointers(fields: Iterable[ConnectionField]) -> tuple[str, ...]:
    """The JSON pointers, into ``options``, of every secret option value ``fields`` declare."""
    return tuple(pointer for field in fields for pointer in field.secret_pointers)


def split_secret_options(
    fields: Iterable[ConnectionField], options: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` without its secret values, and those values by JSON pointer.

    A ``sealed`` option is taken out whole; a ``sealed_keys`` key is taken out of its ``json``
    option's object (the rest of the object stays). What is not there is not in the second
    mapping; a value of ``None`` is kept as ``None`` (the platform reads it as "remove").
    ``options`` itself is not changed.
    """
    plain = dict(options)
    secrets: dict[str, Any] = {}
    for field in fields:
        if field.secret or field.name not in plain:
            continue
        if field.sealed:
            secrets[f"/{_escape(field.name)}"] = plain.pop(field.name)
        elif field.sealed_keys and isinstance(plain[field.name], Mapping):
            value = dict(plain[field.name])
            for key in field.sealed_keys:
                if key in value:
                    secrets[f"/{_escape(field.name)}/{_escape(key)}"] = value.pop(key)
            plain[field.name] = value
    return plain, secrets


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def merge_secret_options(options: Mapping[str, Any], secrets: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the secret values of ``secrets`` (by JSON pointer) put back.

    A key of a ``json`` option goes back only into an object that is there (an option
    removed since takes its secret keys with it); ``None`` values are left out.
    """
    merged = dict(options)
    for pointer, value in secrets.items():
        if value is None:
            continue
        segments = [_unescape(part) for part in pointer.split("/")[1:]]
        if len(segments) == 1:
            merged[segments[0]] = value
        elif len(segments) == 2 and isinstance(merged.get(segments[0]), Mapping):
            merged[segments[0]] = {**merged[segments[0]], segments[1]: value}
    return merged
