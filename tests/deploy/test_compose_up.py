"""The composition comes up with podman-compose from deskpool's image and shuts down cleanly.

The bundled PostgreSQL, Redis and guacd images cannot be pulled on this machine: the test
derives a composition from ``deploy/compose/compose.yaml`` in which this machine's PostgreSQL and
Redis stand in for them and the desktop daemon simulator (from deskpool's image) stands in for
guacd. Every service uses the host's network and its listeners bind port 0; each writes the
addresses it bound to ``LISTEN_ADDRESSES_FILE`` in a folder of the test's. The simulator comes up
first, so that the gateway is told where it listens. Everything else (the env file, the
migration step first, commands, stop signals and grace periods) is the shipped composition's.
"""

from __future__ import annotations

import asyncio
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

from deskpool.testing.processes import ANY_PORT
from deskpool.testing.pytest_plugin import fresh_database
from deskpool.testing.services import ServiceAddresses
from tests.deploy.podman import (
    ADDRESSES_MOUNT,
    addresses_folder,
    bound_addresses,
    build_image,
    podman,
    podman_environ,
    printed_address,
    wait_http,
)
from tests.deploy.test_image import IMAGE
from tests.support.deploy import (
    DEPLOY,
)

COMPONENTS = ("api", "worker", "gateway", "web")
BUNDLED = ("postgres", "redis", "desktopd")
SIMULATOR = "desktopd-simulator"
#: Each component's listen address settings besides METRICS_ADDR.
LISTENERS = {"api": "API_ADDR", "gateway": "GATEWAY_ADDR", "web": "WEB_ADDR"}
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def image() -> str:
    build_image(IMAGE)  # layers are cached: cheap after test_image
    return IMAGE


@pytest.fixture
def database_url(test_servers: ServiceAddresses) -> Iterator[str]:
    with fresh_database(test_servers, "deskpool_compose", migrated=False) as url:
        yield url


def derive_composition(shipped: dict[str, Any], addresses: Path) -> dict[str, Any]:
    """The shipped composition on the host's network, with this machine's services.

    :param addresses: the folder where each component writes what it bound (``NAME.json``).
    """
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
        if name in COMPONENTS:
            environment["METRICS_ADDR"] = ANY_PORT
            environment["LISTEN_ADDRESSES_FILE"] = f"{ADDRESSES_MOUNT}/{name}.json"
            if name in LISTENERS:
                environment[LISTENERS[name]] = ANY_PORT
            service["volumes"] = [f"{addresses}:{ADDRESSES_MOUNT}"]
        service["environment"] = environment
    services[SIMULATOR] = {
        "image": "${DESKPOOL_IMAGE}",
        "network_mode": "host",
        "entrypoint": ["python", "-m", "deskpool.desktopd", ANY_PORT],
    }
    composition["services"] = services
    return composition


def compose(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run podman-compose on ``workdir/compose.yaml``; fail with its output unless it succeeds."""
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


async def test_composition_comes_up_migrated_and_stops_within_the_grace_period(
    image: str, database_url: str, test_servers: ServiceAddresses, tmp_path: Path
) -> None:
    shipped = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    folder = addresses_folder(tmp_path)
    composition = derive_composition(shipped, folder)
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
                "",
            ]
        )
    )
    try:
        await asyncio.to_thread(compose, tmp_path, "up", "-d", SIMULATOR)
        daemon = await printed_address(f"{project}_{SIMULATOR}_1")
        composition["services"]["gateway"]["environment"]["DESKTOPD_ADDRESS"] = daemon
        (tmp_path / "compose.yaml").write_text(yaml.safe_dump(composition, sort_keys=False))
        await asyncio.to_thread(compose, tmp_path, "up", "-d", "migrate", *COMPONENTS)
        bound = {
            name: await bound_addresses(folder, name, f"{project}_{name}_1") for name in COMPONENTS
        }
        for name in COMPONENTS:
            await wait_http(f"http://{bound[name]['ops']}/readyz", within=120)
        await wait_http(f"http://{bound['api']['api']}/openapi.yaml")
        await wait_http(f"http://{bound['web']['web']}/config.json")
        migrate = podman("inspect", "-f", "{{.State.ExitCode}}", f"{project}_migrate_1")
        assert migrate.stdout.strip() == "0"

        grace = max(int(shipped["services"][name]["stop_grace_period"][:-1]) for name in COMPONENTS)
        started = time.monotonic()
        await asyncio.to_thread(compose, tmp_path, "stop", timeout=grace + 60)
        took = time.monotonic() - started
        assert took < grace, f"stopping took {took:.1f}s, over the {grace}s grace period"
        for name in COMPONENTS:
            code = podman("inspect", "-f", "{{.State.ExitCode}}", f"{project}_{name}_1")
            assert code.stdout.strip() == "0", f"{name} exited {code.stdout.strip()}"
    finally:
        await asyncio.to_thread(
            subprocess.run,
            [str(Path(sys.executable).parent / "podman-compose"), "-f", "compose.yaml", "down"],
            cwd=tmp_path,
            env=podman_environ() | {"DESKPOOL_IMAGE": IMAGE},
            capture_output=True,
            timeout=300,
            check=False,
        )
