"""Cursor pagination: a bounded ``limit`` and an opaque ``next`` cursor on every list.

A cursor is the sort key of the last item served, base64-encoded JSON; clients treat it as
opaque. A cursor that does not decode is a 400, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.errors import BadRequest

#: Defaults used when a schema is built before configuration is known (the document).
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class PageQuery(Schema):
    """Query parameters every list accepts."""

    limit = fields.Integer(
        load_default=DEFAULT_LIMIT,
        validate=validate.Range(min=1, max=MAX_LIMIT),
        metadata={"description": f"Items per page (1-{MAX_LIMIT}, default {DEFAULT_LIMIT})."},
    )
    cursor = fields.String(
        load_default=None,
        metadata={"description": "The `next` cursor of the previous page; omit for the first."},
    )


@dataclass(frozen=True)
class Page:
    """One page of a list: its items and the cursor of the next page (``None`` at the end)."""

    items: list[Any]
    next: str | None


def encode_cursor(key: Any) -> str:
    """Encode the sort key of the last item served as an opaque cursor."""
    raw = json.dumps(key, separators=(",", ":"), default=str).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> Any:
    """Decode a cursor made by :func:`encode_cursor`; ``None`` for the first page."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadRequest("The cursor is not one this server issued.") from None


def paginate(rows: list[Any], limit: int, key: Any) -> Page:
    """Make a page from ``limit + 1`` fetched rows: the extra row only says there is more.

    :param key: a function from a row to its sort key (encoded into the ``next`` cursor).
    """
    if len(rows) > limit:
        items = rows[:limit]
        return Page(items, encode_cursor(key(items[-1])))
    return Page(rows, None)


_page_schemas: dict[str, type[Schema]] = {}


def page_schema(item: type[Schema]) -> type[Schema]:
    """The schema of a page of ``item`` (one class per item schema, named ``<Item>Page``)."""
    name = item.__name__.removesuffix("Schema") + "Page"
    if name not in _page_schemas:
        _page_schemas[name] = Schema.from_dict(
            {
                "items": fields.List(fields.Nested(item), required=True),
                "next": fields.String(
                    required=True,
                    allow_none=True,
                    metadata={"description": "Cursor of the next page; null on the last page."},
                ),
            },
            name=name,
        )
    return _page_schemas[name]
