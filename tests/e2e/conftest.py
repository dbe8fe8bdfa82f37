"""Fixtures of the end-to-end tests: the environment of a deployment on the module's database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from deskpool.testing.processes import QUICK_INTERVALS, deployment_environ

DeploymentEnviron = Callable[..., dict[str, str]]


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
