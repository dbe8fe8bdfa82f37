"""The end-to-end tests' shared helpers: a deployment's environment, a ``deskpool dev`` one."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from deskpool.testing.processes import ANY_PORT, DeskpoolProcess, listening, running

DeploymentEnviron = Callable[..., dict[str, str]]
#: ``async with deploy(admin, **settings) as processes``: see tests/e2e/conftest.py's
#: ``gateway_deployment``.
GatewayDeployment = Callable[..., AbstractAsyncContextManager[dict[str, DeskpoolProcess]]]
#: The WebSocket URL a deployment's gateway says it is reached at (a load balancer's).
PUBLIC_URL = "wss://desktops.e2e.test/websocket-tunnel"


def dev_process_environ(base: Mapping[str, str], addresses_file: Path) -> dict[str, str]:
    """The environment of a ``deskpool dev`` process of a test (with ``--issuer-port 0``).

    Every listener binds a port the system picks, and the process writes which to
    ``addresses_file`` (``LISTEN_ADDRESSES_FILE``); quick intervals; ``APP_ENV=development``
    as ``make run`` writes it in ``.run/dev.env``.
    """
    return {
        **base,
        "PATH": os.environ["PATH"],
        "API_ADDR": ANY_PORT,
        "METRICS_ADDR": ANY_PORT,
        "GATEWAY_ADDR": ANY_PORT,
        "WEB_ADDR": ANY_PORT,
        "DESKTOPD_ADDRESS": ANY_PORT,
        "LISTEN_ADDRESSES_FILE": str(addresses_file),
        "SECRETS_MASTER_KEY": "A" * 43 + "=",
        "POOL_RECONCILE_INTERVAL": "1s",
        "WORKER_POLL_INTERVAL": "1s",
        "APP_ENV": "development",
    }


def api_worker_gateway(
    environ: Mapping[str, str],
) -> AbstractAsyncContextManager[dict[str, DeskpoolProcess]]:
    """``async with api_worker_gateway(environ) as processes``: the api, a worker and a gateway.

    Each its own process of ``environ``, started one by one (``processes["api"]``...), stopped
    on exit.
    """
    started = {
        "api": DeskpoolProcess(["api"], environ),
        "worker": DeskpoolProcess(["worker"], environ),
        "gateway": listening(["gateway"], environ, "GATEWAY_ADDR"),
    }
    return running(started, one_by_one=True)
