"""The licensing domain with an injected clock: documents, judgement, grace, enforcement."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deskpool.licensing import keys
from deskpool.licensing.document import (
    LicenseExpired,
    LicenseForged,
    LicenseMalformed,
    LicenseModified,
    LicenseOtherProduct,
    check_installable,
    key_fingerprint,
    sign_document,
    verify_document,
)
from deskpool.licensing.model import (
    CLOCK_SKEW_TOLERANCE,
    EDITION_LIMITS,
    FREE_LIMITS,
    GRACE_PERIOD,
    BuildIntegrity,
    Edition,
    LicenseLimitReached,
    LicenseStatus,
    Resource,
    Usage,
    WatermarkIntegrity,
    WatermarkView,
    check_growth,
    headroom,
    judge,
    judged_time,
    room_for_concurrent,
)
from deskpool.testing.licensing import TestVendor

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
NO_WATERMARK = WatermarkView(None, WatermarkIntegrity.UNSET)


@pytest.fixture
def vendor() -> TestVendor:
    return TestVendor(trusted=False)


def trusted(vendor: TestVendor) -> dict[str, Any]:
    return {
        vendor.key_id
        or key_fingerprint(vendor.private_key.public_key()): vendor.private_key.public_key()
    }


def issue(vendor: TestVendor, **overrides: Any) -> str:
    return vendor.issue(issued_at=T0 - timedelta(days=30), expires_at=T0, **overrides)


def test_a_signed_license_verifies_with_its_fields(vendor: TestVendor) -> None:
    license = verify_document(issue(vendor, limits={"desktops": 7}), trusted(vendor))
    assert license.edition is Edition.STANDARD
    assert license.expires_at == T0
    # Limits the license leaves out are its edition's, declared once.
    standard = EDITION_LIMITS[Edition.STANDARD]
    assert license.limits.desktops == 7
    assert license.limits.pools == standard.pools
    assert license.limits.sessions == standard.sessions


def test_each_refusal_has_its_own_code(vendor: TestVendor) -> None:
    keyring = trusted(vendor)
    document = json.loads(issue(vendor))
    document["license"]["licensee"] = "Someone Else"
    with pytest.raises(LicenseModified) as modified:
        verify_document(json.dumps(document), keyring)
    forger = Ed25519PrivateKey.generate()
    with pytest.raises(LicenseForged) as forged:
        verify_document(sign_document(forger, vendor.claims()), keyring)
    # A vendor key id with another key's signature is forged too.
    relabelled = json.loads(sign_document(forger, vendor.claims()))
    relabelled["key_id"] = next(iter(keyring))
    with pytest.raises(LicenseForged):
        verify_document(json.dumps(relabelled), keyring)
    with pytest.raises(LicenseOtherProduct) as other:
        verify_document(vendor.issue(product="otherproduct"), keyring)
    with pytest.raises(LicenseMalformed) as malformed:
        verify_document("{not json", keyring)
    license = verify_document(issue(vendor), keyring)
    with pytest.raises(LicenseExpired) as expired:
        check_installable(license, T0 + timedelta(seconds=1))
    codes = {error.value.code for error in (modified, forged, other, malformed, expired)}
    assert codes == {
        "license_modified",
        "license_forged",
        "license_other_product",
        "license_malformed",
        "license_expired",
    }
    assert all(error.value.status == 422 for error in (modified, forged, other, malformed, expired))


def test_a_lone_surrogate_or_an_oversized_document_is_malformed(vendor: TestVendor) -> None:
    unreadable = vendor.unreadable()
    assert "\\ud800" in unreadable["lone surrogate"]
    with pytest.raises(LicenseMalformed, match="not valid Unicode"):
        verify_document(unreadable["lone surrogate"], trusted(vendor))
    with pytest.raises(LicenseMalformed, match="at most 16384 bytes"):
        verify_document(unreadable["oversized"], trusted(vendor))
    # The oversized one is a good license but for its padding.
    assert verify_document(unreadable["oversized"].rstrip() + "\n", trusted(vendor))


def test_the_build_keys_are_the_vendors_and_no_setting_adds_one(
    monkeypatch: pytest.MonkeyPatch, vendor: TestVendor
) -> None:
    monkeypatch.setenv("DESKPOOL_LICENSE_KEYS", vendor.key_id or "x")
    monkeypatch.setenv("LICENSE_PUBLIC_KEY", "anything")
    assert key_fingerprint(vendor.private_key.public_key()) not in keys.trusted_keys()
    assert "3dd5208033ae3b58" in keys.trusted_keys()
    with pytest.raises(LicenseForged):
        verify_document(issue(vendor), keys.trusted_keys())


def view(
    instant: datetime, integrity: WatermarkIntegrity = WatermarkIntegrity.INTACT
) -> WatermarkView:
    return WatermarkView(instant, integrity)


@pytest.mark.parametrize("back", [timedelta(days=1), timedelta(weeks=1), timedelta(days=365)])
def test_an_expired_license_stays_expired_when_the_clock_is_set_back(
    vendor: TestVendor, back: timedelta
) -> None:
    license = verify_document(issue(vendor), trusted(vendor))
    # The worker saw the time past the end of the grace period and persisted it.
    seen = T0 + GRACE_PERIOD + timedelta(hours=1)
    judged = judge(license, now=seen, watermark=view(seen), build=BuildIntegrity.UNSIGNED)
    assert judged.status is LicenseStatus.EXPIRED
    rolled_back = judge(
        license, now=seen - back, watermark=view(seen), build=BuildIntegrity.UNSIGNED
    )
    assert rolled_back.status is LicenseStatus.EXPIRED
    assert rolled_back.limits == FREE_LIMITS
    assert rolled_back.judged_at >= seen - CLOCK_SKEW_TOLERANCE
    assert any("behind the license watermark" in reason for reason in rolled_back.reasons)


def test_small_skews_neither_expire_early_nor_are_reported(vendor: TestVendor) -> None:
    license = verify_document(issue(vendor), trusted(vendor))
    now = T0 - timedelta(minutes=20)
    # Another host's clock ran 10 minutes ahead and persisted the watermark.
    judged = judge(
        license, now=now, watermark=view(now + timedelta(minutes=10)), build=BuildIntegrity.UNSIGNED
    )
    assert judged.status is LicenseStatus.VALID
    assert judged.reasons == ()


def test_grace_period_then_the_free_edition_on_time(vendor: TestVendor) -> None:
    license = verify_document(issue(vendor), trusted(vendor))

    def at(moment: datetime) -> Any:
        return judge(license, now=moment, watermark=NO_WATERMARK, build=BuildIntegrity.VERIFIED)

    before = at(T0 - timedelta(seconds=1))
    assert before.status is LicenseStatus.VALID
    assert before.edition is Edition.STANDARD
    grace = at(T0)
    assert grace.status is LicenseStatus.GRACE
    assert grace.limits == license.limits
    assert grace.grace_ends_at == T0 + GRACE_PERIOD
    last = at(T0 + GRACE_PERIOD - timedelta(seconds=1))
    assert last.status is LicenseStatus.GRACE
    fallen = at(T0 + GRACE_PERIOD)
    assert fallen.status is LicenseStatus.EXPIRED
    assert fallen.edition is Edition.FREE
    assert fallen.limits == FREE_LIMITS


def test_watermark_evidence_counts_as_expiry(vendor: TestVendor) -> None:
    license = verify_document(issue(vendor), trusted(vendor))
    for integrity in (WatermarkIntegrity.TAMPERED, WatermarkIntegrity.BACKWARDS):
        judged = judge(
            license,
            now=T0 - timedelta(days=100),
            watermark=WatermarkView(T0 - timedelta(days=100), integrity, "edited"),
            build=BuildIntegrity.VERIFIED,
        )
        assert judged.status is LicenseStatus.EXPIRED
        assert judged.limits == FREE_LIMITS
        # A tampered watermark is no lower bound of the time.
        assert (
            judged_time(T0, judged_watermark := WatermarkView(T0 + timedelta(days=9), integrity))
            == T0
        )
        assert not judged_watermark.trusted


@pytest.mark.parametrize("build", [BuildIntegrity.MODIFIED, BuildIntegrity.INVALID])
def test_a_modified_or_invalid_build_falls_back_to_free_limits(
    vendor: TestVendor, build: BuildIntegrity
) -> None:
    license = verify_document(issue(vendor), trusted(vendor))
    judged = judge(license, now=T0 - timedelta(days=1), watermark=NO_WATERMARK, build=build)
    assert judged.status is LicenseStatus.VALID
    assert judged.limits == FREE_LIMITS
    assert any(build.value in reason for reason in judged.reasons)
    unsigned = judge(
        license, now=T0 - timedelta(days=1), watermark=NO_WATERMARK, build=BuildIntegrity.UNSIGNED
    )
    assert unsigned.limits == license.limits


def test_enforcement_only_decides_additions() -> None:
    free = judge(None, now=T0, watermark=NO_WATERMARK, build=BuildIntegrity.UNSIGNED)
    assert free.status is LicenseStatus.FREE
    assert free.limits == FREE_LIMITS
    assert FREE_LIMITS.pools is not None
    assert FREE_LIMITS.desktops is not None
    at_limit = Usage(desktops=FREE_LIMITS.desktops, pools=FREE_LIMITS.pools - 1)
    check_growth(free, at_limit, Resource.POOLS)
    assert headroom(free, at_limit, Resource.DESKTOPS) == 0
    with pytest.raises(LicenseLimitReached) as refused:
        check_growth(free, at_limit, Resource.DESKTOPS)
    assert refused.value.status == 409
    assert refused.value.extra["limit"] == FREE_LIMITS.desktops
    assert "nothing existing is changed" in refused.value.detail
    # Over the limit (after a downgrade): still never a negative headroom.
    assert headroom(free, Usage(desktops=FREE_LIMITS.desktops + 9), Resource.DESKTOPS) == 0


def test_only_room_for_every_concurrent_adder_skips_serialization(vendor: TestVendor) -> None:
    free = judge(None, now=T0, watermark=NO_WATERMARK, build=BuildIntegrity.UNSIGNED)
    assert FREE_LIMITS.sessions is not None
    limit = FREE_LIMITS.sessions
    # 10 transactions may add at once: room for 10 more is enough, 9 is not.
    assert room_for_concurrent(free, Usage(sessions=limit - 10), Resource.SESSIONS, 10)
    assert not room_for_concurrent(free, Usage(sessions=limit - 9), Resource.SESSIONS, 10)
    assert not room_for_concurrent(free, Usage(sessions=limit), Resource.SESSIONS, 1)
    assert room_for_concurrent(free, Usage(sessions=limit - 1), Resource.SESSIONS, 0)
    license = verify_document(
        issue(vendor, edition="enterprise", limits={"sessions": None}), trusted(vendor)
    )
    unlimited = judge(
        license, now=T0 - timedelta(days=1), watermark=NO_WATERMARK, build=BuildIntegrity.UNSIGNED
    )
    assert unlimited.limits.sessions is None
    assert room_for_concurrent(unlimited, Usage(sessions=10**9), Resource.SESSIONS, 100)


def test_the_free_edition_runs_the_quick_start_demo() -> None:
    from deskpool.dev import DEMO_POOL

    assert FREE_LIMITS.desktops is not None
    assert FREE_LIMITS.pools is not None
    assert DEMO_POOL["max_size"] <= FREE_LIMITS.desktops
    assert FREE_LIMITS.pools >= 2
    assert FREE_LIMITS.sessions is not None
    assert FREE_LIMITS.sessions >= 10


def test_a_session_checks_usage_counts_the_sessions_alone(vendor: TestVendor) -> None:
    from prometheus_client import CollectorRegistry

    from deskpool.licensing.metrics import LicenseMetrics

    license = verify_document(
        issue(vendor, limits={"desktops": 50, "sessions": 10}), trusted(vendor)
    )
    judged = judge(
        license,
        now=T0 - timedelta(days=1),
        watermark=view(T0 - timedelta(days=1)),
        build=BuildIntegrity.UNSIGNED,
    )
    counted = Usage.of_sessions(9)
    assert counted.of(Resource.SESSIONS) == 9
    assert counted.as_dict() == {"sessions": 9}
    assert room_for_concurrent(judged, counted, Resource.SESSIONS, 1)
    assert not room_for_concurrent(judged, counted, Resource.SESSIONS, 2)
    # The desktops were not counted: reading them is an error, not a zero.
    with pytest.raises(ValueError, match="desktops were not counted"):
        counted.of(Resource.DESKTOPS)
    # A gauge shows the last figure counted: a session check leaves the desktops' as it was.
    registry = CollectorRegistry()
    metrics = LicenseMetrics(registry)
    metrics.observe(judged, Usage(desktops=30, pools=2, sessions=4))
    metrics.observe(judged, counted)
    shown = {
        resource: registry.get_sample_value("deskpool_license_usage", {"resource": resource})
        for resource in ("desktops", "pools", "sessions")
    }
    assert shown == {"desktops": 30, "pools": 2, "sessions": 9}
