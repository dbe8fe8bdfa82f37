"""Fixtures of the cluster tests: an API with a master key, on a database of the module's own.

Clusters seal credentials, so these tests never use the run's shared database (sealed values
left there would stop the api from starting without a key in other tests): each test gets the
module's database with no sealed value and no cluster, a fresh master key, and callers holding
exactly ``clusters:read``, ``clusters:manage``, or nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.integration.seed import seed_user
from tests.support.clusters import (
    Callers,
    Headers,
)

from deskpool.runtime import Runtime
from deskpool.testing.pytest_plugin import opened_runtime


@pytest.fixture
def clusters_environ(sealing_environ: dict[str, str]) -> dict[str, str]:
    """The secure test environment on the module's database, with a master key."""
    return sealing_environ


@pytest.fixture
async def clusters_runtime(clusters_environ: dict[str, str]) -> AsyncIterator[Runtime]:
    """An opened api runtime on the module's database, emptied of clusters."""
    async with opened_runtime(clusters_environ, emptied=("clusters",)) as runtime:
        yield runtime


@pytest.fixture
def client_runtime(clusters_runtime: Runtime) -> Runtime:
    """``client`` calls the API of ``clusters_runtime``."""
    return clusters_runtime


@pytest.fixture
async def callers(
    clusters_runtime: Runtime, identity_provider: Any, bearer: Callable[..., Headers]
) -> Callers:
    """A manager, a reader, and a caller with no permission (unique subjects per test)."""
    suffix = secrets.token_hex(4)
    issuer = identity_provider.issuer_url
    subjects = {
        "manager": ("clusters:manage", f"manager-{suffix}"),
        "reader": ("clusters:read", f"reader-{suffix}"),
        "nobody": (None, f"nobody-{suffix}"),
    }
    for permission, subject in subjects.values():
        await seed_user(clusters_runtime, issuer, subject, *filter(None, [permission]))
    return Callers(**{role: bearer(subject) for role, (_, subject) in subjects.items()})
