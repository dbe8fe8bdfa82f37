"""An installed license is verified once per document and set of vendor keys (issue 39).

Every opening judges the license in force: it read the installed document and verified it
again (JSON, canonical form, SHA-256 and an Ed25519 signature) a thousand times in the 9 a.m.
storm. The verdict depends only on the document and the trusted keys, so it is remembered
for the last pair seen; another document or another key set is verified afresh.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from deskpool.licensing import service
from deskpool.licensing.context import LicensingContext
from deskpool.licensing.document import key_fingerprint
from deskpool.licensing.store import Installation
from deskpool.licensing.watermark import WatermarkKeys
from deskpool.testing.licensing import TestVendor


def _installation(document: str) -> Installation:
    return Installation(TestVendor.id_of(document), document, datetime.now(UTC), "test")


def test_the_same_document_and_keys_are_verified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    vendor, other = TestVendor(trusted=False), TestVendor(trusted=False)
    public = vendor.private_key.public_key()
    keys: dict[str, Any] = {key_fingerprint(public): public}
    context = LicensingContext(WatermarkKeys.derive(None, None), trusted=lambda: dict(keys))
    verified: list[str] = []
    real = service.verify_document

    def counting(text: str, trusted: Any) -> Any:
        verified.append(text)
        return real(text, trusted)

    monkeypatch.setattr(service, "verify_document", counting)
    document = vendor.issue()

    first = service._installed_license(_installation(document), context)
    again = service._installed_license(_installation(document), context)
    assert first == again
    assert first[0] is not None
    assert first[1] is None
    assert len(verified) == 1

    forged = other.issue()  # signed by a key nobody trusts: refused, and remembered so
    refused = service._installed_license(_installation(forged), context)
    assert refused[0] is None
    assert "license_forged" in str(refused[1])
    assert service._installed_license(_installation(forged), context) == refused
    assert len(verified) == 2

    # The vendor key is no longer trusted: the same document is verified again, and refused.
    keys.clear()
    assert service._installed_license(_installation(document), context)[0] is None
    assert len(verified) == 3


def test_the_vendor_keys_are_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trusted keys are asked for at every opening; the build's are parsed the first time."""
    from deskpool.licensing import keys as license_keys

    parsed: list[str] = []
    real = license_keys.public_key

    def counting(encoded: str) -> Any:
        parsed.append(encoded)
        return real(encoded)

    monkeypatch.setattr(license_keys, "public_key", counting)
    license_keys._parsed.cache_clear()
    first, again = license_keys.trusted_keys(""), license_keys.trusted_keys("")
    assert parsed == list(license_keys.BUILD_KEYS)
    assert first.keys() == again.keys()
    assert first is not again  # a copy: a caller's change stays its own
