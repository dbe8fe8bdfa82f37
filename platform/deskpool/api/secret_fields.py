"""Write-only credentials in API schemas: accepted in requests, never returned.

A request schema declares a credential with :class:`SecretInput`: it is ``load_only`` (the
OpenAPI document marks it ``writeOnly``, format ``password``), it loads as a
:class:`deskpool.secrets.SecretValue` (redacted in ``repr``, not JSON serializable), its
validation messages never repeat the value, and it never dumps anything.

A response describes a credential with :class:`SecretStatusSchema` (built from
:class:`deskpool.secrets.SecretMetadata`): whether one is set and when it last changed. So a
cluster reads back as ``{"api_token": {"set": true, "changed_at": "..."}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import Schema, fields

from deskpool.secrets import MAX_PLAINTEXT_BYTES, SecretValue


class SecretInput(fields.Field[SecretValue]):
    """A write-only credential field: text in, :class:`SecretValue` out, nothing dumped.

    :param max_bytes: the longest accepted value, in UTF-8 bytes.
    :param allow_empty: accept the empty string (by default a credential has content).
    """

    default_error_messages = {
        "invalid": "Not a valid string.",
        "empty": "Must not be empty.",
        "too_long": "Must be at most {max_bytes} bytes.",
    }

    def __init__(
        self, *, max_bytes: int = MAX_PLAINTEXT_BYTES, allow_empty: bool = False, **kwargs: Any
    ) -> None:
        kwargs["load_only"] = True
        metadata = {"type": "string", "format": "password", **kwargs.pop("metadata", {})}
        if not allow_empty:
            metadata.setdefault("minLength", 1)  # the document states that it is refused
        super().__init__(metadata=metadata, **kwargs)
        self.max_bytes = max_bytes
        self.allow_empty = allow_empty

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> None:
        return None

    def _deserialize(
        self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any
    ) -> SecretValue:
        if not isinstance(value, str):
            raise self.make_error("invalid")
        if not value and not self.allow_empty:
            raise self.make_error("empty")
        if len(value.encode()) > self.max_bytes:
            raise self.make_error("too_long", max_bytes=self.max_bytes)
        return SecretValue(value)


class SecretStatusSchema(Schema):
    """What a response says about a credential: whether one is set, and when it changed."""

    is_set = fields.Boolean(
        required=True,
        data_key="set",
        metadata={"description": "Whether a credential is stored."},
    )
    changed_at = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={"description": "When the credential was last set; null when none is."},
    )
