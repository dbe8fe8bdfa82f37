"""The job model without a database: retry backoff, failure decisions, job kinds, tasks."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from deskpool.area_settings import declare_area_settings
from deskpool.config import SettingRegistry, declare_core_settings, load_config
from deskpool.jobs import JobContext, JobKind, PeriodicTask, RetryPolicy
from deskpool.jobs.model import DEFAULT_JOB_TIMEOUT, decide_failure


async def handler(context: JobContext) -> None:
    return None


def test_backoff_doubles_per_attempt_up_to_the_cap() -> None:
    policy = RetryPolicy(base=timedelta(seconds=10), cap=timedelta(minutes=5), jitter=0.0)
    delays = [policy.delay(attempt).total_seconds() for attempt in range(1, 8)]
    assert delays == [10, 20, 40, 80, 160, 300, 300]


def test_jitter_spreads_the_delay_within_its_fraction() -> None:
    policy = RetryPolicy(base=timedelta(seconds=8), cap=timedelta(minutes=5), jitter=0.5)
    rng = random.Random(7)
    delays = {policy.delay(2, rng).total_seconds() for _ in range(200)}
    assert min(delays) >= 8.0
    assert max(delays) <= 16.0
    assert len(delays) > 100


def test_a_huge_attempt_number_does_not_overflow() -> None:
    policy = RetryPolicy(base=timedelta(seconds=1), cap=timedelta(hours=1), jitter=0.0)
    assert policy.delay(10_000) == timedelta(hours=1)


@pytest.mark.parametrize(
    ("base", "cap", "jitter"),
    [(0, 10, 0.5), (10, 5, 0.5), (1, 10, 1.5)],
)
def test_invalid_retry_policies_are_refused(base: int, cap: int, jitter: float) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(base=timedelta(seconds=base), cap=timedelta(seconds=cap), jitter=jitter)


def test_failures_retry_until_the_last_attempt_then_the_job_is_dead() -> None:
    policy = RetryPolicy(jitter=0.0)
    assert decide_failure(1, 3, policy).dead is False
    assert decide_failure(1, 3, policy).delay == timedelta(seconds=10)
    assert decide_failure(2, 3, policy).delay == timedelta(seconds=20)
    assert decide_failure(3, 3, policy).dead is True
    assert decide_failure(1, 3, policy, permanent=True).dead is True


def test_a_job_kind_is_a_handler_or_a_declaration() -> None:
    plain = JobKind.of(handler)
    assert plain.handler is handler
    assert plain.timeout == DEFAULT_JOB_TIMEOUT
    declared = JobKind(handler, timeout=timedelta(minutes=2))
    assert JobKind.of(declared) is declared
    with pytest.raises(TypeError):
        JobKind.of("not a handler")


def test_a_periodic_tasks_interval_is_a_setting_or_seconds() -> None:
    registry = SettingRegistry()
    declare_core_settings(registry)
    declare_area_settings(registry)
    config = load_config(
        registry,
        {
            "DATABASE_URL": "postgresql://db/x",
            "KVSTORE_ADDR": "127.0.0.1:6379",
            "POOL_RECONCILE_INTERVAL": "45s",
        },
    )

    async def run(context: object) -> None:
        return None

    assert PeriodicTask(run, every="POOL_RECONCILE_INTERVAL").interval(config) == timedelta(
        seconds=45
    )
    assert PeriodicTask(run, every=2.5).interval(config) == timedelta(seconds=2.5)
    with pytest.raises(ValueError):
        PeriodicTask(run, every=0).interval(config)
