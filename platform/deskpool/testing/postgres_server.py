"""A PostgreSQL server of a test's own, to stop and start again (never the shared one).

Tests of what deskpool does while its database is away run their processes against a
:class:`PrivatePostgres`: a cluster made by ``initdb`` in a temporary directory, listening on a
free port of the loopback, trusting local connections. :meth:`PrivatePostgres.stop` stops it
(``pg_ctl stop -m fast``: connections are refused), :meth:`PrivatePostgres.start` starts it
again on the same port with the same data.

``pg_ctl`` refuses to run as root: when the tests run as root, the server's programs run as
the ``postgres`` user (``runuser``), which owns the data directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from deskpool.testing.redis_server import free_port

#: The account the server runs as when the tests run as root.
SERVER_USER = "postgres"
#: The database :func:`private_postgres` creates for the processes of a test.
DATABASE = "deskpool"


def _bindir() -> Path:
    """Where ``initdb`` and ``pg_ctl`` are (on PATH, or the newest Debian install)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError("PostgreSQL's pg_ctl is not installed (the tests' database needs it)")
    return Path(candidates[-1]).parent


class PrivatePostgres:
    """A PostgreSQL cluster in ``directory`` on a port of its own; :attr:`url` reaches it."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = port or free_port()
        self.bindir = _bindir()
        self.as_root = os.geteuid() == 0

    def url(self, database: str = DATABASE) -> str:
        """The URL of ``database`` on this server (user ``postgres``, trusted)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def _run(self, *argv: str) -> None:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self.as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        process = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.directory,
        )
        output, _ = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {output.decode(errors='replace')[-2000:]}")

    async def create(self) -> None:
        """``initdb`` the cluster (trust authentication, user ``postgres``)."""
        if self.as_root:
            account = pwd.getpwnam(SERVER_USER)
            os.chown(self.directory, account.pw_uid, account.pw_gid)
        await self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )

    async def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} "
            "-c fsync=off -c max_connections=60 -c shared_buffers=16MB"
        )
        log = str(self.directory / "server.log")
        await self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    async def stop(self) -> None:
        """Stop the server (fast: open connections are cut) and wait for it to be gone."""
        await self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@contextlib.asynccontextmanager
async def private_postgres() -> AsyncIterator[PrivatePostgres]:
    """A started :class:`PrivatePostgres` holding an empty :data:`DATABASE`, removed after."""
    import asyncpg

    with tempfile.TemporaryDirectory(prefix="deskpool-pg-") as directory:
        server = PrivatePostgres(Path(directory))
        await server.create()
        await server.start()
        try:
            connection = await asyncpg.connect(server.url("postgres"))
            try:
                await connection.execute(f"CREATE DATABASE {DATABASE}")
            finally:
                await connection.close()
            yield server
        finally:
            with contextlib.suppress(RuntimeError):
                await server.stop()
