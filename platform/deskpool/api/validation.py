"""Request validation with webargs, from the same marshmallow schemas the document is made of.

What a client gets for a request that cannot be served as sent:

- a body over ``API_MAX_BODY_SIZE``: 413 (``payload_too_large``), before anything is read when
  ``Content-Length`` says so;
- a body that is not ``application/json`` (or ``application/*+json``): 415;
- a body in a content coding other than identity, gzip or deflate: 415
  (``unsupported_content_encoding``, with ``Accept-Encoding``); one that does not match its
  coding: 400 (``invalid_content_encoding``);
- a body that does not arrive within ``API_BODY_TIMEOUT``: 408 (``request_timeout``);
- a body that is not valid JSON (syntax, charset): 400 (``bad_request``); nested too deeply or
  holding text that is not text: 400 (``json_too_deep``, ``invalid_text``; see
  :mod:`deskpool.api.inputs`);
- a boolean field given anything but JSON ``true`` or ``false`` (``0``, ``"true"``, ``"yes"``,
  which marshmallow's ``Boolean`` would take), an integer field given anything but a JSON
  integer (``3.5``, ``"3"``, ``true``, which marshmallow's ``Integer`` would take or round;
  ``3.0`` is an integer to JSON Schema and is 3) or a number field given a string or a
  boolean: 422 (``validation_failed``), for every such field of every body, nested ones
  included (:func:`type_errors`); a boolean query parameter is the text ``true`` or ``false``
  and nothing else (``?disabled=1`` is a 422 at ``/query/disabled``), an integer one is ASCII
  digits (``?limit=٣`` is a 422: Python's ``int`` would read it as 3);
- a body that its ``charset`` cannot decode, or that names a codec that is not a text
  encoding (``punycode``, ``hex``): 400 (``bad_request``);
- a missing body, unknown fields, wrong types, missing required fields, values out of range:
  422 (``validation_failed``) whose ``errors`` list every invalid field with a JSON pointer
  (RFC 6901) and its location. Body fields are pointed to from the body's root (``/name``,
  ``/disks/0/size``; the body itself is ``""``); query parameters are pointed to under
  ``/query`` (``/query/limit``).
"""

from __future__ import annotations

import asyncio
import codecs
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

from aiohttp import hdrs, web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError
from marshmallow import Schema, ValidationError, fields, validate
from webargs import core
from webargs.aiohttpparser import AIOHTTPParser

from deskpool.api.inputs import BODY, read_json
from deskpool.api.inputs import LocatedFieldError as LocatedFieldError
from deskpool.errors import (
    BadRequest,
    FieldError,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
    ValidationFailed,
)
from deskpool.values import MAX_DIGITS, ascii_int


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def _field_errors(messages: Any, prefix: str, location: str) -> Iterator[FieldError]:
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            path = prefix if key == "_schema" else f"{prefix}/{_escape(str(key))}"
            yield from _field_errors(value, path, location)
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        for message in messages:
            yield LocatedFieldError(prefix, message, location)
    elif isinstance(messages, list):
        for item in messages:
            yield from _field_errors(item, prefix, location)
    else:
        yield LocatedFieldError(prefix, str(messages), location)


def field_errors(messages: Any, location: str) -> list[FieldError]:
    """Flatten marshmallow's nested messages into field errors with JSON pointers.

    :param location: webargs' location name (``json`` for the body, ``query``).
    """
    if location == "json":
        return list(_field_errors(messages, "", BODY))
    return list(_field_errors(messages, f"/{_escape(location)}", location))


def _field_type_errors(field: fields.Field[Any], value: Any, pointer: str) -> Iterator[FieldError]:
    if value is None:
        return  # marshmallow decides on null (allow_none)
    if isinstance(field, fields.Boolean):
        if not isinstance(value, bool):
            yield LocatedFieldError(pointer, "Not a valid boolean: give true or false.")
    elif isinstance(field, fields.Integer):
        # JSON Schema counts 3.0 as an integer (the document says so); 3.5 and "3" are not.
        whole = isinstance(value, float) and value.is_integer()
        if isinstance(value, bool) or not (isinstance(value, int) or whole):
            yield LocatedFieldError(pointer, "Not a valid integer.")
    elif isinstance(field, fields.Number):
        if isinstance(value, bool) or not isinstance(value, int | float):
            yield LocatedFieldError(pointer, "Not a valid number.")
    elif isinstance(field, fields.Nested):
        nested = field.schema
        if isinstance(value, list) and field.many:
            for index, item in enumerate(value):
                yield from type_errors(nested, item, f"{pointer}/{index}")
        else:
            yield from type_errors(nested, value, pointer)
    elif isinstance(field, fields.List) and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _field_type_errors(field.inner, item, f"{pointer}/{index}")
    elif isinstance(field, fields.Tuple) and isinstance(value, list):
        for index, (inner, item) in enumerate(zip(field.tuple_fields, value, strict=False)):
            yield from _field_type_errors(inner, item, f"{pointer}/{index}")
    elif isinstance(field, fields.Dict) and isinstance(value, Mapping) and field.value_field:
        for key, item in value.items():
            yield from _field_type_errors(field.value_field, item, f"{pointer}/{_escape(str(key))}")


def type_errors(schema: Schema, data: Any, pointer: str = "") -> Iterator[FieldError]:
    """Every boolean, integer or number field of ``schema`` that ``data`` gives in another type.

    marshmallow's ``Boolean`` takes ``0``, ``1``, ``"true"``, ``"off"`` and the like, and its
    ``Integer`` takes ``"3"`` and ``3.5`` (and ``"٣"``); the API takes JSON booleans, JSON
    integers and JSON numbers only. Checked on the decoded body before the schema loads it, for
    every such field of every schema, nested and listed ones included. Other wrong types are
    left to the schema.
    """
    if not isinstance(data, Mapping):
        return
    for name, field in schema.load_fields.items():
        key = field.data_key or name
        if key in data:
            yield from _field_type_errors(field, data[key], f"{pointer}/{_escape(key)}")


#: What a boolean query parameter may say: JSON's two words, as text.
QUERY_BOOLEANS = ("true", "false")


def query_type_errors(schema: Schema, query: Mapping[str, Any]) -> Iterator[FieldError]:
    """Every boolean or integer query parameter of ``schema`` not written as one.

    A boolean is ``true`` or ``false``; an integer is ASCII digits (:func:`deskpool.values.
    ascii_int`: Python's ``int`` reads ``٣`` as 3, and raises past 4,300 digits).
    """
    for name, field in schema.load_fields.items():
        key = field.data_key or name
        if key not in query:
            continue
        values = query.getall(key) if hasattr(query, "getall") else [query[key]]
        if isinstance(field, fields.Boolean):
            if any(value not in QUERY_BOOLEANS for value in values):
                yield LocatedFieldError(
                    f"/query/{_escape(key)}", "Not a valid boolean: give true or false.", "query"
                )
        elif isinstance(field, fields.Integer) and any(ascii_int(v) is None for v in values):
            yield LocatedFieldError(
                f"/query/{_escape(key)}",
                f"Not a valid integer: give at most {MAX_DIGITS} ASCII digits.",
                "query",
            )


#: Content codings a request body may arrive in, besides ``identity``.
ACCEPTED_CODINGS = ("gzip", "deflate")

#: How long a body may take to arrive when the application sets no ``API_BODY_TIMEOUT``.
DEFAULT_BODY_TIMEOUT = 30.0
#: The most bytes a decoded body may have when the application sets no ``API_MAX_BODY_SIZE``.
DEFAULT_MAX_BODY = 1024 * 1024


def check_content_encoding(request: web.BaseRequest) -> None:
    """Refuse a body in a content coding this server does not read (415, RFC 9110 §15.5.16).

    :raises UnsupportedMediaType: with ``Accept-Encoding`` naming the codings read.
    """
    coding = request.headers.get(hdrs.CONTENT_ENCODING, "").strip().lower()
    if coding in ("", "identity") or coding in ACCEPTED_CODINGS:
        return
    raise UnsupportedMediaType(
        f"The request body's Content-Encoding is not one this server reads; send it as is "
        f"or in one of: {', '.join(ACCEPTED_CODINGS)}.",
        code="unsupported_content_encoding",
        headers={"Accept-Encoding": ", ".join(ACCEPTED_CODINGS)},
    )


def _invalid_coding() -> BadRequest:
    return BadRequest(
        "The request body is not in the Content-Encoding its header names, or breaks off "
        "before its end.",
        code="invalid_content_encoding",
        headers={"Connection": "close"},
    )


def decode_body(raw: bytes, coding: str, limit: int) -> bytes:
    """``raw`` decoded from the content coding ``coding`` (``gzip``, ``deflate``, identity).

    aiohttp's own decoding takes a gzip body that breaks off before its trailer (the CRC and
    length that say it is whole), so the API decodes bodies itself: a body is whole, in one
    member, with nothing after it. ``deflate`` is zlib's format, or raw deflate as some
    clients send it.

    :raises BadRequest: the body is not in its coding, breaks off, or has bytes after its end.
    :raises PayloadTooLarge: the decoded body is over ``limit`` bytes.
    """
    if coding not in ACCEPTED_CODINGS:
        return raw
    if coding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    else:  # RFC 1950's header names the method in its low four bits; raw deflate has none
        wbits = zlib.MAX_WBITS if raw[:1] and raw[0] & 0x0F == 8 else -zlib.MAX_WBITS
    decompressor = zlib.decompressobj(wbits)
    try:
        decoded = decompressor.decompress(raw, limit + 1)
    except zlib.error:
        raise _invalid_coding() from None
    if len(decoded) > limit:
        raise PayloadTooLarge(
            f"The request body decodes to more than {limit} bytes; this server accepts at "
            "most that many (API_MAX_BODY_SIZE).",
            extra={"max_size": limit},
        )
    if not decompressor.eof or decompressor.unused_data:
        raise _invalid_coding()
    return decoded


async def read_body(request: web.Request, seconds: float, limit: int) -> bytes:
    """The whole body of ``request``, decoded from its content coding.

    The API's application reads bodies as sent (``auto_decompress`` off): see
    :func:`decode_body`.

    :param limit: the most bytes the decoded body may have (``API_MAX_BODY_SIZE``).
    :raises UnsupportedMediaType: the content coding is not one this server reads.
    :raises BadRequest: the body does not match its coding, or breaks off.
    :raises PayloadTooLarge: the decoded body is over ``limit`` bytes.
    :raises RequestTimeout: the body did not arrive within ``seconds``.
    """
    if not request.body_exists:
        return b""
    check_content_encoding(request)
    try:
        async with asyncio.timeout(seconds):
            raw = await request.read()
    except TimeoutError:
        raise RequestTimeout(
            f"The request body did not arrive within {seconds:g} seconds (API_BODY_TIMEOUT).",
            headers={"Connection": "close"},
        ) from None
    except RequestPayloadError as error:
        if isinstance(error.__cause__, ContentEncodingError):
            raise _invalid_coding() from None
        raise BadRequest(
            "The request body could not be read to its end.", headers={"Connection": "close"}
        ) from None
    coding = request.headers.get(hdrs.CONTENT_ENCODING, "").strip().lower()
    return decode_body(raw, coding, limit)


def decode_text(raw: bytes, charset: str | None) -> str:
    """``raw`` as text in ``charset`` (UTF-8 when none is named).

    :raises BadRequest: the charset is unknown, is a codec that is not a text encoding
        (``hex``, ``rot13``), or cannot decode the bytes (``punycode`` raises a bare
        ``UnicodeError``, some codecs a ``ValueError``).
    """
    name = charset or "utf-8"
    try:
        if not codecs.lookup(name)._is_text_encoding:
            raise LookupError(name)
        return raw.decode(name)
    except (LookupError, ValueError):  # UnicodeError is a ValueError
        raise BadRequest("The request body is not text in its declared charset.") from None


class DeskpoolParser(AIOHTTPParser):
    """webargs' aiohttp parser, raising deskpool's errors instead of aiohttp's.

    :param body_timeout: seconds a request body may take to arrive (``API_BODY_TIMEOUT``).
    :param max_body_size: the most bytes a decoded body may have (``API_MAX_BODY_SIZE``).
    """

    def __init__(
        self, body_timeout: float = DEFAULT_BODY_TIMEOUT, max_body_size: int = DEFAULT_MAX_BODY
    ) -> None:
        super().__init__()
        self.body_timeout = body_timeout
        self.max_body_size = max_body_size

    async def load_json(self, req: web.Request, schema: Schema) -> Any:
        """The decoded JSON body.

        :raises ValidationFailed: there is no body (operations that read one require it).
        :raises BadRequest: the body is not text in its charset, not JSON, nested too deeply,
            holds text that is not text, or does not match its ``Content-Encoding``.
        :raises RequestTimeout: the body did not arrive within ``API_BODY_TIMEOUT``.
        """
        raw = await read_body(req, self.body_timeout, self.max_body_size)
        if not raw.strip():
            raise ValidationFailed([LocatedFieldError("", "A JSON request body is required.")])
        data = read_json(decode_text(raw, req.charset))
        errors = list(type_errors(schema, data))
        if errors:
            raise ValidationFailed(errors)
        return data

    def load_querystring(self, req: web.Request, schema: Schema) -> Any:
        """The query parameters; a boolean says ``true`` or ``false``, an integer ASCII digits.

        :raises ValidationFailed: a boolean or integer query parameter says anything else.
        """
        errors = list(query_type_errors(schema, req.query))
        if errors:
            raise ValidationFailed(errors)
        return super().load_querystring(req, schema)

    def handle_error(
        self,
        error: ValidationError,
        req: web.Request,
        schema: Schema,
        *,
        error_status_code: int | None,
        error_headers: Mapping[str, str] | None,
    ) -> NoReturn:
        """Raise a 422 with one field error per invalid field."""
        location = "json"
        messages = error.messages
        if isinstance(messages, Mapping) and len(messages) == 1:
            (location, messages) = next(iter(messages.items()))
        raise ValidationFailed(field_errors(messages, str(location)))


def check_body_size(request: web.Request, limit: int) -> None:
    """Refuse a body whose declared length is over ``limit`` bytes, without reading it.

    A body sent without ``Content-Length`` (chunked) is counted as it is read; aiohttp stops at
    ``limit`` and the problem middleware answers the same 413.

    :raises PayloadTooLarge: the declared length is over the limit.
    """
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(
            f"The request body is {length} bytes; this server accepts at most {limit} bytes "
            "(API_MAX_BODY_SIZE).",
            extra={"max_size": limit},
        )


async def parse_body(
    request: web.Request, schema: Schema, parser: DeskpoolParser
) -> dict[str, Any]:
    """Validate the JSON body of ``request`` against ``schema`` (made with ``unknown=RAISE``)."""
    if request.body_exists and not core.is_json(request.content_type):
        raise UnsupportedMediaType(
            "The request body must be application/json; it was "
            f"{request.content_type or 'sent without a Content-Type'}."
        )
    result: dict[str, Any] = await parser.parse(schema, request, location="json")
    return result


async def parse_query(
    request: web.Request, schema: Schema, parser: DeskpoolParser
) -> dict[str, Any]:
    """Validate the query parameters of ``request`` against ``schema`` (``unknown=EXCLUDE``)."""
    result: dict[str, Any] = await parser.parse(schema, request, location="query")
    return result


def require_exactly_one(data: Mapping[str, Any], names: Sequence[str]) -> None:
    """Refuse a body that gives none or more than one of the fields ``names``.

    Use it in a schema's ``validates_schema`` with the same names in its
    ``Meta.exactly_one_of``, which the OpenAPI document states as ``oneOf``
    (:class:`deskpool.api.openapi.SchemaRulesPlugin`).

    :raises marshmallow.ValidationError: a 422 on the body itself.
    """
    if sum(data.get(name) is not None for name in names) != 1:
        raise ValidationError(f"Give exactly one of {' or '.join(names)}.")


class FullMatch(validate.Regexp):
    """``validate.Regexp`` over the whole value (``$`` lets a final newline through in Python).

    The document states the same ``pattern``, which ECMA-262 anchors at the very end.
    """

    def __call__(self, value: Any) -> Any:
        """Refuse ``value`` unless the whole of it matches."""
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value
