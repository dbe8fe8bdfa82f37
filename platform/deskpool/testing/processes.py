"""Real ``deskpool run`` processes for end-to-end tests, for deskpool and for plugin authors.

:class:`DeskpoolProcess` starts ``deskpool run COMPONENT...`` with a given environment, collects
its output line by line, and waits until every component logged that it started (or fails with
the output when the process exits first); then :attr:`DeskpoolProcess.addresses` holds what its
listeners bound, read from the ``LISTEN_ADDRESSES_FILE`` it wrote, so a listener given port 0
(``API_ADDR=127.0.0.1:0``) is found without a port picked in advance (which another process
could take first). :meth:`DeskpoolProcess.watch` waits for a line, so a test awaits what the
process says instead of sleeping. :func:`until` waits for a condition a test reads (from the
database, a cluster...); :func:`until_ready` polls a process's readiness endpoint (``/readyz``)
until it answers 200.

A deployment of several processes: :func:`deployment_environ` is the environment they share
(this interpreter's ``PATH``, one database, an OIDC issuer and a bootstrap administrator),
:func:`listening` a process on a port of its own, :func:`running` starts them all and stops
them all at the end.

Example::

    env = deployment_environ(deskpool_environ, database_url, identity_provider, admin="root")
    async with running({"api": listening(["api"], env, "API_ADDR"),
                        "worker": DeskpoolProcess(["worker"], env)}) as processes:
        api = processes["api"].url("api")  # http://127.0.0.1:<the port it bound>
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

#: A listen address on loopback whose port the system picks when the listener binds.
ANY_PORT = "127.0.0.1:0"

#: How long a process may take to start (and to say it is ready), in seconds: generous, since a
#: fresh interpreter importing deskpool shares the CPU with a parallel run's other workers (a
#: test starting five processes at once on a loaded two-core machine saw 30 s pass). It bounds
#: a hang; it proves nothing about how fast a process starts.
START_WITHIN = 120.0


def read_addresses(path: Path) -> dict[str, str] | None:
    """The addresses in the ``LISTEN_ADDRESSES_FILE`` at ``path``; ``None`` until written whole."""
    return dict(json.loads(path.read_text())) if path.exists() else None


def deskpool_command() -> list[str]:
    """The ``deskpool`` command of the running interpreter."""
    return [sys.executable, "-m", "deskpool.cli"]


#: The first pause of :func:`until` between two checks, and the longest it grows to.
FIRST_PAUSE, LONGEST_PAUSE = 0.02, 0.1


async def until(
    check: Callable[[], Awaitable[Any]],
    what: str,
    seconds: float = 30,
    every: float | None = None,
) -> Any:
    """Await ``check()`` until it returns something truthy, and return that.

    :param every: the pause between two checks; by default :data:`FIRST_PAUSE`, growing by half
        each time up to :data:`LONGEST_PAUSE`: what comes at once is seen at once, and a wait
        of a minute does not ask the database 3,000 times (the suite is bound by its two cores,
        and each check costs the test, and often PostgreSQL, some of them).
    :raises AssertionError: naming ``what`` when ``seconds`` pass first.
    """
    pause = FIRST_PAUSE if every is None else every
    try:
        async with asyncio.timeout(seconds):
            while True:
                value = await check()
                if value:
                    return value
                await asyncio.sleep(pause)
                if every is None:
                    pause = min(pause * 1.5, LONGEST_PAUSE)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None


async def until_ready(
    session: aiohttp.ClientSession,
    url: str,
    what: str = "the process is ready",
    *,
    seconds: float = START_WITHIN,
    exited: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Poll the readiness endpoint ``url`` until it answers 200, and return its body.

    A refused connection (the process is not listening yet) counts as not ready.

    :param exited: whether the process exited, so that waiting longer is pointless.
    :raises AssertionError: naming ``what``, when the process exited or ``seconds`` passed first.
    """

    async def ready() -> dict[str, Any] | None:
        if exited():
            raise AssertionError(f"the process exited before {what}")
        try:
            async with session.get(url) as response:
                return dict(await response.json()) if response.status == 200 else None
        except aiohttp.ClientError:
            return None

    body: dict[str, Any] = await until(ready, what, seconds, every=0.05)
    return body


class DeskpoolProcess:
    """One ``deskpool run COMPONENT...`` process, its output collected line by line.

    :param components: the components to run (``["api"]``, ``["worker"]``...).
    :param env: the whole environment of the process.
    :param cwd: its working directory (the current one when ``None``).
    :param command: the ``deskpool`` command to run (:func:`deskpool_command` when ``None``),
        e.g. a benchmark's launcher that trusts a test license vendor inside the process.
    """

    def __init__(
        self,
        components: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        self.components = list(components)
        self.command = list(command or deskpool_command())
        self.env = dict(env)
        self.cwd = cwd
        #: What the process's listeners bound, by name (``{"api": "127.0.0.1:41873"}``).
        self.addresses: dict[str, str] = {}
        self.lines: list[str] = []
        self.watched: dict[str, asyncio.Event] = {}
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        """The process id (once started)."""
        assert self.process is not None
        return self.process.pid

    def url(self, listener: str, scheme: str = "http") -> str:
        """``scheme://host:port`` of a listener the process bound (``"api"``, ``"ops"``...)."""
        return f"{scheme}://{self.addresses[listener]}"

    @property
    def output(self) -> str:
        """Everything the process wrote so far."""
        return "\n".join(self.lines)

    async def start(self, within: float = START_WITHIN) -> DeskpoolProcess:
        """Start the process; return once every component started and its addresses are known.

        :raises AssertionError: with the output, when the process exits before that.
        """
        started = [self.watch(f"component {name} started") for name in self.components]
        if not self.env.get("LISTEN_ADDRESSES_FILE"):
            folder = tempfile.mkdtemp(prefix="deskpool-addresses-")
            self.env["LISTEN_ADDRESSES_FILE"] = str(Path(folder) / "addresses.json")
        written = Path(self.env["LISTEN_ADDRESSES_FILE"])
        self.process = await asyncio.create_subprocess_exec(
            *self.command,
            "run",
            *self.components,
            env=self.env,
            cwd=self.cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read())
        all_started = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in started)))
        either: list[asyncio.Future[Any]] = [all_started, self._reader]
        async with asyncio.timeout(within):
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not all_started.done():
            all_started.cancel()
            raise AssertionError(f"{self.components} exited before starting:\n{self.output}")

        async def addresses() -> list[dict[str, str]]:
            if self._reader is not None and self._reader.done():
                raise AssertionError(f"{self.components} exited:\n{self.output}")
            found = read_addresses(written)
            return [] if found is None else [found]  # a process without listeners writes {}

        try:
            (self.addresses,) = await until(addresses, f"{self.components} wrote {written}", within)
        except AssertionError as missing:
            raise AssertionError(f"{missing}:\n{self.output}") from None
        return self

    def watch(self, text: str) -> asyncio.Event:
        """An event set once the process writes a line containing ``text`` (or already did)."""
        event = self.watched.setdefault(text, asyncio.Event())
        if any(text in line for line in self.lines):
            event.set()
        return event

    async def _read(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            for text, event in self.watched.items():
                if text in line:
                    event.set()

    def signal(self, number: int) -> None:
        """Send signal ``number`` if the process still runs."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(number)

    def kill(self) -> None:
        """SIGKILL the process if it still runs."""
        self.signal(signal.SIGKILL)

    async def wait(self, within: float = START_WITHIN) -> int:
        """Wait for the process to exit and its output to be read; return its exit status.

        ``within`` bounds a hang (generous: an exit on a loaded machine took over 30 s); a test
        proving a prompt exit passes its own.
        """
        assert self.process is not None
        returncode = await asyncio.wait_for(self.process.wait(), within)
        if self._reader is not None:
            await self._reader
        return returncode

    async def stop(self, within: float = 15) -> int | None:
        """SIGTERM the process, SIGKILL it after ``within`` seconds; return its exit status.

        ``None`` when it was never started.
        """
        if self.process is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError:
            self.kill()
            await self.process.wait()
        if self._reader is not None:
            await self._reader
        return self.process.returncode


#: Intervals that keep a test deployment quick: reconciliation, the workers' polls and the
#: session checks every second, shutdowns within two seconds.
QUICK_INTERVALS = {
    "POOL_RECONCILE_INTERVAL": "1s",
    "WORKER_POLL_INTERVAL": "1s",
    "SESSION_CHECK_INTERVAL": "1s",
    "WORKER_SHUTDOWN_TIMEOUT": "2s",
    "GATEWAY_SHUTDOWN_TIMEOUT": "1s",
}


def deployment_environ(
    base: Mapping[str, str],
    database_url: str,
    identity_provider: Any = None,
    *,
    admin: str | None = None,
    **settings: str,
) -> dict[str, str]:
    """The environment every process of a test deployment shares.

    :param base: the test run's environment (``deskpool_environ``).
    :param database_url: the deployment's database.
    :param identity_provider: a :class:`~deskpool.testing.idp.TestIdentityProvider` the API
        trusts (its issuer and audience), or ``None``.
    :param admin: a subject made platform administrator on its first sign-in.
    :param settings: further settings (``POOL_RECONCILE_INTERVAL="1s"``...).
    """
    environ = {**base, "PATH": os.environ["PATH"], "DATABASE_URL": database_url}
    if identity_provider is not None:
        environ["AUTH_OIDC_ISSUER_URL"] = identity_provider.issuer_url
        environ["AUTH_OIDC_AUDIENCE"] = identity_provider.audience
    if admin is not None:
        environ["AUTH_BOOTSTRAP_ADMIN_SUBJECTS"] = admin
    return {**environ, **settings}


def listening(
    components: Sequence[str],
    env: Mapping[str, str],
    setting: str,
    command: Sequence[str] | None = None,
) -> DeskpoolProcess:
    """A process of ``components`` listening on a port of 127.0.0.1 the system picks.

    :param setting: the listener's setting (``API_ADDR``, ``GATEWAY_ADDR``); the address it
        bound is in the started process's :attr:`~DeskpoolProcess.addresses`.
    :param command: as :class:`DeskpoolProcess`'s.
    """
    return DeskpoolProcess(components, {**env, setting: ANY_PORT}, command=command)


@contextlib.asynccontextmanager
async def running(
    processes: Mapping[str, DeskpoolProcess], *, one_by_one: bool = False
) -> AsyncIterator[dict[str, DeskpoolProcess]]:
    """Start ``processes`` (together, or ``one_by_one`` in order) and stop them all on exit.

    Yields them by name; a process a test killed is simply reaped.
    """
    started = dict(processes)
    try:
        if one_by_one:
            for process in started.values():
                await process.start()
        else:
            await asyncio.gather(*(process.start() for process in started.values()))
        yield started
    finally:
        await asyncio.gather(*(process.stop() for process in started.values()))
