"""Showing the license's state again, unchanged, costs no label lookup (issue 39).

Every opening judges the license and shows the judgement, the watermark and the sessions
counted in the metrics (three observations after its commit). Each looked up every labelled
gauge's child again (prometheus_client's ``labels``: about twenty per opening, 4 % of the
api's time in the 9 a.m. storm, py-spy ``--gil``). The children are now bound once, and what
is already shown is not set again; what changed is, whatever came between.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, Gauge

from deskpool.licensing.document import key_fingerprint, verify_document
from deskpool.licensing.metrics import LicenseMetrics
from deskpool.licensing.model import (
    BuildIntegrity,
    Judgement,
    License,
    Usage,
    WatermarkIntegrity,
    WatermarkView,
    judge,
)
from deskpool.testing.licensing import TestVendor

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _shown(registry: CollectorRegistry, name: str, label: str, value: str) -> float | None:
    return registry.get_sample_value(name, {label: value})


def test_an_unchanged_judgement_is_shown_again_without_a_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vendor = TestVendor(trusted=False)
    public = vendor.private_key.public_key()
    keys = {key_fingerprint(public): public}
    big = verify_document(vendor.issue(limits={"desktops": 100, "sessions": 40}), keys)
    small = verify_document(vendor.issue(limits={"desktops": 10, "sessions": 4}), keys)
    watermark = WatermarkView(NOW - timedelta(hours=1), WatermarkIntegrity.INTACT)

    def judged(license: License | None) -> Judgement:
        return judge(license, now=NOW, watermark=watermark, build=BuildIntegrity.UNSIGNED)

    registry = CollectorRegistry()
    metrics = LicenseMetrics(registry)
    metrics.observe(judged(big), Usage.of_sessions(3))
    metrics.observe_watermark(watermark)

    lookups: list[tuple[str, ...]] = []
    real = Gauge.labels

    def counting(self: Gauge, *values: str, **named: str) -> Gauge:
        lookups.append(values)
        return real(self, *values, **named)

    monkeypatch.setattr(Gauge, "labels", counting)
    metrics.observe(judged(big))
    metrics.observe(judged(big), Usage.of_sessions(4))
    metrics.observe_watermark(watermark)
    assert lookups == []
    assert _shown(registry, "deskpool_license_usage", "resource", "sessions") == 4
    assert _shown(registry, "deskpool_license_limit", "resource", "sessions") == 40

    # A change is shown, and so is the way back to what was shown before it.
    metrics.observe(judged(small), Usage.of_sessions(2))
    assert _shown(registry, "deskpool_license_limit", "resource", "sessions") == 4
    assert _shown(registry, "deskpool_license_limit", "resource", "desktops") == 10
    metrics.observe(judged(big))
    assert _shown(registry, "deskpool_license_limit", "resource", "sessions") == 40
    assert _shown(registry, "deskpool_license_usage", "resource", "sessions") == 2
    metrics.observe(judged(None))
    assert _shown(registry, "deskpool_license_status", "status", "free") == 1
    assert _shown(registry, "deskpool_license_status", "status", "valid") == 0
    assert registry.get_sample_value("deskpool_license_licensed") == 0

    tampered = WatermarkView(NOW, WatermarkIntegrity.TAMPERED)
    metrics.observe_watermark(tampered)
    integrity = "deskpool_license_watermark_integrity"
    assert _shown(registry, integrity, "integrity", "tampered") == 1
    assert _shown(registry, integrity, "integrity", "intact") == 0
    assert registry.get_sample_value("deskpool_license_watermark_timestamp_seconds") == (
        NOW.timestamp()
    )
