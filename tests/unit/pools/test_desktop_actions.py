"""Which administrator actions a desktop can take in each state, and naming-pattern widths."""

from __future__ import annotations

import pytest
from marshmallow import ValidationError
from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
)

from deskpool.api.resources.pool_schemas import bounded_name_width
from deskpool.desktops.service import (
    ACTIONS,
    DesktopActionNotAllowed,
    allowed_actions,
    refuse_action,
)
from deskpool.desktops.states import IllegalTransition
from deskpool.pools.model import DesktopState

S = DesktopState

POWER = ["power_on", "power_off", "restart"]
#: A running desktop (ready, in use) is not offered a power-on (issue 37: "state is true").
RUNNING = ["power_off", "restart"]

EXPECTED = {
    S.PROVISIONING: ["delete"],
    S.STARTING: ["delete"],
    S.WAITING_FOR_AGENT: ["delete"],
    S.WAITING_FOR_WINDOWS: ["delete"],
    S.READY: [*RUNNING, "rebuild", "delete"],
    S.IN_USE: [*RUNNING, "delete"],
    S.POWERED_OFF: ["power_on", "rebuild", "delete"],
    S.REFRESHING: ["delete"],
    S.DELETING: [],
    S.FAILED: [*POWER, "rebuild", "delete"],
}


@pytest.mark.parametrize("state", list(DesktopState))
def test_allowed_actions_by_state(
    state: DesktopState, make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    desktop = make_desktop(make_pool(), state=state, vm_id="vm-1")
    assert allowed_actions(desktop) == EXPECTED[state]
    for action in set(ACTIONS) - set(EXPECTED[state]):
        expected = DesktopActionNotAllowed if action in POWER else IllegalTransition
        with pytest.raises(expected):
            refuse_action(desktop, action)


def test_power_actions_need_a_vm(make_pool: PoolBuilder, make_desktop: DesktopBuilder) -> None:
    desktop = make_desktop(make_pool(), state=S.FAILED, vm_id=None)
    assert allowed_actions(desktop) == ["rebuild", "delete"]


@pytest.mark.parametrize("pattern", ["lab-{n:03}", "{n:063}", "lab", "{n", "lab-{n:>10}"])
def test_reasonable_widths_pass(pattern: str) -> None:
    bounded_name_width(pattern)


@pytest.mark.parametrize("pattern", ["lab-{n:0999999999}", "{n:64}", "{n:>100}"])
def test_widths_beyond_a_host_name_are_refused_before_rendering(pattern: str) -> None:
    with pytest.raises(ValidationError):
        bounded_name_width(pattern)
