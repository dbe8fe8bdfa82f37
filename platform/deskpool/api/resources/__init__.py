"""The built-in REST resources, each a module that adds its operations to the route table."""

from __future__ import annotations

from deskpool.api.resources import (
    clusters,
    desktops,
    identity,
    jobs,
    license,
    orphans,
    pools,
    sessions,
)
from deskpool.api.routes import RouteTable


def register(routes: RouteTable) -> None:
    """Add every built-in operation to ``routes``."""
    clusters.register(routes)
    desktops.register(routes)
    identity.register(routes)
    jobs.register(routes)
    license.register(routes)
    orphans.register(routes)
    pools.register(routes)
    sessions.register(routes)
