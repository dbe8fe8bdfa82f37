"""The built-in REST resources, each a module that adds its operations to the route table."""

from __future__ import annotations

from deskpool.api.resources import identity, jobs, pools
from deskpool.api.routes import RouteTable


def register(routes: RouteTable) -> None:
    """Add every built-in operation to ``routes``."""
    identity.register(routes)
    jobs.register(routes)
    pools.register(routes)
