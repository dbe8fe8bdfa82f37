"""The API's value types: the marshmallow fields every operation reads instants and dates with.

Each checks once, at the edge, what :mod:`deskpool.values` says models can compute with, and
says it in the OpenAPI document (a ``pattern`` on the year, the range in the description), so
a generated client never sends what the server refuses:

- :class:`Instant`: an RFC 3339 date-time with an offset, its year 1970 to 8999, loaded as a
  UTC ``datetime`` (and dumped with its ``+00:00``);
- :class:`Day`: an RFC 3339 full-date, its year 1970 to 8999.

Integers and booleans are held to their JSON types by the parser for every field of every
schema (:mod:`deskpool.api.validation`): a count is a JSON integer (``3``, never ``3.5``,
``"3"`` or ``true``) and a query integer is ASCII digits.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from marshmallow import ValidationError, fields

from deskpool.values import FIRST_YEAR, LAST_YEAR, YEAR_PATTERN, day_problem, instant_problem

__all__ = ["Day", "Instant"]

_RANGE = f"Years {FIRST_YEAR} to {LAST_YEAR}."


def _metadata(metadata: dict[str, Any] | None, what: str) -> dict[str, Any]:
    described = dict(metadata or {})
    description = described.get("description", "")
    described["description"] = f"{description} {what} {_RANGE}".strip()
    described.setdefault("pattern", YEAR_PATTERN)
    return described


class Instant(fields.AwareDateTime):
    """An instant: RFC 3339 with an offset, in the years models compute with, loaded as UTC."""

    def __init__(self, *, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(
            format="iso",
            metadata=_metadata(metadata, "With an offset (Z or ±hh:mm)."),
            **kwargs,
        )

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        loaded = super()._deserialize(value, attr, data, **kwargs)
        problem = instant_problem(loaded)
        if problem is not None:
            raise ValidationError(problem)
        return loaded.astimezone(UTC)


class Day(fields.Date):
    """A calendar date (RFC 3339 full-date) in the years models compute with."""

    def __init__(self, *, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(format="iso", metadata=_metadata(metadata, "A date."), **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> date:
        loaded = super()._deserialize(value, attr, data, **kwargs)
        problem = day_problem(loaded)
        if problem is not None:
            raise ValidationError(problem)
        return loaded
