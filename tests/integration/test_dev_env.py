"""``make run`` honours the environment over ``.run/dev.env`` and says so (issue 37).

``DATABASE_URL=... make run HYPERVISOR=libvirt`` was silently overridden by ``.run/dev.env``
(``scripts/dev-env.sh`` and the Makefile sourced it over the caller's environment). Here the
loader both use (``scripts/dev-env-load.sh``) is sourced by bash with a ``dev.env`` of its own:
a variable the caller set wins, and it says which (by name: a value may be a secret); the
others come from the file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.paths import REPO

LOADER = REPO / "scripts" / "dev-env-load.sh"


def _load(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "dev.env"
    env_file.write_text(
        "# written by scripts/dev-env.sh\n"
        "DATABASE_URL=postgresql://postgres@127.0.0.1:5432/deskpool\n"
        "APP_ENV=development\n"
        "API_ADDR='127.0.0.1:8080'\n"
    )
    script = f'. "{LOADER}" "{env_file}" && echo "$DATABASE_URL|$APP_ENV|$API_ADDR"'
    base = {"PATH": os.environ["PATH"], **environ}
    return subprocess.run(
        ["bash", "-c", script], env=base, capture_output=True, text=True, check=True, timeout=30
    )


def test_the_callers_database_url_wins_over_dev_env_and_is_said(tmp_path: Path) -> None:
    mine = "postgresql://postgres@127.0.0.1:5432/deskpool_libvirt"
    loaded = _load(tmp_path, DATABASE_URL=mine)
    assert loaded.stdout.strip() == f"{mine}|development|127.0.0.1:8080"
    assert loaded.stderr.strip() == (
        f"dev-env: DATABASE_URL is taken from the environment, not from {tmp_path}/dev.env"
    )


def test_without_one_dev_env_gives_every_setting(tmp_path: Path) -> None:
    loaded = _load(tmp_path)
    assert loaded.stdout.strip() == (
        "postgresql://postgres@127.0.0.1:5432/deskpool|development|127.0.0.1:8080"
    )
    assert loaded.stderr == ""
