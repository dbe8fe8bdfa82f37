"""The built-in REST resources: each module declares its operations on its own ``ROUTES`` table."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from deskpool.api.routes import RouteTable

#: The names of the built-in resource modules of this package; each has a ``ROUTES`` table.
NAMES = (
    "audit_events",
    "clusters",
    "desktops",
    "drivers",
    "events",
    "grants",
    "groups",
    "helpdesk",
    "jobs",
    "license",
    "me",
    "messages",
    "notices",
    "orphans",
    "pools",
    "recordings",
    "reports",
    "roles",
    "rollouts",
    "schedules",
    "sessions",
    "users",
    "webhooks",
)


def resources() -> list[ModuleType]:
    """Every built-in resource module, imported."""
    return [import_module(f"{__name__}.{name}") for name in NAMES]


def register(routes: RouteTable) -> None:
    """Add every built-in operation to ``routes``."""
    for resource in resources():
        routes.include(resource.ROUTES)
