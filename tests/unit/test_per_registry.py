"""Metric families made once per registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from deskpool.per_registry import once_per_registry


@once_per_registry
def made(registry: CollectorRegistry) -> Counter:
    """A counter for the test."""
    return Counter("deskpool_test_made", "A counter for the test.", registry=registry)


def test_one_family_per_registry_and_each_registry_its_own() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    assert made(first) is made(first)  # a second registration would raise ValueError
    assert made(second) is not made(first)
    made(first).inc()
    assert first.get_sample_value("deskpool_test_made_total") == 1
    assert second.get_sample_value("deskpool_test_made_total") == 0
    assert made.__doc__ == "A counter for the test."
