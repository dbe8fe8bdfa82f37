"""Prometheus metrics of licensing, on the process's own registry (served at ``/metrics``).

Every process that judges the license (the api on reads and growth checks, the worker on every
watermark run) keeps these current, so a scrape of any of them shows the license state, the
limits and usage, the watermark, the build's integrity and the activation reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge

from deskpool.licensing.model import (
    BuildIntegrity,
    Judgement,
    LicenseStatus,
    Resource,
    Usage,
    WatermarkIntegrity,
    WatermarkView,
)


class _Children:
    """A labelled gauge's children, each looked up on its first use only.

    ``labels`` is not cheap; a child is made when first set, as before, so a resource never
    counted is not shown as 0.
    """

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self.made: dict[str, Gauge] = {}

    def __getitem__(self, value: str) -> Gauge:
        child = self.made.get(value)
        if child is None:
            child = self.made[value] = self.gauge.labels(value)
        return child


def _one_hot(children: _Children, values: Iterable[StrEnum], current: str) -> None:
    for value in values:
        children[value.value].set(1 if value.value == current else 0)


class LicenseMetrics:
    """The licensing metrics of one process.

    Every opening shows the judgement, the watermark and the sessions counted (issue 39's
    storm: a thousand at once): the labelled gauges' children are bound once, and a
    judgement or watermark equal to the one shown last is not set again.

    :param registry: the process's registry (``runtime.metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.status = Gauge(
            "deskpool_license_status",
            "1 for the license status in force (free, valid, grace, expired, invalid), else 0.",
            ["status"],
            registry=registry,
        )
        self.licensed = Gauge(
            "deskpool_license_licensed",
            "1 while a license's limits are in force, 0 under the free edition's.",
            registry=registry,
        )
        self.limit = Gauge(
            "deskpool_license_limit",
            "The limit in force per resource (-1: unlimited).",
            ["resource"],
            registry=registry,
        )
        self.usage = Gauge(
            "deskpool_license_usage",
            "How much of each limited resource exists, as last counted.",
            ["resource"],
            registry=registry,
        )
        self.expires = Gauge(
            "deskpool_license_expiry_timestamp_seconds",
            "When the installed license expires (0: none installed).",
            registry=registry,
        )
        self.watermark = Gauge(
            "deskpool_license_watermark_timestamp_seconds",
            "The persisted license watermark (0: not persisted yet).",
            registry=registry,
        )
        self.watermark_integrity = Gauge(
            "deskpool_license_watermark_integrity",
            "1 for the watermark's integrity (unset, intact, unprotected, tampered, backwards).",
            ["integrity"],
            registry=registry,
        )
        self.build = Gauge(
            "deskpool_build_integrity",
            "1 for the signed build manifest's verdict (verified, modified, unsigned, invalid).",
            ["state"],
            registry=registry,
        )
        self.changes = Counter(
            "deskpool_license_state_changes",
            "License state changes this process recorded, by the status changed to.",
            ["status"],
            registry=registry,
        )
        self.reports = Counter(
            "deskpool_license_reports",
            "Activation reports this process attempted, by outcome (sent, failed).",
            ["outcome"],
            registry=registry,
        )
        self.growth_refused = Counter(
            "deskpool_license_growth_refused",
            "Additions refused (or desktops not created) because of a license limit.",
            ["resource"],
            registry=registry,
        )
        self._status = _Children(self.status)
        self._limit = _Children(self.limit)
        self._usage = _Children(self.usage)
        self._watermark_integrity = _Children(self.watermark_integrity)
        self._build = _Children(self.build)
        #: What :meth:`observe` and :meth:`observe_watermark` showed last.
        self._judged: tuple[LicenseStatus, bool, tuple[int | None, ...], float] | None = None
        self._watermark: tuple[datetime | None, WatermarkIntegrity] | None = None

    def observe(self, judgement: Judgement, usage: Usage | None = None) -> None:
        """Show ``judgement`` (and what ``usage`` counted, when given)."""
        license = judgement.license
        shown = (
            judgement.status,
            judgement.licensed,
            tuple(judgement.limits.of(resource) for resource in Resource),
            license.expires_at.timestamp() if license is not None else 0,
        )
        if shown != self._judged:
            status, licensed, limits, expires = shown
            _one_hot(self._status, LicenseStatus, status.value)
            self.licensed.set(1 if licensed else 0)
            for resource, limit in zip(Resource, limits, strict=True):
                self._limit[resource.value].set(-1 if limit is None else limit)
            self.expires.set(expires)
            self._judged = shown
        if usage is not None:
            for resource in usage.counted:
                self._usage[resource.value].set(usage.of(resource))

    def observe_watermark(self, view: WatermarkView) -> None:
        """Show the watermark and its integrity."""
        shown = (view.instant, view.integrity)
        if shown == self._watermark:
            return
        self.watermark.set(view.instant.timestamp() if view.instant is not None else 0)
        _one_hot(self._watermark_integrity, WatermarkIntegrity, view.integrity.value)
        self._watermark = shown

    def observe_build(self, state: BuildIntegrity) -> None:
        """Show the build manifest's verdict."""
        _one_hot(self._build, BuildIntegrity, state.value)
