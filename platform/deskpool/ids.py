"""Identifiers: the UUIDs that name stored objects, as clients send them.

Every resource addresses its objects by a UUID in the path; :func:`parse_id` reads one, and
anything that is not a UUID names nothing, so it is simply not found (never a 500).
"""

from __future__ import annotations

import uuid

from deskpool.errors import NotFound


def parse_id(value: str, what: str = "resource") -> uuid.UUID:
    """``value`` as a UUID.

    :param what: what the id names (``pool``, ``user``), for the message.
    :raises NotFound: ``value`` is not a UUID, so no ``what`` has it.
    """
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"No {what} has the id {value!r}.") from None
