"""Desktop naming patterns: ``lab-{n:03}`` renders ``lab-001``, ``lab-002`` and so on.

A pattern is a Python format string with exactly one replacement field, ``{n}``, optionally
with an integer format spec (``{n:03}`` pads to three digits). The rendered name is both the
VM name on the cluster and the guest's host name, so it must be a DNS label (letters, digits
and hyphens, at most 63 characters, no hyphen at either end); Windows computer names are also
limited to 15 characters and may not be all digits (NetBIOS).

Host names are case-insensitive, so names are compared by :func:`name_key` (``LAB-001`` and
``lab-001`` are the same name). A new desktop takes the lowest number whose name is not present
on the cluster, so a name is never reused while a VM or a desktop record still carries it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Container
from dataclasses import dataclass

from deskpool.errors import FieldError, ValidationFailed

#: The one replacement field a pattern must contain.
NUMBER_FIELD = "n"

#: Longest VM and host name: one DNS label.
MAX_NAME_LENGTH = 63

#: Longest Windows computer name (the NetBIOS limit).
MAX_WINDOWS_NAME_LENGTH = 15

_DNS_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
#: What a naming pattern looks like, as the API document states it: host-name characters around
#: one ``{n}`` field, zero-padded to a width of at most :data:`MAX_NAME_LENGTH` if at all, so
#: that it renders host names. (How long a rendered name is depends on the pool's size and
#: OS, which a pattern on one field cannot say; :func:`pattern_problems` checks that.)
PATTERN_SHAPE = (
    r"^(?:[A-Za-z0-9][A-Za-z0-9-]*)?"
    r"\{n(?::(?:0(?:[1-9]|[1-5][0-9]|6[0-3]))?d?)?\}"
    r"(?:[A-Za-z0-9-]*[A-Za-z0-9])?$"
)


class InvalidNamingPattern(ValidationFailed):
    """A naming pattern does not have exactly one ``{n}`` field, or does not render."""

    code = "invalid_naming_pattern"

    def __init__(self, pattern: str, problems: list[str]) -> None:
        self.pattern = pattern
        self.problems = problems
        super().__init__(
            [FieldError("/naming_pattern", problem) for problem in problems],
            detail=f"invalid naming pattern {pattern!r}: {'; '.join(problems)}",
        )


@dataclass(frozen=True, slots=True)
class NamingPattern:
    """A parsed, valid naming pattern.

    Build one with :func:`parse_pattern`, which checks the pattern; rendering then never fails.
    """

    text: str

    def render(self, number: int) -> str:
        """Return the name for ``number`` (``lab-{n:03}`` and 7 give ``lab-007``)."""
        return self.text.format(n=number)


def name_key(name: str) -> str:
    """Return the key names are compared by: host names are case-insensitive."""
    return name.casefold()


def _syntax_problems(pattern: str) -> list[str]:
    """Return what is wrong with the format-string syntax of ``pattern``."""
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        return [f"not a valid format string: {exc}"]
    fields = [(name, spec, conversion) for _, name, spec, conversion in parts if name is not None]
    if not fields:
        return [f"must contain the number field {{{NUMBER_FIELD}}}, for example lab-{{n:03}}"]
    if len(fields) > 1:
        return [f"must contain exactly one field {{{NUMBER_FIELD}}}, found {len(fields)}"]
    name, spec, conversion = fields[0]
    if name != NUMBER_FIELD:
        shown = name or "{}"
        return [f"the field must be named {NUMBER_FIELD!r} (as in {{n:03}}), found {shown!r}"]
    if conversion is not None:
        return [f"the number field takes no conversion (!{conversion})"]
    if spec and "{" in spec:
        return ["the number field's format spec cannot contain nested fields"]
    # Bound the width before rendering: {n:099999999} would build a 100 MB name.
    widths = [int(w) for w in re.findall(r"\d+", spec or "")]
    if any(width > MAX_NAME_LENGTH for width in widths):
        return [f"the number field is wider than a name may be ({MAX_NAME_LENGTH} characters)"]
    try:
        format(1, spec or "")
    except ValueError as exc:
        return [f"format spec {spec!r} does not apply to a number: {exc}"]
    return []


def _name_problems(name: str, *, windows: bool) -> list[str]:
    """Return why ``name`` is not a valid VM and host name."""
    problems = []
    if len(name) > MAX_NAME_LENGTH:
        problems.append(f"renders {name!r}, longer than {MAX_NAME_LENGTH} characters")
    if not _DNS_LABEL.fullmatch(name):
        problems.append(
            f"renders {name!r}, which is not a host name (use letters, digits and hyphens, "
            "not starting or ending with a hyphen)"
        )
    if windows:
        if len(name) > MAX_WINDOWS_NAME_LENGTH:
            problems.append(
                f"renders {name!r}, longer than the {MAX_WINDOWS_NAME_LENGTH} characters "
                "of a Windows computer name"
            )
        if name.isdigit():
            problems.append(f"renders {name!r}; a Windows computer name cannot be all digits")
    return problems


def pattern_problems(pattern: str, *, max_number: int = 1, windows: bool = False) -> list[str]:
    """Return every problem of ``pattern`` as a sentence; an empty list means it is valid.

    The pattern is rendered for 1 and for ``max_number`` (the pool's ``max_size``), and both
    names must be valid host names (and Windows computer names when ``windows``).
    """
    problems = _syntax_problems(pattern)
    if problems:
        return problems
    compiled = NamingPattern(pattern)
    for number in sorted({1, max(1, max_number)}):
        for problem in _name_problems(compiled.render(number), windows=windows):
            if problem not in problems:
                problems.append(problem)
    return problems


def parse_pattern(pattern: str) -> NamingPattern:
    """Check the syntax of ``pattern`` and return it parsed.

    :raises InvalidNamingPattern: when it has no single ``{n}`` field or does not render.
    """
    problems = _syntax_problems(pattern)
    if problems:
        raise InvalidNamingPattern(pattern, problems)
    return NamingPattern(pattern)


def render_name(pattern: str, number: int) -> str:
    """Render ``pattern`` for ``number``: ``render_name("lab-{n:03}", 1) == "lab-001"``.

    :raises InvalidNamingPattern: when the pattern is invalid.
    """
    return parse_pattern(pattern).render(number)


def next_free_names(
    pattern: str | NamingPattern, count: int, taken: Container[str], *, start: int = 1
) -> list[str]:
    """Return ``count`` new names: the lowest numbers from ``start`` whose names are free.

    :param pattern: the pool's naming pattern.
    :param count: how many names to return.
    :param taken: the :func:`name_key` of every name present on the cluster (VM names and
        desktop records, including desktops being provisioned or deleted); it is only read.
    :raises InvalidNamingPattern: when the pattern is invalid.
    """
    compiled = pattern if isinstance(pattern, NamingPattern) else parse_pattern(pattern)
    names: list[str] = []
    chosen: set[str] = set()
    number = start
    while len(names) < count:
        name = compiled.render(number)
        key = name_key(name)
        if key not in taken and key not in chosen:
            names.append(name)
            chosen.add(key)
        number += 1
    return names
