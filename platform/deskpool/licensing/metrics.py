"""Prometheus metrics of licensing, on the process's own registry (served at ``/metrics``).

Every process that judges the license (the api on reads and growth checks, the worker on every
watermark run) keeps these current, so a scrape of any of them shows the license state, the
limits and usage, the watermark, the build's integrity and the activation reports.
"""

from __future__ import annotations

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


def _one_hot(
    gauge: Gauge, values: type[LicenseStatus | BuildIntegrity | WatermarkIntegrity], current: str
) -> None:
    for value in values:
        gauge.labels(value.value).set(1 if value.value == current else 0)


class LicenseMetrics:
    """The licensing metrics of one process.

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

    def observe(self, judgement: Judgement, usage: Usage | None = None) -> None:
        """Show ``judgement`` (and what ``usage`` counted, when given)."""
        _one_hot(self.status, LicenseStatus, judgement.status.value)
        self.licensed.set(1 if judgement.licensed else 0)
        for resource in Resource:
            limit = judgement.limits.of(resource)
            self.limit.labels(resource.value).set(-1 if limit is None else limit)
            if usage is not None and resource in usage.counted:
                self.usage.labels(resource.value).set(usage.of(resource))
        license = judgement.license
        self.expires.set(license.expires_at.timestamp() if license is not None else 0)

    def observe_watermark(self, view: WatermarkView) -> None:
        """Show the watermark and its integrity."""
        self.watermark.set(view.instant.timestamp() if view.instant is not None else 0)
        _one_hot(self.watermark_integrity, WatermarkIntegrity, view.integrity.value)

    def observe_build(self, state: BuildIntegrity) -> None:
        """Show the build manifest's verdict."""
        _one_hot(self.build, BuildIntegrity, state.value)
