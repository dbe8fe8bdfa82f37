"""The vendor's public keys: licenses and build manifests verify only against these.

:data:`BUILD_KEYS` is part of the build (this file is covered by the signed manifest); no
setting or environment variable adds a key. Tests, and nothing else, add a key of their own
from code running inside the process (:func:`trust_in_process`, which the ``deskpool.testing``
pytest plugin calls), so a production process cannot be switched to a test key from outside.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from deskpool.licensing.model import key_fingerprint

#: The vendor's Ed25519 public keys (raw, base64), newest first.
BUILD_KEYS: tuple[str, ...] = ("XdYetcmzn/yKMR0eeHHE8jtqbJpU04z/rnvgv2fybVg=",)

_in_process: dict[str, Ed25519PublicKey] = {}


def public_key(encoded: str) -> Ed25519PublicKey:
    """An Ed25519 public key from its raw bytes in base64."""
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(encoded))


def trusted_keys() -> dict[str, Ed25519PublicKey]:
    """The keys licenses and manifests are verified against, by key id (fingerprint)."""
    keys = {key_fingerprint(key): key for key in map(public_key, BUILD_KEYS)}
    keys.update(_in_process)
    return keys


def trust_in_process(key: Ed25519PublicKey) -> str:
    """Trust ``key`` in this process only (for tests); returns its key id."""
    key_id = key_fingerprint(key)
    _in_process[key_id] = key
    return key_id


def forget_in_process(key_id: str) -> None:
    """Stop trusting a key added with :func:`trust_in_process`."""
    _in_process.pop(key_id, None)
