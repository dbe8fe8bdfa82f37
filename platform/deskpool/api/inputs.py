"""The input guard: what the API refuses before any handler reads a request.

One place decides, for every operation of the route table and every operation a plugin adds:

- **text that is not text**: a NUL character (PostgreSQL's ``text`` cannot hold one), an
  unpaired surrogate (not Unicode: it cannot be encoded as UTF-8 for the database or a log) or
  percent-encoded bytes that are not UTF-8, anywhere in the path, the query (names and values)
  or the JSON body (keys and values): 400 ``invalid_text``, with a JSON pointer to each string;
- **JSON nested deeper than** :data:`MAX_JSON_DEPTH` arrays and objects: 400 ``json_too_deep``,
  decided at parse time, so no schema, validator or handler ever recurses into it;
- JSON numbers that are not finite (``NaN``, ``Infinity``, ``1e999``): 400 ``bad_request``.

:func:`input_guard_middleware` checks the URL of every request; :func:`read_json` is the only
reader of JSON bodies (webargs' parser calls it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_to_bytes

from aiohttp import web
from aiohttp.typedefs import Handler
from marshmallow import ValidationError

from deskpool.errors import BODY as BODY
from deskpool.errors import BadRequest, FieldError, InvalidText
from deskpool.errors import LocatedFieldError as LocatedFieldError

#: The deepest nesting of arrays and objects a JSON body may have (the body itself is 1).
MAX_JSON_DEPTH = 32

#: How many bad strings one refusal lists.
MAX_REPORTED = 20

#: Where a string of the request is, as a field error's ``location`` says.
QUERY = "query"
PATH = "path"

NUL = "contains a NUL character"
SURROGATE = "contains an unpaired surrogate"
NOT_UTF8 = "is not UTF-8 text (percent-encoded bytes that do not decode)"

_SURROGATES = re.compile("[\ud800-\udfff]")


def text_problem(text: str) -> str | None:
    """What makes ``text`` unacceptable, or ``None`` when it is fine."""
    if "\x00" in text:
        return NUL
    if not text.isascii() and _SURROGATES.search(text):
        return SURROGATE
    return None


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def located(pointer: str, message: str, location: str) -> FieldError:
    """A field error at ``pointer`` in ``location`` (``body``, ``query``, ``path``)."""
    return LocatedFieldError(pointer, message, location)


# --------------------------------------------------------------------------- JSON bodies


class NestingTooDeep(BadRequest):
    """A JSON body nests arrays and objects deeper than :data:`MAX_JSON_DEPTH`."""

    code = "json_too_deep"
    title = "JSON nested too deeply"


def _too_deep() -> NestingTooDeep:
    return NestingTooDeep(
        f"The request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep."
    )


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range")
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json(text: str) -> Any:
    """Decode a JSON body and check it with :func:`check_json`.

    :raises NestingTooDeep: arrays and objects nest deeper than :data:`MAX_JSON_DEPTH`.
    :raises InvalidText: a key or a string holds a NUL or an unpaired surrogate.
    :raises BadRequest: the text is not JSON, or holds a number that is not finite.
    """
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_constant)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as error:
        raise BadRequest(f"The request body is not valid JSON: {error}.") from None
    check_json(value)
    return value


def check_json(value: Any) -> None:
    """Refuse a decoded JSON value nested too deeply or holding text that is not text.

    Walks the value without recursion, so its own depth is never a risk.

    :raises NestingTooDeep: arrays and objects nest deeper than :data:`MAX_JSON_DEPTH`.
    :raises InvalidText: a key or a string holds a NUL or an unpaired surrogate.
    """
    errors = list(_bad_strings(value))
    if errors:
        raise InvalidText(errors[:MAX_REPORTED])


def _bad_strings(root: Any) -> Iterator[FieldError]:
    # (value, pointer, depth of the containers enclosing it)
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        value, pointer, depth = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem is not None:
                yield located(pointer, problem, BODY)
        elif isinstance(value, dict):
            if depth >= MAX_JSON_DEPTH:
                raise _too_deep()
            for key, item in reversed(value.items()):
                problem = text_problem(key)
                if problem is not None:
                    yield located(pointer, f"has a member name that {problem}", BODY)
                    continue
                stack.append((item, f"{pointer}/{_escape(key)}", depth + 1))
        elif isinstance(value, list):
            if depth >= MAX_JSON_DEPTH:
                raise _too_deep()
            for index in range(len(value) - 1, -1, -1):
                stack.append((value[index], f"{pointer}/{index}", depth + 1))


# --------------------------------------------------------------------------- URLs


def _decoded(raw: str, *, plus: bool = False) -> str | None:
    """``raw`` percent-decoded as UTF-8, or ``None`` when the bytes are not UTF-8."""
    if plus:
        raw = raw.replace("+", " ")
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeError:  # escapes that are not UTF-8; raw bytes the parser let through
        return None


def _component_problem(raw: str, *, plus: bool = False) -> str | None:
    decoded = _decoded(raw, plus=plus)
    if decoded is None:
        return NOT_UTF8
    return text_problem(decoded)


def url_problems(request: web.Request) -> list[FieldError]:
    """The strings of the request's path and query that are not text."""
    raw = request.raw_path
    # The HTTP parser refuses raw control bytes in the request line, so a URL without
    # escapes and non-ASCII characters holds only text: the hot path stops here.
    if "%" not in raw and raw.isascii():
        return []
    path, _, query = raw.partition("?")
    errors = _path_problems(request, path)
    for part in query.split("&"):
        if not part:
            continue
        raw_name, _, raw_value = part.partition("=")
        name = _decoded(raw_name, plus=True)
        problem = _component_problem(raw_name, plus=True)
        if problem is not None or name is None:
            errors.append(located("/query", f"a parameter name {problem or NOT_UTF8}", QUERY))
            continue
        problem = _component_problem(raw_value, plus=True)
        if problem is not None:
            errors.append(located(f"/query/{_escape(name)}", problem, QUERY))
    return errors[:MAX_REPORTED]


def _path_problems(request: web.Request, raw_path: str) -> list[FieldError]:
    if _component_problem(raw_path) is None:
        return []
    errors = []
    for name, value in request.match_info.items():
        # Matched values are decoded where the bytes are UTF-8 and left escaped elsewhere.
        problem = _component_problem(value) if "%" in value else text_problem(value)
        if problem is not None:
            errors.append(located(f"/path/{_escape(name)}", problem, PATH))
    return errors or [located("/path", _component_problem(raw_path) or NOT_UTF8, PATH)]


@web.middleware
async def input_guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a request whose path or query holds text that is not text (400)."""
    errors = url_problems(request)
    if errors:
        raise InvalidText(errors)
    return await handler(request)


def storable_text(value: Any) -> None:
    """Refuse text PostgreSQL cannot store: NUL characters and unpaired surrogates."""
    values = value if isinstance(value, list) else [value]
    for item in values:
        if not isinstance(item, str):
            continue
        if "\x00" in item:
            raise ValidationError("Must not contain NUL characters.")
        try:
            item.encode()
        except UnicodeEncodeError:
            raise ValidationError("Must not contain unpaired surrogates.") from None
