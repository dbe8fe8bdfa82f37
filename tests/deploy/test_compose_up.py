"""The composition comes up with podman-compose from deskpool's image and shuts down cleanly.

The bundled PostgreSQL, Redis and guacd images cannot be pulled on this machine: the test
derives a composition from ``deploy/compose/compose.yaml`` in which this machine's PostgreSQL and
Redis stand in for them and the desktop daemon simulator (from deskpool's image) stands in for
guacd. Every service uses the host's network on ports of the test's own. Everything else (the
env file, the migration step first, commands, stop signals and grace periods) is the shipped
composition's.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deskpool.testing.processes import free_port
from deskpool.testing.pytest_plugin import fresh_database
from deskpool.testing.services import ServiceAddresses
from tests.deploy.conftest import DEPLOY
from tests.deploy.podman import build_image, podman, podman_environ, wait_http
from tests.deploy.test_image import IMAGE

COMPONENTS = ("api", "worker", "gateway", "web")
BUNDLED = ("postgres", "redis", "desktopd")
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def image() -> str:
    build_image(IMAGE)  # layers are cached: cheap after test_image
    return IMAGE


@pytest.fixture
def database_url(test_servers: ServiceAddresses) -> Iterator[str]:
    with fresh_database(test_servers, "deskpool_compose", migrated=False) as url:
        yield url


def derive_composition(
    shipped: dict[str, Any], ports: dict[str, int], ops: dict[str, int], desktopd_port: int
) -> dict[str, Any]:
    """The shipped composition on the host's network, with this machine's services."""
    composition = {key: value for key, value in shipped.items() if key != "volumes"}
    services = {k: dict(v) for k, v in shipped["services"].items() if k not in BUNDLED}
    for name, service in services.items():
        service["network_mode"] = "host"
        service.pop("ports", None)
        # The stand-ins are not services of this composition; health checks do not run here.
        depends = {k: v for k, v in service.get("depends_on", {}).items() if k not in BUNDLED}
        if depends:
            service["depends_on"] = depends
        else:
            service.pop("depends_on", None)
        environment = dict(service.get("environment", {}))
        if name in ops:
            environment["METRICS_ADDR"] = f"127.0.0.1:{ops[name]}"
        service["environment"] = environment
    services["api"]["environment"]["API_ADDR"] = f"127.0.0.1:{ports['api']}"
    services["gateway"]["environment"]["GATEWAY_ADDR"] = f"127.0.0.1:{ports['gateway']}"
    services["gateway"]["environment"]["DESKTOPD_ADDRESS"] = f"127.0.0.1:{desktopd_port}"
    services["web"]["environment"]["WEB_ADDR"] = f"127.0.0.1:{ports['web']}"
    services["desktopd-simulator"] = {
        "image": "${DESKPOOL_IMAGE}",
        "network_mode": "host",
        "entrypoint": ["python", "-m", "deskpool.desktopd", f"127.0.0.1:{desktopd_port}"],
    }
    composition["services"] = services
    return composition


def compose(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "podman-compose"), "-f", "compose.yaml", *args],
        cwd=workdir,
        env=podman_environ() | {"DESKPOOL_IMAGE": IMAGE},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"podman-compose {args}:\n{result.stdout}\n{result.stderr}"
    return result


def test_composition_comes_up_migrated_and_stops_within_the_grace_period(
    image: str, database_url: str, test_servers: ServiceAddresses, tmp_path: Path
) -> None:
    shipped = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    ports = {name: free_port() for name in ("api", "gateway", "web")}
    ops = {name: free_port() for name in COMPONENTS}
    composition = derive_composition(shipped, ports, ops, free_port())
    project = f"deskpool-compose-{secrets.token_hex(3)}"
    composition["name"] = project
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(composition, sort_keys=False))
    (tmp_path / "deskpool.env").write_text(
        "\n".join(
            [
                "APP_ENV=development",
                f"DATABASE_URL={database_url}",
                f"KVSTORE_ADDR={test_servers.kv_addr}",
                f"KVSTORE_KEY_PREFIX=deskpool-compose-{secrets.token_hex(4)}:",
                f"SECRETS_MASTER_KEY={base64.b64encode(os.urandom(32)).decode()}",
                f"GATEWAY_PUBLIC_WS_URL=ws://127.0.0.1:{ports['gateway']}/websocket-tunnel",
                "",
            ]
        )
    )
    try:
        compose(tmp_path, "up", "-d")
        for name in COMPONENTS:
            wait_http(f"http://127.0.0.1:{ops[name]}/readyz", within=120)
        wait_http(f"http://127.0.0.1:{ports['api']}/openapi.yaml")
        wait_http(f"http://127.0.0.1:{ports['web']}/config.json")
        migrate = podman("inspect", "-f", "{{.State.ExitCode}}", f"{project}_migrate_1")
        assert migrate.stdout.strip() == "0"

        grace = max(int(shipped["services"][name]["stop_grace_period"][:-1]) for name in COMPONENTS)
        started = time.monotonic()
        compose(tmp_path, "stop", timeout=grace + 60)
        took = time.monotonic() - started
        assert took < grace, f"stopping took {took:.1f}s, over the {grace}s grace period"
        for name in COMPONENTS:
            code = podman("inspect", "-f", "{{.State.ExitCode}}", f"{project}_{name}_1")
            assert code.stdout.strip() == "0", f"{name} exited {code.stdout.strip()}"
    finally:
        subprocess.run(
            [str(Path(sys.executable).parent / "podman-compose"), "-f", "compose.yaml", "down"],
            cwd=tmp_path,
            env=podman_environ() | {"DESKPOOL_IMAGE": IMAGE},
            capture_output=True,
            timeout=300,
            check=False,
        )
