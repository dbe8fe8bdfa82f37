"""The values every part of deskpool computes with, and the range each is valid in.

What a client sends is checked against these once, at the edge (the API's fields in
:mod:`deskpool.api.values`, the parser's strict types in :mod:`deskpool.api.validation`), and
models compute with them without checking again:

- **instants** are timezone-aware, written with a year from :data:`FIRST_YEAR` to
  :data:`LAST_YEAR` and normalised to UTC. Every model can add days (and a time zone's offset)
  to one without leaving what ``datetime`` can hold: year 1 and 9999 are where Python raises
  ``OverflowError``, and PostgreSQL's ``timestamptz`` drops the offset of years before 1;
- **dates** likewise;
- **integers** are ASCII digits (``²`` and ``٣`` are digits to Python's ``int``, not to a
  client) of at most :data:`MAX_DIGITS` digits, within the bounds their field declares;
- **time zones** are canonical IANA names: ``localtime``, ``Factory``, ``posixrules`` and
  POSIX rule names such as ``EST5EDT`` are refused, as are names outside the zone database.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

__all__ = [
    "EARLIEST",
    "FIRST_DAY",
    "FIRST_YEAR",
    "LAST_DAY",
    "LAST_YEAR",
    "LATEST",
    "MAX_DIGITS",
    "YEAR_PATTERN",
    "ascii_int",
    "day_problem",
    "instant_problem",
    "is_canonical_time_zone",
]

#: The first and last year an instant or a date may be written with.
FIRST_YEAR = 1970
LAST_YEAR = 8999
#: The first and last day of that range, and its first and last instant (UTC).
FIRST_DAY = date(FIRST_YEAR, 1, 1)
LAST_DAY = date(LAST_YEAR, 12, 31)
EARLIEST = datetime(FIRST_YEAR, 1, 1, tzinfo=UTC)
LATEST = datetime(LAST_YEAR, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
#: The OpenAPI ``pattern`` saying the same of a date or a date-time's text: its year.
YEAR_PATTERN = r"^(19[7-9][0-9]|[2-8][0-9]{3})-"
#: The most digits an integer may be written with (a PostgreSQL ``bigint`` has 19).
MAX_DIGITS = 18

_ASCII_INT = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}")
#: Names of the zone database that are not places: the system's own zone, the placeholder of
#: an unset one, and the rules POSIX ``TZ`` strings borrow.
_NOT_PLACES = frozenset({"localtime", "Factory", "posixrules"})
#: POSIX ``TZ`` rule names kept in the database for compatibility (``EST5EDT``, ``CST6CDT``).
_POSIX_RULE = re.compile(r"[A-Z]{3,4}[0-9]{1,2}([A-Z]{3,4})?")
_ZONES: set[str] = set()


def instant_problem(value: datetime) -> str | None:
    """Why ``value`` is no instant models can compute with, or ``None`` when it is one.

    Its year is judged as written (in its own offset), like the document's pattern.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        return "Must include a time zone offset, such as Z or +02:00."
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        return f"Must be in the years {FIRST_YEAR} to {LAST_YEAR}."
    return None


def day_problem(value: date) -> str | None:
    """Why ``value`` is no date models can compute with, or ``None`` when it is one."""
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        return f"Must be in the years {FIRST_YEAR} to {LAST_YEAR}."
    return None


def ascii_int(text: str) -> int | None:
    """``text`` as an integer when it is ASCII digits (a ``-`` before them allowed), else ``None``.

    Python's ``int`` reads any Unicode decimal digit (``int("٣") == 3``) and raises past 4,300
    digits; a client's integer is at most :data:`MAX_DIGITS` ASCII digits, nothing else.
    """
    if not text.isascii() or _ASCII_INT.fullmatch(text) is None:
        return None
    return int(text)


def is_canonical_time_zone(name: str) -> bool:
    """Whether ``name`` is a canonical IANA time zone name of the zone database here."""
    if not name or not name.isascii() or name in _NOT_PLACES or _POSIX_RULE.fullmatch(name):
        return False
    if name.startswith(("posix/", "right/")) or name not in _zones():
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _zones() -> set[str]:
    if not _ZONES:
        _ZONES.update(available_timezones())
    return _ZONES
