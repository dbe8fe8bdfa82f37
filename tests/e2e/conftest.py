"""Fixtures of the end-to-end tests: the environment of a deployment on the module's database."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from deskpool.testing.processes import ANY_PORT, QUICK_INTERVALS, deployment_environ

DeploymentEnviron = Callable[..., dict[str, str]]


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


@pytest.fixture
def quick_deployment(
    deskpool_environ: dict[str, str], module_database_url: str, identity_provider: Any
) -> DeploymentEnviron:
    """``quick_deployment(admin, **settings)``: the environment of a deployment's processes.

    On the module's database, trusting the test issuer, ``admin`` a bootstrap administrator,
    with :data:`~deskpool.testing.processes.QUICK_INTERVALS` and ``settings``.
    """

    def make(admin: str, **settings: str) -> dict[str, str]:
        return deployment_environ(
            deskpool_environ,
            module_database_url,
            identity_provider,
            admin=admin,
            **(QUICK_INTERVALS | settings),
        )

    return make


@pytest.fixture
def db_url(module_database_url: str) -> str:
    """``db`` connects to the test module's database, where its processes run."""
    return module_database_url
