"""The input guard's checks of decoded JSON and of text, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from deskpool.api.inputs import (
    MAX_JSON_DEPTH,
    NestingTooDeep,
    check_json,
    read_json,
    text_problem,
    url_problems,
)
from deskpool.errors import BadRequest, InvalidText


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_text_problems() -> None:
    assert text_problem("plain café ✓ \U0001f600") is None
    assert text_problem("a\x00") == "contains a NUL character"
    assert text_problem("a\udfff") == "contains an unpaired surrogate"


def test_the_depth_limit_counts_arrays_and_objects() -> None:
    check_json(nested(MAX_JSON_DEPTH))
    check_json({"a": nested(MAX_JSON_DEPTH - 1)})
    with pytest.raises(NestingTooDeep):
        check_json(nested(MAX_JSON_DEPTH + 1))
    with pytest.raises(NestingTooDeep):
        check_json({"a": {"b": nested(MAX_JSON_DEPTH - 1)}})


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 500, 5000, 200_000])
def test_deep_documents_are_refused_at_parse_time(depth: int) -> None:
    with pytest.raises(NestingTooDeep):
        read_json("[" * depth + "]" * depth)


def test_every_bad_string_is_pointed_to() -> None:
    with pytest.raises(InvalidText) as refused:
        check_json({"ok": "fine", "a/b": ["x", "\x00"], "c": {"k\ud800": 1}, "d~": "\udc00"})
    assert refused.value.status == 400
    assert refused.value.extra["errors"] == [
        {"pointer": "/a~1b/1", "detail": "contains a NUL character", "location": "body"},
        {
            "pointer": "/c",
            "detail": "has a member name that contains an unpaired surrogate",
            "location": "body",
        },
        {"pointer": "/d~0", "detail": "contains an unpaired surrogate", "location": "body"},
    ]


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "[1e999]"])
def test_numbers_that_are_not_finite_are_refused(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        read_json(text)
    assert refused.value.code == "bad_request"


class FakeRequest:
    """What :func:`url_problems` reads of a request."""

    def __init__(self, raw_path: str, match_info: dict[str, str]) -> None:
        self.raw_path = raw_path
        self.match_info = match_info


@pytest.mark.parametrize(
    ("raw_path", "match_info", "expected"),
    [
        ("/api/v1/groups?limit=5", {}, []),
        ("/api/v1/groups/caf%C3%A9?q=a+b%20c", {"group_id": "café"}, []),
        ("/api/v1/roles/a%00b", {"role_key": "a\x00b"}, [("/path/role_key", "path")]),
        ("/api/v1/roles/a%ED%A0%80", {"role_key": "a%ED%A0%80"}, [("/path/role_key", "path")]),
        ("/api/v1/jobs?kind=%00&ok=1", {}, [("/query/kind", "query")]),
        ("/api/v1/jobs?k%FFind=1", {}, [("/query", "query")]),
        # Raw bytes the C parser refuses, should a parser ever let them through.
        ("/api/v1/roles/a\udcffb", {"role_key": "a\udcffb"}, [("/path/role_key", "path")]),
    ],
)
def test_url_problems(raw_path: str, match_info: dict[str, str], expected: list[Any]) -> None:
    found = url_problems(FakeRequest(raw_path, match_info))  # type: ignore[arg-type]
    assert [(error.pointer, error.as_dict()["location"]) for error in found] == expected
