"""Pure parts of cluster connections: TLS settings and the driver call metrics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from deskpool.clusters.drivers import DriverCallMetrics
from deskpool.clusters.tls import check_ca_certificate, normalize_fingerprint
from deskpool.drivers import DriverCall

PIN = ":".join(["0A"] * 32)


@pytest.mark.parametrize(
    "given",
    ["0a" * 32, "0A" * 32, ":".join(["0a"] * 32), " ".join(["0A"] * 32), PIN],
)
def test_fingerprints_are_normalized(given: str) -> None:
    assert normalize_fingerprint(given) == PIN


@pytest.mark.parametrize("given", ["", "0a" * 31, "0a" * 33, "zz" * 32, "0a" * 20])
def test_a_fingerprint_that_is_not_sha256_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="SHA-256"):
        normalize_fingerprint(given)


@pytest.mark.parametrize(
    "given",
    [
        "not a certificate",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        "-----BEGIN CERTIFICATE-----" + "A" * 70_000,
    ],
)
def test_a_ca_certificate_must_be_pem_certificates(given: str) -> None:
    with pytest.raises(ValueError, match="Must"):
        check_ca_certificate(given)


def test_driver_calls_are_counted_and_timed_by_driver_operation_and_outcome() -> None:
    registry = CollectorRegistry()
    metrics = DriverCallMetrics(registry)
    metrics.driver_call_finished(DriverCall("proxmox", "c1", "clone", 2.0, "ok"))
    metrics.driver_call_finished(DriverCall("proxmox", "c2", "clone", 0.5, "ok"))
    metrics.driver_call_finished(DriverCall("proxmox", "c1", "clone", 30.0, "driver_timeout"))
    ok = {"driver": "proxmox", "operation": "clone", "outcome": "ok"}
    assert registry.get_sample_value("deskpool_driver_calls_total", ok) == 2
    assert registry.get_sample_value("deskpool_driver_call_duration_seconds_sum", ok) == 2.5
    timeout = {**ok, "outcome": "driver_timeout"}
    assert registry.get_sample_value("deskpool_driver_calls_total", timeout) == 1
    assert (
        registry.get_sample_value(
            "deskpool_driver_call_duration_seconds_bucket", {**timeout, "le": "10.0"}
        )
        == 0
    )
