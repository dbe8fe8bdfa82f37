"""Plan actions map to desktop events and are distinct; the reconcile policy validates itself."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from tests.unit.pools.planning import POLICY, S

from deskpool.config import Config
from deskpool.desktops.states import Delete, Failed, Refresh, Replace, Retry
from deskpool.reconciliation.plan import (
    CreateDesktop,
    DeleteDesktop,
    DeleteOrphanVm,
    MarkVmMissing,
    PowerOn,
    ReconcilePolicy,
    RefreshDesktop,
    ReplaceDesktop,
    ReportOrphan,
    RetryFailed,
    TimeOutStep,
    desktop_event,
)


def test_actions_map_to_desktop_events() -> None:
    some = UUID(int=1)
    assert desktop_event(DeleteDesktop(some, "r")) == Delete()
    assert desktop_event(ReplaceDesktop(some, "r")) == Replace()
    assert desktop_event(RetryFailed(some, "r")) == Retry()
    assert desktop_event(RefreshDesktop(some, "r")) == Refresh()
    assert desktop_event(MarkVmMissing(some, "1", "gone", "r")) == Failed("gone")
    assert desktop_event(TimeOutStep(some, S.STARTING, "timed out", "r")) == Failed("timed out")
    assert desktop_event(CreateDesktop("x", "r")) is None
    assert desktop_event(PowerOn(some, "1", "r")) is None
    assert desktop_event(ReportOrphan("1", "x", "r")) is None
    assert desktop_event(DeleteOrphanVm("1", "x", "r")) is None


def test_action_kinds_are_distinct() -> None:
    kinds = [
        kind.kind
        for kind in (
            CreateDesktop,
            DeleteDesktop,
            ReplaceDesktop,
            RetryFailed,
            RefreshDesktop,
            MarkVmMissing,
            TimeOutStep,
            PowerOn,
            ReportOrphan,
            DeleteOrphanVm,
        )
    ]
    assert len(set(kinds)) == len(kinds)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failure_backoff_base", timedelta(0)),
        ("failure_backoff_max", timedelta(seconds=1)),
        ("guest_agent_wait_timeout", timedelta(0)),
        ("operation_timeout", timedelta(seconds=-1)),
        ("timeout_grace", timedelta(seconds=-1)),
    ],
)
def test_a_policy_rejects_nonsense(field: str, value: timedelta) -> None:
    changes: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        replace(POLICY, **changes)


def test_a_policy_reads_the_wait_timeouts_from_the_configuration() -> None:
    config = Config(
        {"GUEST_AGENT_WAIT_TIMEOUT": 120.0, "WINDOWS_READY_WAIT_TIMEOUT": 900.0}, {}, {}
    )
    policy = ReconcilePolicy.from_config(config)
    assert policy.step_timeout(S.WAITING_FOR_AGENT) == timedelta(minutes=2)
    assert policy.step_timeout(S.WAITING_FOR_WINDOWS) == timedelta(minutes=15)
    assert policy.step_timeout(S.READY) is None
    assert policy.step_timeout(S.FAILED) is None
