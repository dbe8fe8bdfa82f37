"""Cursor pagination: a bounded ``limit`` and an opaque ``next`` cursor on every list.

A list operation is declared ``paginated=True`` with :class:`PageQuery` (or a schema derived
from it) as its query and :func:`page_schema` of its item as its success response;
:func:`check_page_contract` refuses any other shape when the route table is built, so every
list answers the same way.

The page size a client gets is :meth:`PageLimits.resolve` of the ``limit`` it sent:
``API_PAGE_SIZE_DEFAULT`` when it sent none, never more than ``API_PAGE_SIZE_MAX``. The document
states the hard bounds (1 to 500); an instance configured with a smaller maximum serves pages of
that size instead of refusing a larger ``limit``.

A cursor is one codec for every list. Inside, it is the sort key of the last item served
(:func:`encode_cursor`: base64url JSON, all a handler sees); outside, the route layer seals it
to the list that issued it (:class:`CursorSeal`): a truncated HMAC-SHA256 over the operation,
its path parameters and the key, with a secret the instance makes for itself and keeps in the
database, so every process shares it. A list opens only the cursors it issued: one tampered
with, issued by another list (or for another pool's desktops), or made up is a 400
``invalid_cursor`` (:class:`deskpool.errors.InvalidCursor`) before the handler runs, never a
404, a 500, or a page that starts somewhere else. Clients treat cursors as opaque.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, ValidationError, fields, validate

from deskpool.api.inputs import storable_text
from deskpool.db.platform_state import instance_secret
from deskpool.errors import InvalidCursor

if TYPE_CHECKING:
    import asyncpg

    from deskpool.api.routes import Operation
    from deskpool.config import Config

#: The defaults of ``API_PAGE_SIZE_DEFAULT`` and ``API_PAGE_SIZE_MAX``, as the document states.
DEFAULT_LIMIT = 50
#: The largest ``limit`` any instance accepts (``API_PAGE_SIZE_MAX`` cannot exceed it).
MAX_LIMIT = 500
#: What a cursor is made of: unpadded base64url, as :func:`encode_cursor` writes it.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"
#: Bytes of the HMAC-SHA256 tag that seals a cursor to its list.
CURSOR_TAG_BYTES = 16
#: The tag's length in the cursor (unpadded base64url of :data:`CURSOR_TAG_BYTES`).
_TAG_CHARS = 22
#: The ``platform_state`` key of the instance's cursor secret.
CURSOR_SECRET_NAME = "api.cursor_secret"


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
                "first page. A cursor this list did not issue is answered 400 `invalid_cursor`."
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

    :raises InvalidCursor: the cursor is not one this server issued.
    """
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        raise InvalidCursor() from None


def paginate(rows: list[Any], limit: int, key: Callable[[Any], Any]) -> Page:
    """Make a page from ``limit + 1`` fetched rows: the extra row only says there is more.

    :param key: a function from a row to its sort key (encoded into the ``next`` cursor).
    """
    if len(rows) > limit:
        items = rows[:limit]
        return Page(items, encode_cursor(key(items[-1])))
    return Page(rows, None)


def cursor_binding(operation_id: str, path_params: Mapping[str, str]) -> bytes:
    """What a cursor is sealed to: the list (operation id) and its path parameters."""
    parts = [operation_id, *(f"{name}={path_params[name]}" for name in sorted(path_params))]
    return "\0".join(parts).encode("utf-8", "surrogatepass")


class CursorSeal:
    """Seals the cursors a list issues to that list, and opens only those.

    :param secret: the instance's cursor secret (:data:`CURSOR_SECRET_NAME`).
    """

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _tag(self, binding: bytes, inner: str) -> str:
        mac = hmac.new(self._secret, binding + b"\0" + inner.encode("ascii"), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:CURSOR_TAG_BYTES]).decode().rstrip("=")

    def seal(self, binding: bytes, inner: str) -> str:
        """The cursor a client receives for the key ``inner`` (:func:`encode_cursor`)."""
        return inner + self._tag(binding, inner)

    def open(self, binding: bytes, cursor: str) -> str:
        """The key inside ``cursor``, if this list issued it.

        :raises InvalidCursor: it did not (tampered, another list's, made up).
        """
        inner, tag = cursor[:-_TAG_CHARS], cursor[-_TAG_CHARS:]
        if not inner or not inner.isascii() or not tag.isascii():
            raise InvalidCursor()
        if not hmac.compare_digest(tag, self._tag(binding, inner)):
            raise InvalidCursor()
        return inner


class CursorSeals:
    """The :class:`CursorSeal` of one API application, its secret read once from the database."""

    def __init__(self) -> None:
        self._seal: CursorSeal | None = None
        self._lock = asyncio.Lock()

    async def get(self, db: asyncpg.Pool) -> CursorSeal:
        """The seal (the first call reads or creates the instance's secret)."""
        if self._seal is None:
            async with self._lock:
                if self._seal is None:
                    self._seal = CursorSeal(await instance_secret(db, CURSOR_SECRET_NAME))
        return self._seal


def seal_next(result: Any, seal: CursorSeal, binding: bytes) -> Any:
    """``result`` with its page's ``next`` key sealed to the list (other results unchanged)."""
    from deskpool.api.routes import Reply

    if isinstance(result, Reply) and isinstance(result.data, Page):
        return Reply(seal_next(result.data, seal, binding), result.status, result.headers)
    if isinstance(result, Page) and result.next is not None:
        return Page(result.items, seal.seal(binding, result.next))
    return result


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

    :raises InvalidCursor: the cursor is not one this server issued.
    """
    key = decode_cursor(cursor)
    if key is None:
        return None
    try:
        return uuid.UUID(str(key))
    except ValueError:
        raise InvalidCursor() from None


def text_cursor(cursor: str | None) -> str | None:
    """The text key a list sorted by a key stored in ``cursor``; ``None`` for the first page.

    :raises InvalidCursor: the cursor is not one this server issued.
    """
    key = decode_cursor(cursor)
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidCursor()
    return key


def cursor_pair(cursor: str | None) -> tuple[str, str] | None:
    """A ``[text, uuid]`` list cursor, or ``None`` for the first page; anything else is 400."""
    after = decode_cursor(cursor)
    if after is None:
        return None
    if isinstance(after, list) and len(after) == 2 and all(isinstance(part, str) for part in after):
        try:
            storable_text(after[0])
            uuid.UUID(after[1])
        except (ValueError, ValidationError):
            pass
        else:
            return after[0], after[1]
    raise InvalidCursor()
