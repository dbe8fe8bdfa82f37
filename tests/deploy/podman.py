"""The image under test: built once per run with podman, and containers started from it.

podman runs with ``deploy/podman/containers.conf`` (runc, lowered ulimits). The base image is
``DESKPOOL_BASE_IMAGE`` when set, else a local Debian made by ``local-base-image.sh``; the
machine's CA bundle is passed as the build's ``ca`` secret, as a build behind a TLS proxy does.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.deploy.conftest import DEPLOY, REPO

CONTAINERS_CONF = DEPLOY / "podman" / "containers.conf"
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
    ) -> str:
        """Start a detached container on the host's network (a test's own ports)."""
        args = ["run", "-d", "--network=host", "--name", name, "--stop-timeout", "45"]
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


def wait_http(url: str, *, status: int = 200, within: float = 90) -> bytes:
    """GET ``url`` until it answers ``status``; its body."""
    deadline = time.monotonic() + within
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=3) as response:
                if response.status == status:
                    return bytes(response.read())
                last = response.status
        except urllib.error.HTTPError as error:
            last = f"{error.code} {error.read()[:200]!r}"
        except OSError as error:
            last = error
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer {status} within {within}s (last: {last})")
