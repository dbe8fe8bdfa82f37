"""Naming patterns: rendering, validation and the choice of free names."""

from __future__ import annotations

import pytest

from deskpool.errors import ValidationFailed
from deskpool.pools.naming import (
    InvalidNamingPattern,
    NamingPattern,
    name_key,
    next_free_names,
    parse_pattern,
    pattern_problems,
    render_name,
)


@pytest.mark.parametrize(
    ("pattern", "number", "name"),
    [
        ("lab-{n:03}", 1, "lab-001"),
        ("lab-{n:03}", 42, "lab-042"),
        ("lab-{n:03}", 1000, "lab-1000"),
        ("{n}-desk", 7, "7-desk"),
        ("vdi{n:x}", 255, "vdiff"),
        ("lab-{n}", 12, "lab-12"),
    ],
)
def test_render_name(pattern: str, number: int, name: str) -> None:
    assert render_name(pattern, number) == name
    assert parse_pattern(pattern).render(number) == name


@pytest.mark.parametrize("pattern", ["lab-{n:03}", "lab-{n}", "{n:04}", "a{n}b", "vdi{n:x}"])
def test_valid_patterns_have_no_problems(pattern: str) -> None:
    assert pattern_problems(pattern, max_number=500) == []


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("lab", "must contain the number field {n}"),
        ("", "must contain the number field {n}"),
        ("lab-{n}-{n}", "exactly one field {n}, found 2"),
        ("lab-{}", "must be named 'n'"),
        ("lab-{0}", "must be named 'n'"),
        ("lab-{x}", "must be named 'n'"),
        ("lab-{n.real}", "must be named 'n'"),
        ("lab-{n[0]}", "must be named 'n'"),
        ("lab-{n!r}", "takes no conversion"),
        ("lab-{n:{w}}", "nested fields"),
        ("lab-{n", "not a valid format string"),
        ("lab-}", "not a valid format string"),
        ("lab-{n:s}", "does not apply to a number"),
        ("lab-{n:.2f}", "not a host name"),
        ("lab_{n}", "not a host name"),
        ("-{n}", "not a host name"),
        ("lab-{n}-", "not a host name"),
        ("lab {n}", "not a host name"),
        ("lab-{{n}}", "must contain the number field {n}"),
        ("x" * 62 + "{n:03}", "longer than 63 characters"),
    ],
)
def test_invalid_patterns_say_why(pattern: str, fragment: str) -> None:
    problems = pattern_problems(pattern)
    assert problems, pattern
    assert any(fragment in problem for problem in problems), problems


def test_the_largest_number_must_render_a_valid_name() -> None:
    pattern = "x" * 60 + "{n}"
    assert pattern_problems(pattern, max_number=999) == []
    assert any(
        "longer than 63" in problem for problem in pattern_problems(pattern, max_number=1000)
    )


def test_windows_names_are_netbios_names() -> None:
    assert pattern_problems("win-desk-{n:03}", max_number=999, windows=True) == []
    long = pattern_problems("windows-desk-{n:03}", max_number=10, windows=True)
    assert any("15 characters of a Windows computer name" in problem for problem in long)
    assert pattern_problems("windows-desk-{n:03}", max_number=10) == []
    # "windesktops-999" has 15 characters, "windesktops-1000" 16
    assert pattern_problems("windesktops-{n:03}", max_number=999, windows=True) == []
    assert pattern_problems("windesktops-{n:03}", max_number=1000, windows=True) != []
    digits = pattern_problems("{n:04}", windows=True)
    assert any("cannot be all digits" in problem for problem in digits)
    assert pattern_problems("{n:04}") == []


def test_parse_pattern_raises_a_validation_error_with_the_field() -> None:
    with pytest.raises(InvalidNamingPattern) as caught:
        parse_pattern("lab-{x}")
    error = caught.value
    assert isinstance(error, ValidationFailed)
    assert error.status == 422
    assert error.code == "invalid_naming_pattern"
    assert error.extra["errors"][0]["pointer"] == "/naming_pattern"
    assert "lab-{x}" in error.detail
    with pytest.raises(InvalidNamingPattern):
        render_name("lab", 1)


def test_parse_pattern_accepts_names_it_can_render() -> None:
    assert parse_pattern("lab-{n:03}") == NamingPattern("lab-{n:03}")


def test_name_key_ignores_case() -> None:
    assert name_key("LAB-001") == name_key("lab-001") == "lab-001"


def test_next_free_names_take_the_lowest_free_numbers() -> None:
    assert next_free_names("lab-{n:03}", 3, set()) == ["lab-001", "lab-002", "lab-003"]
    taken = {"lab-001", "lab-003", "lab-004"}
    assert next_free_names("lab-{n:03}", 3, taken) == ["lab-002", "lab-005", "lab-006"]


def test_next_free_names_never_reuse_a_present_name_whatever_its_case() -> None:
    taken = {name_key("LAB-001"), name_key("Lab-002")}
    assert next_free_names("lab-{n:03}", 1, taken) == ["lab-003"]
    assert next_free_names("LAB-{n:03}", 1, {"lab-003", "lab-001", "lab-002"}) == ["LAB-004"]


def test_next_free_names_from_a_start_and_with_a_parsed_pattern() -> None:
    assert next_free_names(parse_pattern("d{n}"), 2, {"d11"}, start=10) == ["d10", "d12"]
    assert next_free_names("d{n}", 0, set()) == []


def test_next_free_names_reject_an_invalid_pattern() -> None:
    with pytest.raises(InvalidNamingPattern):
        next_free_names("lab", 1, set())


def test_next_free_names_do_not_change_the_taken_set() -> None:
    taken = {"lab-001"}
    next_free_names("lab-{n:03}", 5, taken)
    assert taken == {"lab-001"}
