"""Every write operation of the OpenAPI document, fed extreme values: never a 5xx.

Issue 33 asks for a fuzz run over every ``POST``, ``PUT``, ``PATCH`` and ``DELETE`` of the
document, with extreme dates, integers and strings, in ``make test``. schemathesis (in
``test_contract.py``) generates data the document allows, so it never sends year 9999 to a
field whose ``pattern`` refuses it; this test builds hypothesis strategies from the same
document's schemas and puts at every leaf the values that made 500s before: instants at the
ends of ``datetime``'s range and beyond the document's years, dates on 9999-12-31, integers
past 64 bits or given as ``3.5``, ``"3"``, ``"٣"``, booleans given as ``0``, time zones that are
not places, strings in other scripts' digits, and path ids in them too (``²``, ``٣``, 5,000
digits). The API is the real one over real PostgreSQL and Redis (the contract test's served
instance), called by a platform administrator (every permission). A request may be refused
with any 4xx; a 5xx fails the test.

Bounded: a few examples per operation, derandomised, about 300 requests in all.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import requests
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.api.test_contract import DOCUMENT, ServedApis
from tests.integration.api.test_contract import served as served  # the module's API instance

#: Random examples per operation (on top of the sweep of SEEDS).
EXAMPLES = 6
WRITES = ("post", "put", "patch", "delete")

INSTANTS = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59.999999-12:00",
    "9999-12-31T23:59:59Z",
    "1969-12-31T23:59:59Z",
    "8999-12-31T23:59:59-12:00",
    "1970-01-01T00:00:00+14:00",
    "2030-01-01T00:00:00",
    "2030-01-01T00:00:00Z",
    "\uff12\uff10\uff13\uff10-01-01T00:00:00Z",
]
DAYS = [
    "9999-12-31",
    "0001-01-01",
    "8999-12-31",
    "1970-01-01",
    "2030-06-01",
    "\uff12\uff10\uff13\uff10-06-01",
]
INTEGERS: list[Any] = [0, 1, -1, 3, 2**31, 2**63, -(2**63) - 1, 10**30, 3.5, "3", "٣", True, None]
NUMBERS: list[Any] = [0, -1.5, 1e308, 10**30, "1", True, None]
BOOLEANS: list[Any] = [True, False, 0, "true", None]
STRINGS = [
    "",
    "x",
    "Zürich",
    "٣",
    "²",
    "\u202e\u0301",
    "a" * 5000,
    "localtime",
    "Factory",
    "EST5EDT",
    "Etc/GMT+12",
    "9999-12-31",
    "0001-01-01T00:00:00Z",
    "-1",
    "{n:99999999999}",
]
PATH_IDS = [
    "00000000-0000-4000-8000-000000000000",
    "²",
    "٣",
    "9" * 5000,
    "-1",
    "0",
    "1",
    "user",
    "%C2%B2",
]


_SCHEDULE: dict[str, Any] = {
    "name": "fuzzed",
    "time_zone": "Etc/GMT+12",
    "phases": [
        {"name": "day", "days": ["mon", "tue"], "start": "07:00", "min_ready": 1, "spare": 1},
        {"name": "night", "days": ["mon"], "start": "19:00", "idle": "power_off"},
    ],
    # One day (last defaults to first): an extreme first is the whole exception.
    "exceptions": [{"name": "x", "first": "2030-12-24", "phase": "day"}],
}
#: Valid bodies of the operations that compute with dates and counts: the fuzzer changes one
#: leaf of them to an extreme value, so the rest of the body passes and the value reaches the
#: service, the model and the database.
SEEDS: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/v1/schedules"): _SCHEDULE,
    ("PUT", "/api/v1/schedules/{schedule_id}"): _SCHEDULE,
    ("POST", "/api/v1/schedule-preview"): _SCHEDULE
    | {"from": "2030-12-20T00:00:00Z", "to": "2030-12-28T00:00:00Z", "max_size": 10},
    ("POST", "/api/v1/pools/{pool_id}/rollouts"): {
        "template": "ubuntu-24.04",
        "start_at": "2030-01-01T00:00:00Z",
        "batch_size": 1,
    },
}


def _document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(DOCUMENT.read_text())
    return document


DOC = _document()


def write_operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in DOC["paths"].items():
        for method, operation in item.items():
            if method in WRITES:
                yield method.upper(), path, operation


def _resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = DOC["components"]["schemas"][name]
    return schema


def _leaf(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(_extremes(schema))


def _extremes(schema: Mapping[str, Any]) -> list[Any]:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    choices: list[Any]
    if "enum" in schema:
        choices = [*schema["enum"], "²", ""]
    elif schema.get("format") == "date-time":
        choices = INSTANTS
    elif schema.get("format") == "date":
        choices = DAYS
    elif kind == "integer":
        choices = [*INTEGERS, schema.get("minimum", 0), schema.get("maximum", 0)]
    elif kind == "number":
        choices = NUMBERS
    elif kind == "boolean":
        choices = BOOLEANS
    else:
        choices = STRINGS
    return choices


def strategy(schema: Mapping[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for ``schema``: its shape, with an extreme value at every leaf."""
    schema = _resolve(schema)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return st.one_of([strategy(sub, depth + 1) for sub in schema[key]])
    if "allOf" in schema:
        merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
        for sub in schema["allOf"]:
            sub = _resolve(sub)
            merged["properties"].update(sub.get("properties", {}))
            merged["required"] += sub.get("required", [])
        schema = merged
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if depth > 6:
        return st.none()
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        members = {
            name: strategy(sub, depth + 1)
            for name, sub in properties.items()
            if not _resolve(sub).get("readOnly")
        }
        shaped = st.fixed_dictionaries(
            {name: value for name, value in members.items() if name in required},
            optional={name: value for name, value in members.items() if name not in required},
        )
        return st.one_of(shaped, _leaf({"type": "string"})) if depth else shaped
    if kind == "array":
        items = strategy(schema.get("items", {}), depth + 1)
        return st.lists(items, max_size=3)
    return _leaf(schema)


def _leaves(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*at, index))
    else:
        yield at


def _schema_at(schema: Mapping[str, Any], at: tuple[Any, ...]) -> Mapping[str, Any]:
    for step in at:
        schema = _resolve(schema)
        for key in ("oneOf", "anyOf", "allOf"):
            for sub in schema.get(key, []):
                sub = _resolve(sub)
                if isinstance(step, str) and step in sub.get("properties", {}):
                    schema = sub
        if isinstance(step, int):
            schema = schema.get("items", {})
        else:
            schema = schema.get("properties", {}).get(step, {})
    return _resolve(schema)


def _replaced(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    if not at:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[at[0]] = _replaced(value[at[0]], at[1:], new)  # type: ignore[index]
    return copy


def _is_value_leaf(schema: Mapping[str, Any], at: tuple[Any, ...]) -> bool:
    kind = schema.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind}
    return (
        schema.get("format") in ("date", "date-time")
        or bool(kinds & {"integer", "number", "boolean"})
        or (bool(at) and at[-1] == "time_zone")
    )


def sweep(schema: Mapping[str, Any], seed: dict[str, Any]) -> Iterator[Any]:
    """``seed`` with each date, instant, count, boolean and time zone replaced in turn.

    Each is replaced by each extreme value of its type, every other leaf valid, so that the
    value gets past the schema to the service, the model and the database.
    """
    for at in _leaves(seed):
        leaf = _schema_at(schema, at)
        if not _is_value_leaf(leaf, at):
            continue
        for new in _extremes(leaf):
            yield _replaced(seed, at, new)


def _body_schema(operation: Mapping[str, Any]) -> Mapping[str, Any] | None:
    body = operation.get("requestBody")
    if body is None:
        return None
    content = _resolve(body).get("content", {})
    media = content.get("application/json") or next(iter(content.values()), {})
    schema: Mapping[str, Any] | None = media.get("schema")
    return schema


OPERATIONS = list(write_operations())


@pytest.mark.parametrize(
    ("method", "path", "operation"), OPERATIONS, ids=[f"{m} {p}" for m, p, _ in OPERATIONS]
)
def test_no_write_operation_answers_a_5xx_to_extreme_values(
    method: str, path: str, operation: dict[str, Any], served: ServedApis
) -> None:
    headers = {"Authorization": f"Bearer {served.admin_token}"}
    names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "path"]
    body_schema = _body_schema(operation)
    bodies = strategy(body_schema) if body_schema is not None else st.none()
    seed = SEEDS.get((method, path))
    session = requests.Session()
    fill = dict.fromkeys(names, "00000000-0000-4000-8000-000000000000")
    swept = sweep(body_schema or {}, seed) if seed is not None else iter(())
    for index, body in enumerate(swept):
        if "name" in body:  # a name of its own, or a second create is a 409 before anything
            body["name"] = f"fuzzed-{secrets.token_hex(3)}-{index}"
        response = session.request(
            method, served.secured + path.format(**fill), json=body, headers=headers, timeout=30
        )
        assert response.status_code < 500, (method, path, body, response.text[:500])

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(ids=st.fixed_dictionaries({name: st.sampled_from(PATH_IDS) for name in names}),
           body=bodies)  # fmt: skip
    def send(ids: dict[str, str], body: Any) -> None:
        url = served.secured + path.format(**ids)
        kwargs: dict[str, Any] = {"json": body} if body_schema is not None else {}
        response = session.request(method, url, headers=headers, timeout=30, **kwargs)
        assert response.status_code < 500, (method, url[:200], body, response.text[:500])

    try:
        send()
    finally:
        session.close()
