"""The values of idempotency keys: a key checked at the edge, a request's fingerprint, a response.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import timedelta

from deskpool.errors import BadRequest

#: How long a key and its response are kept (then a periodic task purges them).
KEY_LIFETIME = timedelta(hours=24)

#: A key: 1 to 255 visible ASCII characters (a UUID, say).
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")

#: The response headers kept with a response (the others are the request's own).
KEPT_HEADERS = ("Location", "ETag", "Content-Type")

#: The methods a key applies to.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def idempotency_key(value: str) -> str:
    """``value`` as a key.

    :raises BadRequest: ``invalid_idempotency_key``: empty, longer than 255, or not visible ASCII.
    """
    if not _KEY.match(value):
        raise BadRequest(
            "The Idempotency-Key header must be 1 to 255 visible ASCII characters (a UUID, say).",
            code="invalid_idempotency_key",
        )
    return value


def fingerprint(method: str, target: str, body: bytes) -> str:
    """What makes two requests the same request: the method, the path and query, the body."""
    digest = hashlib.sha256()
    for part in (method.encode(), target.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


@dataclass(frozen=True)
class StoredResponse:
    """A response kept with its key: what a retry of the request is answered."""

    fingerprint: str
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
