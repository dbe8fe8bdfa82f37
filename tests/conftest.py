"""Shared fixtures of deskpool's own test suite (the public ones are in deskpool.testing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from deskpool.testing.processes import deskpool_command

pytest_plugins = ["tests.secret_leak_guard", "deskpool.testing.libvirt.fixtures"]

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent


def install_fake_distribution(
    target: Path, name: str, modules: list[str], entry_points: Mapping[str, Mapping[str, str]]
) -> Path:
    """Install a distribution into ``target`` the way pip lays one out.

    The modules and a ``.dist-info`` folder with METADATA and entry_points.txt; put ``target``
    on PYTHONPATH to make it installed.
    """
    target.mkdir(parents=True, exist_ok=True)
    for module in modules:
        shutil.copy(FIXTURES / "plugins" / f"{module}.py", target / f"{module}.py")
    info = target / f"{name.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    lines = []
    for group, items in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in items.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return target


@pytest.fixture
def plugin_site(tmp_path: Path) -> Callable[..., Path]:
    """``plugin_site(name, modules, entry_points)``: a folder holding an installed distribution."""

    def make(name: str, modules: list[str], entry_points: Mapping[str, Mapping[str, str]]) -> Path:
        return install_fake_distribution(tmp_path / "site", name, modules, entry_points)

    return make


@pytest.fixture
def run_deskpool() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real ``deskpool`` command with exactly the given environment."""

    def run(
        *args: str, env: Mapping[str, str], timeout: float = 30
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
