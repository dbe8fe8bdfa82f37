"""Whether a user can open a pool, and why: in the order the opening itself checks."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from deskpool.errors import ValidationFailed
from deskpool.helpdesk.model import EXPLANATIONS, Access, Path, PoolFacts, judge
from deskpool.messages.model import SendMessage, Severity, TargetKind, checked

ENTITLED = PoolFacts(
    user_disabled=False,
    pool_state="enabled",
    paths=(Path("direct"),),
    holds_desktop=False,
    available=2,
    startable=0,
    sessions_at_limit=False,
)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, Access.AVAILABLE),
        ({"available": 0, "startable": 1}, Access.STARTABLE),
        ({"available": 0}, Access.NO_DESKTOP_AVAILABLE),
        ({"paths": ()}, Access.NOT_ENTITLED),
        ({"paths": (), "user_disabled": True}, Access.USER_DISABLED),
        ({"pool_state": "disabled", "holds_desktop": True}, Access.POOL_DISABLED),
        ({"pool_state": "draining"}, Access.POOL_DRAINING),
        # A draining pool still lets a holder back to his desktop; the license never cuts him.
        ({"pool_state": "draining", "holds_desktop": True}, Access.HOLDS_DESKTOP),
        ({"holds_desktop": True, "sessions_at_limit": True}, Access.HOLDS_DESKTOP),
        ({"sessions_at_limit": True}, Access.LICENSE_LIMIT),
    ],
)
def test_judge(changes: dict[str, Any], expected: Access) -> None:
    assert judge(replace(ENTITLED, **changes)) is expected


def test_every_answer_is_explained_and_only_three_can_open() -> None:
    assert set(EXPLANATIONS) == set(Access)
    assert {a for a in Access if a.can_open} == {
        Access.HOLDS_DESKTOP,
        Access.AVAILABLE,
        Access.STARTABLE,
    }


def message(body: str, valid_for: timedelta = timedelta(hours=1)) -> SendMessage:
    return SendMessage(
        target_kind=TargetKind.POOL,
        target_id=uuid4(),
        severity=Severity.INFO,
        body=body,
        valid_for=valid_for,
    )


def test_a_message_is_trimmed_and_bounded() -> None:
    assert checked(message("  hello \n")).body == "hello"
    for bad, pointer in (
        (message(" \t "), "/body"),
        (message("x" * 2001), "/body"),
        (message("hi", timedelta(seconds=5)), "/valid_for_seconds"),
        (message("hi", timedelta(days=8)), "/valid_for_seconds"),
    ):
        with pytest.raises(ValidationFailed) as refused:
            checked(bad)
        assert [error.pointer for error in refused.value.errors] == [pointer]
