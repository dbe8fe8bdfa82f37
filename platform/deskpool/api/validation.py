"""Request validation with webargs, from the same marshmallow schemas the document is made of.

Malformed JSON is a 400; a body that is not JSON is a 415; unknown fields, wrong types and
missing required fields are a 422 whose ``errors`` list each field with its JSON pointer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from aiohttp import web
from marshmallow import EXCLUDE, RAISE, Schema, ValidationError
from webargs.aiohttpparser import AIOHTTPParser

from deskpool.errors import BadRequest, FieldError, UnsupportedMediaType, ValidationFailed


def _pointer_segments(messages: Any, prefix: str) -> Iterator[FieldError]:
    if isinstance(messages, Mapping):
        for key, value in messages.items():
            segment = str(key).replace("~", "~0").replace("/", "~1")
            path = prefix if key == "_schema" else f"{prefix}/{segment}"
            yield from _pointer_segments(value, path)
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        for message in messages:
            yield FieldError(prefix or "/", message)
    elif isinstance(messages, list):
        for item in messages:
            yield from _pointer_segments(item, prefix)
    else:
        yield FieldError(prefix or "/", str(messages))


def field_errors(messages: Any, location: str) -> list[FieldError]:
    """Flatten marshmallow's nested messages into field errors with JSON pointers.

    Body fields are pointed to from the body's root (``/name``); query parameters are prefixed
    with ``/query`` so a client can tell them apart.
    """
    prefix = "" if location == "json" else f"/{location}"
    return list(_pointer_segments(messages, prefix))


class DeskpoolParser(AIOHTTPParser):
    """webargs' aiohttp parser, raising deskpool's errors instead of aiohttp's."""

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

    def _handle_invalid_json_error(
        self,
        error: json.JSONDecodeError | UnicodeDecodeError,
        req: web.Request,
        *args: Any,
        **kwargs: Any,
    ) -> NoReturn:
        raise BadRequest(f"The request body is not valid JSON: {error}.")


_parser = DeskpoolParser()


async def parse_body(request: web.Request, schema: type[Schema]) -> dict[str, Any]:
    """Validate the JSON body of ``request`` against ``schema`` (unknown fields rejected)."""
    if request.body_exists and request.content_type != "application/json":
        raise UnsupportedMediaType("The request body must be application/json.")
    if not request.body_exists:
        raise ValidationFailed([FieldError("/", "A JSON request body is required.")])
    result: dict[str, Any] = await _parser.parse(schema(unknown=RAISE), request, location="json")
    return result


async def parse_query(request: web.Request, schema: type[Schema]) -> dict[str, Any]:
    """Validate the query parameters of ``request`` against ``schema``."""
    result: dict[str, Any] = await _parser.parse(schema(unknown=EXCLUDE), request, location="query")
    return result
