"""The pool model: validation of a pool and of a change, and desktop and VM predicates."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest
from tests.support.pool_builders import (
    DesktopBuilder,
    PoolBuilder,
)

from deskpool.errors import FieldError
from deskpool.pools.model import (
    MAX_POOL_SIZE,
    DesktopState,
    ObservedVm,
    OsType,
    PoolKind,
    PowerState,
    validate_pool,
    validate_pool_change,
)


def pointers(errors: list[FieldError]) -> list[str]:
    return [error.pointer for error in errors]


def test_a_valid_pool_has_no_errors(make_pool: PoolBuilder) -> None:
    assert validate_pool(make_pool()) == []
    assert validate_pool(make_pool(min_size=10, max_size=10, spare=10)) == []
    assert validate_pool(make_pool(min_size=0, max_size=1, spare=0)) == []
    windows = make_pool(os_type=OsType.WINDOWS, naming_pattern="win-{n:03}", max_size=999)
    assert validate_pool(windows) == []
    placed = make_pool(target_nodes=("pve1", "pve2"), storage="local-lvm")
    assert validate_pool(placed) == []


@pytest.mark.parametrize(
    ("overrides", "pointer", "fragment"),
    [
        ({"min_size": 11}, "/min_size", "must not exceed max_size (10)"),
        ({"spare": 11}, "/spare", "must not exceed max_size (10)"),
        ({"min_size": -1}, "/min_size", "0 or more"),
        ({"spare": -1}, "/spare", "0 or more"),
        ({"max_size": 0}, "/max_size", "at least 1"),
        ({"max_size": MAX_POOL_SIZE + 1}, "/max_size", f"at most {MAX_POOL_SIZE}"),
        ({"name": ""}, "/name", "must not be empty"),
        ({"name": "   "}, "/name", "must not be empty"),
        ({"name": " lab"}, "/name", "spaces"),
        ({"name": "lab\n2"}, "/name", "control characters"),
        ({"name": "x" * 65}, "/name", "at most 64"),
        ({"template": " "}, "/template", "must name a template"),
        ({"naming_pattern": "lab"}, "/naming_pattern", "{n}"),
        ({"naming_pattern": "lab_{n}"}, "/naming_pattern", "not a host name"),
        ({"target_nodes": ("pve1", "pve1")}, "/target_nodes/1", "listed twice"),
        ({"target_nodes": ("",)}, "/target_nodes/0", "must name a node"),
        ({"storage": ""}, "/storage", "must name a storage"),
        ({"generation": 0, "reconciled_generation": 0}, "/generation", "at least 1"),
        ({"generation": 2, "reconciled_generation": 3}, "/reconciled_generation", "between"),
    ],
)
def test_each_invalid_field_is_reported(
    make_pool: PoolBuilder, overrides: dict[str, Any], pointer: str, fragment: str
) -> None:
    errors = validate_pool(make_pool(**overrides))
    assert pointer in pointers(errors)
    messages = [error.message for error in errors if error.pointer == pointer]
    assert any(fragment in message for message in messages), messages


def test_windows_pools_check_the_name_of_their_largest_desktop(make_pool: PoolBuilder) -> None:
    pool = make_pool(os_type=OsType.WINDOWS, naming_pattern="windesktops-{n:03}", max_size=999)
    assert validate_pool(pool) == []
    errors = validate_pool(replace(pool, max_size=1000))
    assert pointers(errors) == ["/naming_pattern"]
    assert "Windows computer name" in errors[0].message


def test_all_errors_are_reported_together(make_pool: PoolBuilder) -> None:
    pool = make_pool(name="", min_size=-1, spare=20, naming_pattern="x", template="")
    assert set(pointers(validate_pool(pool))) == {
        "/name",
        "/min_size",
        "/spare",
        "/naming_pattern",
        "/template",
    }


def test_errors_render_as_problem_field_errors(make_pool: PoolBuilder) -> None:
    (error,) = validate_pool(make_pool(min_size=11))
    assert error.as_dict() == {"pointer": "/min_size", "detail": "must not exceed max_size (10)"}


def test_settings_can_change_while_the_pool_has_desktops(make_pool: PoolBuilder) -> None:
    current = make_pool()
    proposed = replace(
        current, min_size=2, spare=1, template="tpl-new", naming_pattern="pc-{n:02}", generation=2
    )
    assert validate_pool_change(current, proposed, has_desktops=True) == []


@pytest.mark.parametrize(
    "change",
    [
        {"cluster_id": UUID(int=2)},
        {"kind": PoolKind.PERSISTENT},
        {"os_type": OsType.WINDOWS},
    ],
)
def test_identity_settings_are_fixed_while_the_pool_has_desktops(
    make_pool: PoolBuilder, change: dict[str, Any]
) -> None:
    current = make_pool()
    proposed = replace(current, **change)
    (field,) = change
    errors = validate_pool_change(current, proposed, has_desktops=True)
    assert pointers(errors) == [f"/{field}"]
    assert errors[0].message == "cannot change while the pool has desktops"
    assert validate_pool_change(current, proposed, has_desktops=False) == []


def test_a_change_is_validated_as_a_pool_and_keeps_its_id(make_pool: PoolBuilder) -> None:
    current = make_pool()
    errors = validate_pool_change(
        current, replace(current, id=UUID(int=5), spare=99), has_desktops=False
    )
    assert pointers(errors) == ["/spare", "/id"]


def test_pool_predicates(make_pool: PoolBuilder) -> None:
    assert not make_pool().is_persistent
    assert make_pool(kind=PoolKind.PERSISTENT).is_persistent
    assert not make_pool().is_windows
    assert make_pool(os_type=OsType.WINDOWS).is_windows


def test_a_desktop_is_busy_while_a_user_holds_it(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool()
    ready = make_desktop(pool)
    assert not ready.is_busy
    assert ready.is_available
    assert make_desktop(pool, assigned_user="ada").is_busy
    assert make_desktop(pool, in_session=True).is_busy
    assert make_desktop(pool, state=DesktopState.IN_USE).is_busy


def test_only_free_clean_ready_desktops_are_available(
    make_pool: PoolBuilder, make_desktop: DesktopBuilder
) -> None:
    pool = make_pool()
    assert not make_desktop(pool, used_since_refresh=True).is_available
    assert not make_desktop(pool, assigned_user="ada").is_available
    for state in DesktopState:
        assert make_desktop(pool, state=state).is_available == (state is DesktopState.READY)


def test_a_vm_is_deskpools_when_it_carries_a_tag() -> None:
    untagged = ObservedVm(vm_id="101", name="db", power_state=PowerState.RUNNING)
    assert not untagged.is_tagged
    assert replace(untagged, pool_id=UUID(int=1)).is_tagged
    assert replace(untagged, desktop_id=UUID(int=1)).is_tagged
