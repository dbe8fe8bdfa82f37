"""The contract test's two API instances, served by a process of their own.

schemathesis calls them over real HTTP, synchronously, from the test process; served from a
thread of the test process they shared its interpreter with the generator (each waited for the
other). :func:`served_apis` starts one process (spawned, not forked: a fresh interpreter) that
opens both runtimes and the test identity provider on its event loop, hands back where they
listen and an administrator's token, and closes them all when told to stop or when the test
process goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from aiohttp import web

#: How long the process may take to open everything.
START_WITHIN = 120.0


@dataclass(frozen=True)
class ServedApis:
    """Base URLs of the two instances and the administrator's bearer token."""

    unconfigured: str
    secured: str
    admin_token: str


@contextlib.contextmanager
def served_apis(environ: dict[str, str], admin_subject: str) -> Iterator[ServedApis]:
    """Serve the API for ``environ`` twice from a process of its own, until the block ends.

    One instance without OIDC configuration; one trusting a test issuer (run in the same
    process), ``admin_subject`` a bootstrap administrator whose token is handed back.

    :raises AssertionError: with the process's traceback, when it could not open them.
    """
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(
        target=serve, args=(environ, admin_subject, theirs), name="contract-apis", daemon=True
    )
    process.start()
    theirs.close()
    try:
        if not ours.poll(START_WITHIN):
            raise AssertionError(f"the contract's API process did not start in {START_WITHIN}s")
        message = ours.recv()
        if message[0] != "serving":
            raise AssertionError(f"the contract's API process failed:\n{message[1]}")
        yield ServedApis(*message[1:])
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join()
        ours.close()


def serve(environ: dict[str, str], admin_subject: str, connection: Connection) -> None:
    """The process's body: serve, report where, and wait to be told to stop."""
    asyncio.run(_serve(environ, admin_subject, connection))


async def _serve(environ: dict[str, str], admin_subject: str, connection: Connection) -> None:
    from deskpool.testing.idp import TestIdentityProvider

    cleanups: list[Any] = []
    try:
        try:
            unconfigured = await _serve_api(environ, cleanups)
            idp = TestIdentityProvider()
            await idp.start()
            cleanups.append(idp.stop)
            secured = await _serve_api(
                environ
                | {
                    "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
                    "AUTH_OIDC_AUDIENCE": idp.audience,
                    "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": admin_subject,
                },
                cleanups,
            )
            token = idp.issue_token(admin_subject, expires_in=3600)
        except Exception:
            connection.send(("failed", traceback.format_exc()))
            return
        connection.send(("serving", unconfigured, secured, token))
        # Until told to stop, or the test process is gone (the pipe closes).
        with contextlib.suppress(EOFError, OSError):
            await asyncio.get_running_loop().run_in_executor(None, connection.recv)
    finally:
        for cleanup in reversed(cleanups):
            await cleanup()


async def _serve_api(environ: dict[str, str], cleanups: list[Any]) -> str:
    """Open a runtime for ``environ`` and serve its API on loopback; the base URL."""
    from deskpool.api.app import create_app
    from deskpool.host import bootstrap
    from deskpool.runtime import Runtime

    process = bootstrap(environ, ["api"], log_setup=False)
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    cleanups.append(runtime.close)
    runner = web.AppRunner(create_app(runtime))
    await runner.setup()
    cleanups.append(runner.cleanup)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return f"http://127.0.0.1:{port}"
