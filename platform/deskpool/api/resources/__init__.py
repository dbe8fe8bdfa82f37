"""The built-in REST resources, each a module that adds its operations to the route table."""

from __future__ import annotations

from deskpool.api.resources import (
    audit_events,
    clusters,
    desktops,
    events,
    grants,
    groups,
    jobs,
    license,
    me,
    orphans,
    pools,
    roles,
    sessions,
    users,
)
from deskpool.api.routes import RouteTable

#: Every built-in resource module; each has a ``register(routes)``.
RESOURCES = (
    audit_events,
    clusters,
    desktops,
    events,
    grants,
    groups,
    jobs,
    license,
    me,
    orphans,
    pools,
    roles,
    sessions,
    users,
)


def register(routes: RouteTable) -> None:
    """Add every built-in operation to ``routes``."""
    for resource in RESOURCES:
        resource.register(routes)
