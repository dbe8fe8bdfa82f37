"""The composition validates against the compose specification and keeps SPEC's rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.deploy import (
    DEPLOY,
)

COMPOSE = DEPLOY / "compose" / "compose.yaml"


def test_compose_file_validates_against_the_compose_specification() -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            str(COMPOSE),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def seconds(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(text[:-1]) * units[text[-1]]


def test_services_stop_later_than_the_drain_deadlines_and_migrate_first() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    for name in ("api", "worker", "gateway", "web"):
        service = services[name]
        assert service["command"] == ["run", name]
        assert seconds(service["stop_grace_period"]) > 30  # WORKER_SHUTDOWN_TIMEOUT
        condition = service["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"
    assert services["migrate"]["command"] == ["migrate"]
    assert "postgres-data" in compose["volumes"]


def test_desktopd_log_level_is_an_interpolation_variable() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    level = compose["services"]["desktopd"]["environment"]["GUACD_LOG_LEVEL"]
    assert level == "${DESKTOPD_LOG_LEVEL:-info}"
    env_file = (DEPLOY / "compose" / "deskpool.env.example").read_text()
    assert "\nDESKTOPD_LOG_LEVEL=" not in env_file


def test_bundled_database_reads_the_dbserver_settings() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    entrypoint = " ".join(compose["services"]["postgres"]["entrypoint"])
    for name in ("DBSERVER_DB", "DBSERVER_USER", "DBSERVER_PASSWORD"):
        assert f"$${{{name}" in entrypoint
    env_file = (DEPLOY / "compose" / "deskpool.env.example").read_text()
    assert "DATABASE_URL=postgresql://deskpool:change-me@postgres:5432/deskpool" in env_file
