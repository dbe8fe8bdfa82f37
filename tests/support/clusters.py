"""The cluster tests' callers."""

from __future__ import annotations

from dataclasses import dataclass

Headers = dict[str, str]


@dataclass(frozen=True)
class Callers:
    """Authorization headers of the test's callers."""

    manager: Headers
    reader: Headers
    nobody: Headers
