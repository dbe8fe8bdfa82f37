"""Servers of a test's own that it can freeze: a Redis and a PostgreSQL, stopped by SIGSTOP.

A frozen server is the worst outage a client meets: its sockets still accept connections (the
kernel does it) and nothing ever answers. A test starts its own server here, never freezing the
shared ones other tests use, and freezes it with :meth:`OwnServer.frozen`: every process of the
server (PostgreSQL's postmaster and each of its backends) is stopped, and continued on the way
out.

PostgreSQL refuses to run as root: when the test runs as root, ``initdb`` and ``pg_ctl`` run
as the ``postgres`` user (``runuser``), in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Where the PostgreSQL programs are looked for when they are not on ``PATH``.
_POSTGRES_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on (at the time of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid``, from ``/proc``."""
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    found.append(int(child))
                    pending.append(int(child))
    return found


@dataclass
class OwnServer:
    """A server this test started: its main process and the address it listens on."""

    pid: int
    host: str
    port: int

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    def processes(self) -> list[int]:
        """The server's main process and every process it started."""
        return [self.pid, *_children(self.pid)]

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Stop every process of the server (SIGSTOP) while the block runs, then continue them."""
        stopped = []
        try:
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            yield
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}) before it listened")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


@contextlib.contextmanager
def own_redis() -> Iterator[OwnServer]:
    """A Redis server of the test's own (no persistence), stopped on the way out."""
    port = free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process, 20)
        yield OwnServer(process.pid, "127.0.0.1", port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _program(name: str) -> str:
    found = shutil.which(name)
    if found is not None:
        return found
    for folder in _POSTGRES_BIN:
        if (folder / name).exists():
            return str(folder / name)
    raise RuntimeError(f"{name} is not installed (PostgreSQL's server programs are needed)")


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` user when this process is root."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextlib.contextmanager
def own_postgres() -> Iterator[OwnServer]:
    """A PostgreSQL server of the test's own (user ``postgres``, trust), stopped on the way out.

    Its admin URL is ``postgresql://postgres@127.0.0.1:<port>/postgres``.
    """
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="deskpool-own-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    subprocess.run(
        _as_postgres(
            [
                _program("initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        _as_postgres(
            [
                _program("pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(folder / "log"),
                "-w",
                "start",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    pid = None
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        _wait_for_port(port, None, 20)
        yield OwnServer(pid, "127.0.0.1", port)
    finally:
        for process in OwnServer(pid, "", 0).processes() if pid is not None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGCONT)
        subprocess.run(
            _as_postgres([_program("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        shutil.rmtree(folder, ignore_errors=True)
