"""Cursor pagination: a bounded ``limit`` and an opaque ``next`` cursor on every list.

A list operation is declared ``paginated=True`` with :class:`PageQuery` (or a schema derived
from it) as its query and :func:`page_schema` of its item as its success response;
:func:`check_page_contract` refuses any other shape when the route table is built, so every
list answers the same way.

The page size a client gets is :meth:`PageLimits.resolve` of the ``limit`` it sent:
``API_PAGE_SIZE_DEFAULT`` when it sent none, never more than ``API_PAGE_SIZE_MAX``. The document
states the hard bounds (1 to 500); an instance configured with a smaller maximum serves pages of
that size instead of refusing a larger ``limit``.

A cursor is the sort key of the last item served, base64-encoded JSON; clients treat it as
opaque. A cursor that does not decode is a 400, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, fields, validate

from deskpool.errors import BadRequest

if TYPE_CHECKING:
    from deskpool.api.routes import Operation
    from deskpool.config import Config

#: The defaults of ``API_PAGE_SIZE_DEFAULT`` and ``API_PAGE_SIZE_MAX``, as the document states.
DEFAULT_LIMIT = 50
#: The largest ``limit`` any instance accepts (``API_PAGE_SIZE_MAX`` cannot exceed it).
MAX_LIMIT = 500
#: What a cursor is made of: unpadded base64url, as :func:`encode_cursor` writes it.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"


class PageQuery(Schema):
    """Query parameters every list accepts."""

    limit = fields.Integer(
        load_default=None,
        allow_none=False,
        validate=validate.Range(min=1, max=MAX_LIMIT),
        metadata={
            "default": DEFAULT_LIMIT,
            "description": (
                f"Items per page, 1 to {MAX_LIMIT}. Without it a page holds "
                f"`API_PAGE_SIZE_DEFAULT` items (default {DEFAULT_LIMIT}); a value above "
                f"`API_PAGE_SIZE_MAX` (default {MAX_LIMIT}) is reduced to it."
            ),
        },
    )
    cursor = fields.String(
        validate=[validate.Length(min=1, max=1024), validate.Regexp(CURSOR_PATTERN)],
        metadata={
            "description": (
                "The `next` cursor of the previous page, as given (opaque); omit it for the "
                "first page. A cursor this server did not issue is answered 400."
            ),
        },
    )


@dataclass(frozen=True)
class PageLimits:
    """The page sizes of this instance (``API_PAGE_SIZE_DEFAULT``, ``API_PAGE_SIZE_MAX``)."""

    default: int = DEFAULT_LIMIT
    maximum: int = MAX_LIMIT

    @classmethod
    def from_config(cls, config: Config) -> PageLimits:
        """Read the two settings; the default is never larger than the maximum."""
        maximum = min(int(config["API_PAGE_SIZE_MAX"]), MAX_LIMIT)
        return cls(default=min(int(config["API_PAGE_SIZE_DEFAULT"]), maximum), maximum=maximum)

    def resolve(self, requested: int | None) -> int:
        """The page size to serve for the ``limit`` a client sent (``None``: it sent none)."""
        if requested is None:
            return self.default
        return max(1, min(requested, self.maximum))


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
    """Decode a cursor made by :func:`encode_cursor`; ``None`` for the first page.

    :raises BadRequest: the cursor is not one this server issued.
    """
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        raise BadRequest("The cursor is not one this server issued.") from None


def paginate(rows: list[Any], limit: int, key: Callable[[Any], Any]) -> Page:
    """Make a page from ``limit + 1`` fetched rows: the extra row only says there is more.

    :param key: a function from a row to its sort key (encoded into the ``next`` cursor).
    """
    if len(rows) > limit:
        items = rows[:limit]
        return Page(items, encode_cursor(key(items[-1])))
    return Page(rows, None)


@functools.cache
def page_schema(item: type[Schema]) -> type[Schema]:
    """The schema of a page of ``item`` (one class per item schema, named ``<Item>Page``)."""
    name = item.__name__.removesuffix("Schema") + "Page"
    return Schema.from_dict(
        {
            "items": fields.List(fields.Nested(item), required=True),
            "next": fields.String(
                required=True,
                allow_none=True,
                metadata={
                    "description": (
                        "Opaque cursor of the next page, to send back as `cursor`; null on the "
                        "last page."
                    )
                },
            ),
        },
        name=name,
    )


def check_page_contract(operation: Operation) -> None:
    """Refuse a list operation that does not page the standard way.

    A ``paginated`` operation takes ``limit`` and ``cursor`` in its query and answers a schema
    with ``items`` and ``next``.

    :raises ValueError: naming the operation and what is missing (a programming error).
    """
    if not operation.paginated:
        return
    query = operation.query() if operation.query is not None else None
    if query is None or not {"limit", "cursor"} <= set(query.fields):
        raise ValueError(
            f"{operation.operation_id} is paginated but its query lacks `limit` and `cursor` "
            "(derive it from deskpool.api.pagination.PageQuery)"
        )
    spec = operation.responses.get(operation.success_status)
    schema = spec.schema if spec is not None else None
    instance = schema() if isinstance(schema, type) else schema
    if instance is None or not {"items", "next"} <= set(instance.fields):
        raise ValueError(
            f"{operation.operation_id} is paginated but its success response lacks `items` and "
            "`next` (use deskpool.api.pagination.page_schema)"
        )


def id_cursor(cursor: str | None) -> uuid.UUID | None:
    """The id a list sorted by id stored in ``cursor``; ``None`` for the first page.

    :raises BadRequest: the cursor is not one this server issued.
    """
    key = decode_cursor(cursor)
    if key is None:
        return None
    try:
        return uuid.UUID(str(key))
    except ValueError:
        raise BadRequest("The cursor is not one this server issued.") from None


def text_cursor(cursor: str | None) -> str | None:
    """The text key a list sorted by a key stored in ``cursor``; ``None`` for the first page.

    :raises BadRequest: the cursor is not one this server issued.
    """
    key = decode_cursor(cursor)
    if key is None:
        return None
    if not isinstance(key, str):
        raise BadRequest("The cursor is not one this server issued.")
    return key
