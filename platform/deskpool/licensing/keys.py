"""The vendor's public keys: licenses and build manifests verify only against these.

:data:`BUILD_KEYS` is part of the build (this file is covered by the signed manifest); no
setting or environment variable adds a key. Tests add a key of their own from code running
inside the process (:func:`trust_in_process`, which the ``deskpool.testing`` pytest plugin
calls), and such a key counts only in development (:func:`development`: a build of which no
signed manifest is required). In a production build (the vendor's image, or any process whose
``LICENSE_MANIFEST_PATH`` names a manifest) keys added in the process are ignored, so code
slipped in from the environment (a ``sitecustomize`` on ``PYTHONPATH`` calling the hook) cannot
make it accept a license signed with a key of one's own. This module decides that, and the
manifest covers it.
"""

from __future__ import annotations

import base64
import functools
import logging
import os

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from deskpool.licensing.document import key_fingerprint
from deskpool.licensing.manifest import manifest_required

log = logging.getLogger(__name__)

#: The vendor's Ed25519 public keys (raw, base64), newest first.
BUILD_KEYS: tuple[str, ...] = ("XdYetcmzn/yKMR0eeHHE8jtqbJpU04z/rnvgv2fybVg=",)

_in_process: dict[str, Ed25519PublicKey] = {}


def public_key(encoded: str) -> Ed25519PublicKey:
    """An Ed25519 public key from its raw bytes in base64."""
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(encoded))


@functools.cache
def _parsed(encoded: tuple[str, ...]) -> tuple[tuple[str, Ed25519PublicKey], ...]:
    """The keys ``encoded`` names, by key id: parsed once (every opening judges the license)."""
    return tuple((key_fingerprint(key), key) for key in map(public_key, encoded))


def development(manifest_at: str) -> bool:
    """Whether keys added in the process count: only where no signed manifest is required.

    :param manifest_at: ``LICENSE_MANIFEST_PATH``.
    """
    return manifest_required(manifest_at) is None


def trusted_keys(manifest_at: str | None = None) -> dict[str, Ed25519PublicKey]:
    """The keys licenses and manifests are verified against, by key id (fingerprint).

    :param manifest_at: ``LICENSE_MANIFEST_PATH`` (by default, as the environment sets it);
        keys added with :func:`trust_in_process` count only when it makes a development build.
    """
    keys = dict(_parsed(BUILD_KEYS))
    if _in_process:
        configured = (
            os.environ.get("LICENSE_MANIFEST_PATH", "") if manifest_at is None else manifest_at
        )
        if development(configured):
            keys.update(_in_process)
        else:
            log.warning(
                "%d key(s) added inside this process are ignored: this build requires a signed "
                "manifest, and trusts the vendor keys it was built with only",
                len(_in_process),
            )
    return keys


def trust_in_process(key: Ed25519PublicKey) -> str:
    """Trust ``key`` in this process only, in development (for tests); returns its key id."""
    key_id = key_fingerprint(key)
    _in_process[key_id] = key
    return key_id


def forget_in_process(key_id: str) -> None:
    """Stop trusting a key added with :func:`trust_in_process`."""
    _in_process.pop(key_id, None)
