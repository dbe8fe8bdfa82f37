"""The driver contract is a leaf, and both drivers pass the kit with only the contract.

Importing the contract loads nothing of the platform; the conformance kit runs against both
drivers in a process where the platform and its dependencies cannot be imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
#: What the contract must never load: the platform's machinery and its dependencies.
FORBIDDEN = ("redis", "stevedore", "voluptuous", "aiohttp", "yaml", "asyncpg", "cryptography")


def imported_by(statement: str) -> list[str]:
    """The modules ``python -X importtime -c statement`` imports, in order."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    return [line.rsplit("|", 1)[1].strip() for line in lines[1:]]


@pytest.mark.parametrize(
    "module", ["deskpool_driver_api", "deskpool_driver_api.conformance", "deskpool_driver_libvirt"]
)
def test_importing_the_contract_loads_nothing_of_the_platform(module: str) -> None:
    modules = imported_by(f"import {module}")
    assert module in modules
    assert [m for m in modules if m.split(".")[0] in (*FORBIDDEN, "deskpool")] == []


def test_the_platforms_re_export_is_as_light() -> None:
    modules = imported_by("import deskpool.drivers")
    assert "deskpool_driver_api" in modules
    platform = [m for m in modules if m.split(".")[0] == "deskpool"]
    assert platform == ["deskpool", "deskpool.drivers"]
    assert [m for m in modules if m.split(".")[0] in FORBIDDEN] == []
    assert "deskpool.config" not in modules
    assert "deskpool.plugins" not in modules


def test_both_drivers_pass_the_kit_with_only_the_contract(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    env = {
        **os.environ,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": str(HERE / "standalone"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no_platform",
            "-p",
            "pytest_asyncio.plugin",
            "-p",
            "no:cacheprovider",
            "--noconftest",
            "-c",
            str(tmp_path / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-q",
            str(HERE / "test_proxmox_conformance.py"),
            str(HERE / "standalone" / "simulator_kit.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in summary
    assert "failed" not in summary
    assert "error" not in summary
