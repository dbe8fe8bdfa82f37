"""Licenses for tests: a test vendor whose key the test process alone trusts.

:class:`TestVendor` signs licenses and build manifests with a key made for the test run. The
``license_vendor`` fixture of the ``deskpool.testing`` pytest plugin makes one and trusts its
key in the test process (:func:`deskpool.licensing.keys.trust_in_process`): code inside the
process does that, no setting can, so a deskpool process started by a test (or in production)
does not trust it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from deskpool.licensing import keys
from deskpool.licensing.document import MAX_DOCUMENT_BYTES, PRODUCT, sign_document
from deskpool.licensing.model import format_instant


class TestVendor:
    """A vendor key for tests, and licenses signed with it.

    :param trusted: trust the key in this process now (undo with :meth:`forget`).
    """

    __test__ = False  # not a test class, whatever its name

    def __init__(self, *, trusted: bool = True) -> None:
        self.private_key = Ed25519PrivateKey.generate()
        self.key_id = keys.trust_in_process(self.private_key.public_key()) if trusted else ""

    def forget(self) -> None:
        """Stop trusting the key."""
        if self.key_id:
            keys.forget_in_process(self.key_id)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """A license object: a standard edition license valid for a year from now."""
        now = datetime.now(UTC).replace(microsecond=0)
        claims: dict[str, Any] = {
            "id": f"TEST-{uuid.uuid4().hex[:8].upper()}",
            "product": PRODUCT,
            "licensee": "Example Test Org",
            "edition": "standard",
            "limits": {"desktops": 1000, "pools": 100, "sessions": 1000},
            "issued_at": format_instant(now - timedelta(days=1)),
            "expires_at": format_instant(now + timedelta(days=365)),
        }
        for name, value in overrides.items():
            claims[name] = format_instant(value) if isinstance(value, datetime) else value
        return claims

    def issue(self, **overrides: Any) -> str:
        """A signed license document (see :meth:`claims` for the defaults)."""
        return sign_document(self.private_key, self.claims(**overrides))

    @staticmethod
    def id_of(document: str) -> str:
        """The license id a document names."""
        license_id: str = json.loads(document)["license"]["id"]
        return license_id

    def unreadable(self) -> dict[str, str]:
        r"""Signed documents that are still not licenses, by what is wrong with them.

        ``lone surrogate``: the licensee holds an escaped half of a UTF-16 pair (``\\ud800``),
        which no Unicode text holds; ``oversized``: a good license padded with whitespace to
        beyond :data:`~deskpool.licensing.document.MAX_DOCUMENT_BYTES`.
        """
        surrogate = json.loads(self.issue())
        surrogate["license"]["licensee"] = "Example \ud800 Org"
        good = self.issue()
        return {
            "lone surrogate": json.dumps(surrogate),
            "oversized": good + " " * (MAX_DOCUMENT_BYTES + 1 - len(good.encode())),
        }

    def pem(self) -> bytes:
        """The private key as PKCS#8 PEM (what ``manifest build --key`` reads)."""
        return self.private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
