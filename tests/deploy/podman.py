"""The image under test: built once per run with podman, and containers started from it.

podman runs with ``deploy/podman/containers.conf`` (runc, lowered ulimits). The base image is
``DESKPOOL_BASE_IMAGE`` when set, else a local Debian made by ``local-base-image.sh``; the
machine's CA bundle is passed as the build's ``ca`` secret, as a build behind a TLS proxy does.

Containers run on the host's network and their listeners bind port 0: a deskpool process writes
what it bound to ``LISTEN_ADDRESSES_FILE`` in a folder of the test's mounted at
:data:`ADDRESSES_MOUNT` (:func:`bound_addresses`), the desktop daemon simulator prints it
(:func:`printed_address`).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from deskpool.testing.processes import read_addresses, until
from tests.support.deploy import (
    DEPLOY,
    REPO,
)

CONTAINERS_CONF = DEPLOY / "podman" / "containers.conf"
#: Where a container's ``LISTEN_ADDRESSES_FILE`` folder is mounted.
ADDRESSES_MOUNT = "/run/deskpool-addresses"
#: What the desktop daemon simulator prints once it listens.
SIMULATOR_LISTENING = re.compile(r"desktop daemon simulator listening on (\S+)")
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"


def podman_environ() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``podman args...``; a failure shows podman's output."""
    result = subprocess.run(
        ["podman", *args],
        env=podman_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args[:3])} failed:\n{result.stdout}\n{result.stderr}"
        )
    return result


def base_image() -> str:
    """The base image to build from, made locally with debootstrap unless one is named."""
    named = os.environ.get("DESKPOOL_BASE_IMAGE")
    if named:
        return named
    local = "localhost/deskpool-base:bookworm"
    subprocess.run(
        ["bash", str(DEPLOY / "scripts" / "local-base-image.sh"), local],
        env=podman_environ(),
        check=True,
        timeout=600,
    )
    return local


def build_image(tag: str) -> None:
    """Build deploy/image/Containerfile from the repository as ``tag``."""
    args = [
        "build",
        "--network=host",
        "--layers",
        "--build-arg",
        f"BASE_IMAGE={base_image()}",
        "-f",
        str(DEPLOY / "image" / "Containerfile"),
        "-t",
        tag,
    ]
    if os.path.exists(SYSTEM_CA):
        args += ["--secret", f"id=ca,src={SYSTEM_CA}"]
    podman(*args, str(REPO), timeout=1500)


@dataclass
class Containers:
    """Containers started by a test, removed at the end whatever happened."""

    image: str
    names: list[str] = field(default_factory=list)

    def run(
        self,
        name: str,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        entrypoint: str | None = None,
        addresses: Path | None = None,
    ) -> str:
        """Start a detached container on the host's network.

        :param addresses: a folder (:func:`addresses_folder`) where the process writes the
            addresses its listeners bound, as ``NAME.json``.
        """
        args = ["run", "-d", "--network=host", "--name", name, "--stop-timeout", "45"]
        if addresses is not None:
            args += ["-v", f"{addresses}:{ADDRESSES_MOUNT}"]
            env = {**env, "LISTEN_ADDRESSES_FILE": f"{ADDRESSES_MOUNT}/{name}.json"}
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        if entrypoint:
            args += ["--entrypoint", entrypoint]
        podman(*args, self.image, *command)
        self.names.append(name)
        return name

    def logs(self, name: str) -> str:
        result = podman("logs", name, check=False)
        return result.stdout + result.stderr

    def stop(self, name: str, timeout: int = 45) -> tuple[int, float]:
        """SIGTERM, wait; the exit code and how long the stop took."""
        started = time.monotonic()
        podman("stop", "-t", str(timeout), name, timeout=timeout + 30)
        took = time.monotonic() - started
        code = podman("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        return int(code), took

    def remove_all(self) -> None:
        for name in reversed(self.names):
            podman("rm", "-f", "-t", "2", name, check=False)
        self.names.clear()


async def wait_http(url: str, *, status: int = 200, within: float = 90) -> bytes:
    """GET ``url`` until it answers ``status``; its body."""
    last: list[object] = [None]

    async def answered() -> list[bytes] | None:
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session,
                session.get(url) as response,
            ):
                body = await response.read()
                if response.status == status:
                    return [body]
                last[0] = f"{response.status} {body[:200]!r}"
        except (aiohttp.ClientError, TimeoutError) as error:
            last[0] = error
        return None

    try:
        (body,) = await until(answered, f"{url} answers {status}", within, every=0.5)
    except AssertionError as late:
        raise AssertionError(f"{late} (last: {last[0]})") from None
    return bytes(body)


def addresses_folder(parent: Path) -> Path:
    """A folder the image's user (not this one) may write its addresses files in."""
    folder = parent / "addresses"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


async def bound_addresses(
    folder: Path, name: str, container: str | None = None, within: float = 120
) -> dict[str, str]:
    """The addresses a container's listeners bound, from ``folder/NAME.json`` once written.

    :param container: the container writing it (``name`` when ``None``), for its log.
    :raises AssertionError: with the container's log, when ``within`` seconds pass first.
    """
    path = folder / f"{name}.json"
    container = container or name

    async def written() -> dict[str, str] | None:
        return read_addresses(path)

    try:
        found: dict[str, str] = await until(written, f"{container} wrote {path.name}", within)
    except AssertionError as late:
        logs = await asyncio.to_thread(podman, "logs", container, check=False)
        raise AssertionError(f"{late}:\n{logs.stdout}{logs.stderr}") from None
    return found


async def printed_address(container: str, within: float = 120) -> str:
    """The address the desktop daemon simulator in ``container`` says it listens on."""

    async def printed() -> str | None:
        logs = await asyncio.to_thread(podman, "logs", container, check=False)
        found = SIMULATOR_LISTENING.search(logs.stdout + logs.stderr)
        return found.group(1) if found else None

    address: str = await until(printed, f"{container} listens", within, every=0.5)
    return address
