"""Shared fixtures of deskpool's own test suite (the public ones are in deskpool.testing)."""

from __future__ import annotations

import os
import subprocess
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from deskpool.testing.processes import deskpool_command
from tests.support import lanes
from tests.support.paths import REPO
from tests.support.plugins import install_fake_distribution

pytest_plugins = [
    "tests.secret_leak_guard",
    "deskpool.testing.libvirt.fixtures",
    "tests.support.pool_api",
    "tests.support.statement_log",
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit, then integration, then end-to-end; the slow lane and xdist groups by folder.

    On an xdist worker, the parallel run's order (the longest first, see ``lanes``). First of
    the hooks, so that ``-m "not slow"`` and xdist's groups see the marks.
    """
    lanes.arrange(items, parallel=hasattr(config, "workerinput"))


def pytest_configure(config: pytest.Config) -> None:
    """In a parallel run by groups, xdist hands the groups out in the workers' order.

    By default ``--dist loadgroup`` sends the groups with the most tests first, and a group of
    one test (an end-to-end module of one long test, a libvirt module) only after every other
    group, hundreds of short tests: it became the run's tail.
    """
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m "not slow"`` (``make test-fast``), the slow lane's files are not even collected.

    Collecting the API contract alone builds a test per operation (seconds of CPU per worker).
    """
    if config.getoption("markexpr", "") != "not slow":
        return None
    try:
        relative = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    return True if lanes.only_slow(relative, collection_path.is_dir()) else None


@pytest.fixture
def plugin_site(tmp_path: Path) -> Callable[..., Path]:
    """``plugin_site(name, modules, entry_points)``: a folder holding an installed distribution."""

    def make(name: str, modules: list[str], entry_points: Mapping[str, Mapping[str, str]]) -> Path:
        return install_fake_distribution(tmp_path / "site", name, modules, entry_points)

    return make


@pytest.fixture
def run_deskpool() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real ``deskpool`` command with exactly the given environment.

    Its ``timeout`` is generous: a fresh interpreter shares the CPU with the run's other workers.
    """

    def run(
        *args: str, env: Mapping[str, str], timeout: float = 90
    ) -> subprocess.CompletedProcess[str]:
        full_env = {"PATH": os.environ.get("PATH", ""), **env}
        return subprocess.run(
            [*deskpool_command(), *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )

    return run


@pytest.fixture
def frozen_rate_limit_clock(monkeypatch: pytest.MonkeyPatch) -> float:
    """Stop the API rate limiter's clock for the test; returns the instant it stands at.

    A window the test opens then never rolls over locally, however slow the machine, so the
    budget a test counts down is the one it asserts on (Redis still expires the shared counter
    after the real minute, far beyond any test's duration).
    """
    from deskpool.api import ratelimit

    now = time.monotonic()
    monkeypatch.setattr(ratelimit, "time", types.SimpleNamespace(monotonic=lambda: now))
    return now
