"""The marker of a member a change leaves out, as opposed to one it sets to ``None``.

A typed command that changes some members of an object (``PATCH``) holds every member with
the type ``T | Unset``: :data:`UNSET` says "keep the stored value", ``None`` (where the member
allows it) says "clear it". :func:`given` lists the members a command sets.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Final


class Unset(enum.Enum):
    """The type of :data:`UNSET` (an enum, so ``x is UNSET`` narrows the type for mypy)."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


#: A member the change leaves as it is.
UNSET: Final = Unset.UNSET


def given(command: Any) -> dict[str, Any]:
    """The members of the dataclass ``command`` that are set (not :data:`UNSET`), by name."""
    return {
        field.name: getattr(command, field.name)
        for field in dataclasses.fields(command)
        if getattr(command, field.name) is not UNSET
    }
