"""Envelope encryption with AES-256-GCM: a random data key per secret, wrapped by a master key.

Every secret is encrypted with a data key of its own (32 random bytes, AES-256-GCM, a random
96-bit nonce). The data key is then encrypted ("wrapped") with AES-256-GCM under a key derived
from the master key (``SECRETS_MASTER_KEY``). Rotating the master key re-wraps the 48-byte
wrapped key and leaves the encrypted secret as it is.

Nothing here is a hand-rolled primitive: AES-GCM and HKDF come from ``cryptography``. From the
master key HKDF-SHA256 derives two independent values, so the master key itself is used by no
primitive directly: the wrapping key, and the 8-byte key id (a fingerprint that identifies the
key and reveals nothing about it).

The sealed form, version 1::

    offset  size  field
    0       5     magic b"dpsec"
    5       1     format version (1)
    6       8     key id: which master key wraps the data key
    14      12    wrap nonce
    26      48    wrapped data key (32-byte key, 16-byte GCM tag)
    74      12    data nonce
    86      n+16  ciphertext of the n-byte plaintext, with its GCM tag

Associated data (authenticated, not stored): the wrapped key is bound to the header (magic,
version, key id) and to the secret's context; the ciphertext to the magic, version and the
context. A value copied into another row or field, or with any byte changed, does not open.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from deskpool.secrets import (
    MAX_PLAINTEXT_BYTES,
    SecretContext,
    SecretDecryptionFailed,
    SecretKeyUnknown,
    SecretStore,
    SecretsUnavailable,
    SecretTooLarge,
)

if TYPE_CHECKING:
    from deskpool.config import Config

MAGIC = b"dpsec"
FORMAT_VERSION = 1
KEY_ID_BYTES = 8
NONCE_BYTES = 12
DATA_KEY_BYTES = 32
TAG_BYTES = 16
WRAPPED_KEY_BYTES = DATA_KEY_BYTES + TAG_BYTES
HEADER_BYTES = len(MAGIC) + 1 + KEY_ID_BYTES
_WRAP_AT = HEADER_BYTES
_DATA_AT = _WRAP_AT + NONCE_BYTES + WRAPPED_KEY_BYTES
MIN_SEALED_BYTES = _DATA_AT + NONCE_BYTES + TAG_BYTES

_WRAPPING_KEY_INFO = b"deskpool envelope v1: wrapping key"
_KEY_ID_INFO = b"deskpool envelope v1: key id"

#: Where a missing key is configured, and how to make one.
MISSING_KEY_DETAIL = (
    "No master key is configured: set SECRETS_MASTER_KEY (`deskpool secrets generate-key` "
    "prints a new one) to store or read credentials."
)


def _derive(master_key: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(master_key)


class MasterKey:
    """A master key, held only as what is derived from it: the wrapping cipher and the key id.

    :param material: the 32 bytes of ``SECRETS_MASTER_KEY`` (or ``..._PREVIOUS``).
    """

    __slots__ = ("_wrapping", "key_id", "raw_id")

    def __init__(self, material: bytes) -> None:
        if len(material) != 32:
            raise ValueError("a master key is exactly 32 bytes")
        self.raw_id = _derive(material, _KEY_ID_INFO, KEY_ID_BYTES)
        self.key_id = self.raw_id.hex()
        self._wrapping = AESGCM(_derive(material, _WRAPPING_KEY_INFO, 32))

    def wrap(self, data_key: bytes, associated_data: bytes) -> bytes:
        """Nonce and wrapped data key."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._wrapping.encrypt(nonce, data_key, associated_data)

    def unwrap(self, nonce: bytes, wrapped: bytes, associated_data: bytes) -> bytes:
        """The data key; raises ``InvalidTag`` when anything does not match."""
        return self._wrapping.decrypt(nonce, wrapped, associated_data)

    def __repr__(self) -> str:
        return f"MasterKey(key_id={self.key_id!r})"


class EnvelopeSecretStore(SecretStore):
    """The ``envelope`` secret store.

    :param current: the master key new values are sealed under (``b""``: none configured).
    :param previous: a retiring master key, accepted for opening only (``b""``: none).
    """

    def __init__(self, current: bytes = b"", previous: bytes = b"") -> None:
        self._current = MasterKey(current) if current else None
        retiring = MasterKey(previous) if previous else None
        self._keys: dict[bytes, MasterKey] = {}
        for key in (self._current, retiring):
            if key is not None:
                self._keys.setdefault(key.raw_id, key)

    @classmethod
    def from_config(cls, config: Config) -> EnvelopeSecretStore:
        """Build the store from ``SECRETS_MASTER_KEY`` and ``SECRETS_MASTER_KEY_PREVIOUS``."""
        return cls(
            config.typed("SECRETS_MASTER_KEY", bytes),
            config.typed("SECRETS_MASTER_KEY_PREVIOUS", bytes),
        )

    @property
    def current_key_id(self) -> str | None:
        """The id of ``SECRETS_MASTER_KEY``, or ``None``."""
        return self._current.key_id if self._current is not None else None

    @property
    def previous_key_ids(self) -> tuple[str, ...]:
        """The id of ``SECRETS_MASTER_KEY_PREVIOUS`` when it is set and differs."""
        return tuple(k.key_id for k in self._keys.values() if k is not self._current)

    # -- sealing

    def _require_current(self) -> MasterKey:
        if self._current is None:
            raise SecretsUnavailable(MISSING_KEY_DETAIL)
        return self._current

    @staticmethod
    def _header(key: MasterKey) -> bytes:
        return MAGIC + bytes([FORMAT_VERSION]) + key.raw_id

    @staticmethod
    def _data_associated_data(context: SecretContext) -> bytes:
        return MAGIC + bytes([FORMAT_VERSION]) + context.associated_data()

    def encrypt(self, plaintext: bytes, context: SecretContext) -> bytes:
        """Seal ``plaintext`` under a fresh data key wrapped by the current master key."""
        key = self._require_current()
        if len(plaintext) > MAX_PLAINTEXT_BYTES:
            raise SecretTooLarge(f"A credential is at most {MAX_PLAINTEXT_BYTES} bytes.")
        data_key = AESGCM.generate_key(bit_length=256)
        data_nonce = os.urandom(NONCE_BYTES)
        ciphertext = AESGCM(data_key).encrypt(
            data_nonce, plaintext, self._data_associated_data(context)
        )
        header = self._header(key)
        wrapped = key.wrap(data_key, header + context.associated_data())
        return header + wrapped + data_nonce + ciphertext

    # -- opening

    def _parse(self, sealed: bytes) -> tuple[bytes, bytes, bytes]:
        """Check the framing; return the key id bytes, the wrap part and the data part."""
        if (
            not isinstance(sealed, bytes | bytearray | memoryview)
            or len(sealed) < MIN_SEALED_BYTES
            or bytes(sealed[: len(MAGIC)]) != MAGIC
        ):
            raise SecretDecryptionFailed("The stored value is not a sealed credential.")
        sealed = bytes(sealed)
        version = sealed[len(MAGIC)]
        if version != FORMAT_VERSION:
            raise SecretDecryptionFailed(
                f"The stored credential uses sealed format version {version}, which this "
                f"version of deskpool cannot read."
            )
        return (
            sealed[len(MAGIC) + 1 : HEADER_BYTES],
            sealed[_WRAP_AT:_DATA_AT],
            sealed[_DATA_AT:],
        )

    def _unwrap(
        self, raw_id: bytes, wrap_part: bytes, context: SecretContext
    ) -> tuple[MasterKey, bytes]:
        key = self._keys.get(raw_id)
        if key is None:
            if not self._keys:
                raise SecretsUnavailable(MISSING_KEY_DETAIL)
            raise SecretKeyUnknown(
                f"The stored credential {context} is sealed under master key id {raw_id.hex()}, "
                f"which neither SECRETS_MASTER_KEY nor SECRETS_MASTER_KEY_PREVIOUS matches.",
                context=context,
                key_id=raw_id.hex(),
            )
        nonce, wrapped = wrap_part[:NONCE_BYTES], wrap_part[NONCE_BYTES:]
        try:
            data_key = key.unwrap(nonce, wrapped, self._header(key) + context.associated_data())
        except InvalidTag:
            raise SecretDecryptionFailed(context=context, key_id=key.key_id) from None
        return key, data_key

    def decrypt(self, sealed: bytes, context: SecretContext) -> bytes:
        """Open a value sealed for ``context`` under the current or the previous key."""
        raw_id, wrap_part, data_part = self._parse(sealed)
        key, data_key = self._unwrap(raw_id, wrap_part, context)
        nonce, ciphertext = data_part[:NONCE_BYTES], data_part[NONCE_BYTES:]
        try:
            return AESGCM(data_key).decrypt(nonce, ciphertext, self._data_associated_data(context))
        except InvalidTag:
            raise SecretDecryptionFailed(context=context, key_id=key.key_id) from None

    def rewrap(self, sealed: bytes, context: SecretContext) -> bytes:
        """Re-wrap the data key under the current master key; the ciphertext is kept.

        The data key is checked against the ciphertext before the value is re-wrapped, so a
        damaged value fails here rather than being carried over under the new key.
        """
        current = self._require_current()
        raw_id, wrap_part, data_part = self._parse(sealed)
        if raw_id == current.raw_id:
            return bytes(sealed)
        key, data_key = self._unwrap(raw_id, wrap_part, context)
        nonce, ciphertext = data_part[:NONCE_BYTES], data_part[NONCE_BYTES:]
        try:
            AESGCM(data_key).decrypt(nonce, ciphertext, self._data_associated_data(context))
        except InvalidTag:
            raise SecretDecryptionFailed(context=context, key_id=key.key_id) from None
        header = self._header(current)
        return header + current.wrap(data_key, header + context.associated_data()) + data_part

    def key_id_of(self, sealed: bytes) -> str:
        """The key id recorded in ``sealed``'s header, read without decrypting."""
        raw_id, _, _ = self._parse(sealed)
        return raw_id.hex()
