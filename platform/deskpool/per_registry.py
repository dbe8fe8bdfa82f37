"""Metric families made once per Prometheus registry, on first use.

A family a module counts on (outside the components, which make theirs at start-up) is declared
as a function of the registry decorated with :func:`once_per_registry`: the first call makes it
on that registry, later calls return it. Tests build many runtimes, each with its registry, so
the families are kept per registry (weakly: a runtime gone, its families go too).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry

Family = TypeVar("Family")


def once_per_registry(
    make: Callable[[CollectorRegistry], Family],
) -> Callable[[CollectorRegistry], Family]:
    """``make`` called once per registry; its family returned on every call after the first."""
    made: weakref.WeakKeyDictionary[CollectorRegistry, Family] = weakref.WeakKeyDictionary()

    def family(registry: CollectorRegistry) -> Family:
        found = made.get(registry)
        if found is None:
            found = made[registry] = make(registry)
        return found

    family.__doc__ = make.__doc__
    family.__name__ = make.__name__
    return family
