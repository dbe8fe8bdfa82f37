"""The pure parts of the desktop jobs: which job carries a state on, keys, polls, policy."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from deskpool.area_settings import declare_area_settings
from deskpool.config import SettingRegistry, declare_core_settings, load_config
from deskpool.desktops.jobs import (
    DELETE,
    POWER_ON,
    PROVISION,
    REBUILD,
    idempotency_key,
    job_for_state,
)
from deskpool.drivers import PowerState as DriverPowerState
from deskpool.drivers import VirtualMachine, VmNotFound
from deskpool.pools.model import Desktop, DesktopState, PowerState
from deskpool.provisioning.recorder import describe_failure
from deskpool.provisioning.steps import MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, poll_interval
from deskpool.reconciliation.cluster_vms import observed_vm
from deskpool.registry import Registry
from deskpool_worker.pools import declare_settings, reconcile_policy

S = DesktopState
WHEN = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def desktop(state: DesktopState, changed: datetime = WHEN) -> Desktop:
    return Desktop(
        id=uuid.UUID(int=7),
        pool_id=uuid.UUID(int=1),
        name="lab-01",
        state=state,
        created_at=WHEN,
        state_changed_at=changed,
    )


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        (S.PROVISIONING, PROVISION),
        (S.STARTING, PROVISION),
        (S.WAITING_FOR_AGENT, PROVISION),
        (S.WAITING_FOR_WINDOWS, PROVISION),
        (S.REFRESHING, REBUILD),
        (S.DELETING, DELETE),
        (S.READY, None),
        (S.IN_USE, None),
        (S.FAILED, None),
    ],
)
def test_each_in_flight_state_has_the_job_that_carries_it_on(
    state: DesktopState, kind: str | None
) -> None:
    assert job_for_state(desktop(state)) == kind


def test_keys_name_the_desktop_and_its_entry_into_the_state_to_the_microsecond() -> None:
    key = idempotency_key(PROVISION, desktop(S.PROVISIONING))
    assert key == f"desktop.provision:{uuid.UUID(int=7)}:{int(WHEN.timestamp())}123456"
    later = desktop(S.PROVISIONING, WHEN + timedelta(microseconds=1))
    assert idempotency_key(PROVISION, later) != key
    assert idempotency_key(POWER_ON, desktop(S.READY)) is None


def test_polls_are_a_twentieth_of_the_wait_within_bounds() -> None:
    assert poll_interval(timedelta(seconds=10)) == 0.5
    assert poll_interval(timedelta(minutes=30)) == MAX_POLL_INTERVAL
    assert poll_interval(timedelta(milliseconds=100)) == MIN_POLL_INTERVAL


def test_a_failure_reads_as_the_errors_detail_and_never_more() -> None:
    assert describe_failure(VmNotFound("VM 104 does not exist")) == "VM 104 does not exist"
    assert describe_failure(KeyError("token_secret=abc")) == "unexpected error (KeyError)"
    assert len(describe_failure(VmNotFound("x" * 5000))) == 500


def test_a_listed_vm_is_observed_with_its_desktop_tag() -> None:
    tagged = observed_vm(
        VirtualMachine(
            "104", "lab-01", "n1", DriverPowerState.STOPPED, desktop_id=str(uuid.UUID(int=7))
        )
    )
    assert tagged.desktop_id == uuid.UUID(int=7)
    assert tagged.power_state is PowerState.STOPPED
    foreign = observed_vm(
        VirtualMachine("105", "x", "n1", DriverPowerState.RUNNING, desktop_id="not-a-uuid")
    )
    assert foreign.desktop_id is None


def test_job_kind_names_may_be_dotted() -> None:
    registry: Registry[int] = Registry("job kind")
    registry.add("desktop.provision", 1)
    for bad in ("", ".", "desktop.", ".provision", "desktop..provision", "a b"):
        with pytest.raises(ValueError, match="invalid job kind name"):
            registry.add(bad, 1)


def test_the_failure_backoff_comes_from_the_worker_setting() -> None:
    settings = SettingRegistry()
    declare_core_settings(settings)
    declare_area_settings(settings)
    declare_settings(settings)
    environ = {"DATABASE_URL": "postgresql://x/y", "KVSTORE_ADDR": "127.0.0.1:6379"}
    policy = reconcile_policy(load_config(settings, {**environ, "POOL_FAILURE_BACKOFF": "5s"}))
    assert policy.failure_backoff_base == timedelta(seconds=5)
    assert policy.failure_backoff_max == timedelta(hours=1)
    assert reconcile_policy(load_config(settings, environ)).failure_backoff_base == timedelta(
        seconds=30
    )
    slow = reconcile_policy(load_config(settings, {**environ, "POOL_FAILURE_BACKOFF": "2h"}))
    assert slow.failure_backoff_max == timedelta(hours=2)
