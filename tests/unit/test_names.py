"""Display names: one rule, stated by a pattern that Python and the API document read alike."""

from __future__ import annotations

import re

import pytest

from deskpool.names import NAME_PATTERN, SPACE, is_display_name


@pytest.mark.parametrize("name", ["lab", "Lab 2", "Café des Arts", "x", "a\u200bb", "\U0001f600"])
def test_display_names(name: str) -> None:
    assert is_display_name(name)


@pytest.mark.parametrize(
    "name", ["", " lab", "lab ", "lab\n", "la\x00b", "la\x1bb", "\x85lab", "lab\u3000", "a\ud800"]
)
def test_not_display_names(name: str) -> None:
    assert not is_display_name(name)


def test_the_space_class_is_what_str_isspace_means() -> None:
    space = re.compile(f"[{SPACE}]")
    assert [c for c in map(chr, range(0x10000)) if c.isspace() != bool(space.fullmatch(c))] == []


def test_the_pattern_needs_no_python_only_syntax() -> None:
    # ECMA-262 has no \\Z, \\A, (?P<...>) or inline flags; the pattern uses none of them.
    assert not re.search(r"\\[AZ]|\(\?P|\(\?[aiLmsux]", NAME_PATTERN)
