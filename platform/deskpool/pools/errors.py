"""The errors of the pool aggregate that the stores find and the services let through.

Each is a domain error (:mod:`deskpool.errors`): it carries its HTTP status and ``code``, and
``api/problems.py`` turns it into a problem response, so neither a store nor a service builds
one. The rules of allocation have their own (:mod:`deskpool.desktops.allocation`); an illegal
desktop event is :class:`deskpool.desktops.states.IllegalTransition`.
"""

from __future__ import annotations

from deskpool.errors import Conflict


class PoolNameTaken(Conflict):
    """Another pool already has this name (names are compared without case)."""

    code = "pool_name_taken"
    title = "A pool with this name exists"


class PoolNotEmpty(Conflict):
    """The pool still has desktops; drain it first."""

    code = "pool_not_empty"
    title = "The pool has desktops"


class DesktopNameTaken(Conflict):
    """A desktop of the same cluster already has one of the names."""

    code = "desktop_name_taken"
    title = "A desktop with this name exists on the cluster"
