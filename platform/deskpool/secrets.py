"""Secrets at rest: the secret store contract, and the one table every sealed value lives in.

deskpool stores credentials that open the whole estate (virtualization cluster API tokens,
domain-join credentials, remote desktop connection tokens). None is ever stored, logged or
returned in clear. A feature that keeps a credential calls the repository functions here:

- :func:`put_secret` seals a plaintext with the configured :class:`SecretStore` and writes it to
  ``sealed_secrets``, one row per :class:`SecretContext` (what the secret is, which record owns
  it, which field);
- :func:`get_secret` reads and opens it, as a :class:`SecretValue` whose ``repr`` and ``str``
  are redacted;
- :func:`secret_metadata` says only whether one is set and when it last changed (what API
  responses show: credentials are write-only).

The store itself is a plugin (entry-point group ``deskpool.secret_stores``, chosen by
``SECRET_STORE``; the first-party one is ``envelope``); a process reaches it as
``runtime.secret_store`` (built once by :func:`build_secret_store`). Its contract is
:class:`SecretStore`: ``encrypt``, ``decrypt``, ``rewrap`` and the ids of its keys. The context is
bound to the sealed value, so a sealed value copied into another row or field does not open.

A record that has one sealed field (a cluster's credentials, a pool's domain-join password)
names it once as an :class:`OwnedSecret` and reaches it by the record's id. Key rotation works
on the same table: :mod:`deskpool.secret_rotation` (``deskpool secrets status`` and
``deskpool secrets rewrap``).
"""

from __future__ import annotations

import hmac
import logging
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from deskpool.config import REDACTED
from deskpool.db.rows import Db
from deskpool.errors import DeskpoolError, PayloadTooLarge, ServiceUnavailable, StartupError

if TYPE_CHECKING:
    from deskpool.config import Config
    from deskpool.plugins import PluginHost

log = logging.getLogger(__name__)

#: The largest plaintext a store accepts, in bytes (credentials are small; this is not a vault
#: for files).
MAX_PLAINTEXT_BYTES = 64 * 1024

_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
_MAX_NAME = 100
_MAX_OWNER_ID = 200
_AD_LABEL = b"deskpool.secret-context.v1"


# ------------------------------------------------------------------------------------ errors


class SecretsUnavailable(ServiceUnavailable):
    """No master key is configured, so secrets can be neither sealed nor opened (503)."""

    code = "secrets_key_missing"
    title = "Credentials cannot be stored"


class SecretDecryptionFailed(DeskpoolError):
    """A stored secret does not open: damaged, moved to another record, or under a wrong key.

    The detail names the context (never the value). ``context`` and ``key_id`` are kept as
    attributes for logs.
    """

    status = 500
    code = "secret_decryption_failed"
    title = "A stored credential cannot be decrypted"

    def __init__(
        self,
        detail: str | None = None,
        *,
        context: SecretContext | None = None,
        key_id: str | None = None,
    ) -> None:
        self.context = context
        self.key_id = key_id
        if detail is None and context is not None:
            detail = f"The stored credential {context} cannot be decrypted."
        super().__init__(detail)


class SecretKeyUnknown(SecretDecryptionFailed):
    """A sealed value names a master key id that no configured key matches."""

    code = "secret_key_unknown"
    title = "A stored credential is sealed under a master key that is not configured"


class SecretTooLarge(PayloadTooLarge):
    """A plaintext is larger than :data:`MAX_PLAINTEXT_BYTES`."""

    code = "secret_too_large"
    title = "Credential too large"


# ----------------------------------------------------------------------------------- context


@dataclass(frozen=True)
class SecretContext:
    """What a secret is and which record owns it; bound to the sealed value.

    :param kind: the kind of secret, dotted lower-case words (``cluster.credentials``).
    :param owner_id: the id of the record that owns it (a cluster's or a pool's id).
    :param field: which of the owner's secrets (``api_token``, ``password``).
    """

    kind: str
    owner_id: str
    field: str

    def __post_init__(self) -> None:
        for name in ("kind", "field"):
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) > _MAX_NAME or not _NAME.match(value):
                raise ValueError(
                    f"secret context {name} must be dotted lower-case words, got {value!r}"
                )
        owner = self.owner_id
        if (
            not isinstance(owner, str)
            or not owner
            or len(owner) > _MAX_OWNER_ID
            or not owner.isprintable()
        ):
            raise ValueError(f"secret context owner_id must be a printable id, got {owner!r}")

    @classmethod
    def of(cls, kind: str, owner_id: str | uuid.UUID, field: str) -> SecretContext:
        """Build a context; a UUID owner id is written in its canonical text form."""
        return cls(kind, str(owner_id), field)

    @property
    def columns(self) -> tuple[str, str, str]:
        """``(kind, owner_id, field)``: the key of the context's row in ``sealed_secrets``."""
        return (self.kind, self.owner_id, self.field)

    def associated_data(self) -> bytes:
        """The canonical bytes a store binds as associated data.

        A label, then each of kind, owner id and field as UTF-8 prefixed by its length (two
        bytes, big-endian): no two contexts render the same bytes.
        """
        parts = (_AD_LABEL, *(part.encode() for part in self.columns))
        return b"".join(len(part).to_bytes(2, "big") + part for part in parts)

    def __str__(self) -> str:
        return f"{self.kind}[{self.owner_id}].{self.field}"


# ------------------------------------------------------------------------------------- value


class SecretValue:
    """A plaintext credential in memory: usable, but never shown.

    ``repr``, ``str`` and formatting give :data:`deskpool.config.REDACTED`; it is not JSON
    serializable, so it cannot slip into a response, a log field or audit details by accident.
    Call :meth:`reveal` where the credential is really used (a request to the cluster).
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("a SecretValue holds text")
        object.__setattr__(self, "_value", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SecretValue is read-only")

    def reveal(self) -> str:
        """The plaintext."""
        return self._value

    def encode(self) -> bytes:
        """The plaintext as UTF-8."""
        return self._value.encode()

    def __repr__(self) -> str:
        return f"SecretValue({REDACTED!r})"

    def __str__(self) -> str:
        return REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretValue):
            return NotImplemented
        return hmac.compare_digest(self.encode(), other.encode())

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        raise TypeError("a SecretValue cannot be pickled")


# ------------------------------------------------------------------------------ the contract


class SecretStore(ABC):
    """Seals and opens secrets; implemented by a ``deskpool.secret_stores`` plugin.

    Sealed values are opaque bytes that record, readable without decrypting, the id of the key
    they are sealed under (:meth:`key_id_of`). A key id identifies a key (a fingerprint) and
    reveals nothing about it. Every method that opens or seals binds ``context``: a sealed value
    opens only with the context it was sealed with.

    Errors: :class:`SecretsUnavailable` when no key is configured for the operation,
    :class:`SecretKeyUnknown` when a value is under a key that is not configured,
    :class:`SecretDecryptionFailed` when a value is damaged or bound to another context,
    :class:`SecretTooLarge` above :data:`MAX_PLAINTEXT_BYTES`. None of them carries a key, a
    plaintext or a sealed value.
    """

    @property
    @abstractmethod
    def current_key_id(self) -> str | None:
        """The id of the key new values are sealed under, or ``None`` when none is configured."""

    @property
    @abstractmethod
    def previous_key_ids(self) -> tuple[str, ...]:
        """Ids of keys accepted for opening only (a rotation window)."""

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every configured key id, the current one first."""
        current = () if self.current_key_id is None else (self.current_key_id,)
        return current + tuple(k for k in self.previous_key_ids if k not in current)

    @abstractmethod
    def encrypt(self, plaintext: bytes, context: SecretContext) -> bytes:
        """Seal ``plaintext`` for ``context`` under the current key."""

    @abstractmethod
    def decrypt(self, sealed: bytes, context: SecretContext) -> bytes:
        """Open a value sealed for ``context`` under any configured key."""

    @abstractmethod
    def rewrap(self, sealed: bytes, context: SecretContext) -> bytes:
        """Return ``sealed`` under the current key (unchanged if it already is)."""

    @abstractmethod
    def key_id_of(self, sealed: bytes) -> str:
        """The id of the key ``sealed`` is under, read without decrypting.

        :raises SecretDecryptionFailed: ``sealed`` is not a value this store sealed.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(current_key_id={self.current_key_id!r})"


#: What ``deskpool_register_secret_stores`` registers: builds the store from the configuration.
SecretStoreFactory: TypeAlias = Callable[["Config"], SecretStore]


def build_secret_store(plugins: PluginHost, config: Config) -> SecretStore:
    """The secret store chosen by ``SECRET_STORE``, built from the configuration.

    :raises StartupError: no store of that name is registered.
    """
    name = config["SECRET_STORE"]
    try:
        factory = plugins.secret_stores().get(name)
    except KeyError as error:
        raise StartupError(f"SECRET_STORE: {error.args[0]}") from None
    store = factory(config)
    if not isinstance(store, SecretStore):
        raise StartupError(f"secret store {name!r} did not build a deskpool.secrets.SecretStore")
    return store


# -------------------------------------------------------------------------------- repository


@dataclass(frozen=True)
class SecretMetadata:
    """What may be said about a stored secret: whether it is set and when it last changed.

    A re-wrap under a new master key does not change the credential, so it leaves
    ``changed_at`` alone.
    """

    is_set: bool
    changed_at: datetime | None = None


#: The row of one context (``$1``-``$3``: :attr:`SecretContext.columns`).
_OF_CONTEXT = "FROM sealed_secrets WHERE kind = $1 AND owner_id = $2 AND field = $3"

_UPSERT = """
INSERT INTO sealed_secrets AS s (kind, owner_id, field, key_id, sealed)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[])
ON CONFLICT (kind, owner_id, field) DO UPDATE
    SET key_id = EXCLUDED.key_id,
        sealed = EXCLUDED.sealed,
        version = s.version + 1,
        updated_at = now(),
        rewrapped_at = NULL
RETURNING updated_at
"""


def _plaintext_bytes(plaintext: SecretValue | str) -> bytes:
    value = plaintext.encode()
    if len(value) > MAX_PLAINTEXT_BYTES:
        raise SecretTooLarge(f"A credential is at most {MAX_PLAINTEXT_BYTES} bytes.")
    return value


async def put_secrets(
    db: Db,
    store: SecretStore,
    items: Iterable[tuple[SecretContext, SecretValue | str]],
) -> int:
    """Seal and store several secrets in one statement (each replaces its context's value).

    The contexts must be distinct.

    :returns: how many were written.
    :raises SecretsUnavailable: no current key is configured.
    """
    kinds: list[str] = []
    owners: list[str] = []
    fields: list[str] = []
    key_ids: list[str] = []
    sealed_values: list[bytes] = []
    for context, plaintext in items:
        sealed = store.encrypt(_plaintext_bytes(plaintext), context)
        kinds.append(context.kind)
        owners.append(context.owner_id)
        fields.append(context.field)
        key_ids.append(store.key_id_of(sealed))
        sealed_values.append(sealed)
    if not kinds:
        return 0
    rows = await db.fetch(_UPSERT, kinds, owners, fields, key_ids, sealed_values)
    return len(rows)


async def put_secret(
    db: Db, store: SecretStore, context: SecretContext, plaintext: SecretValue | str
) -> SecretMetadata:
    """Seal ``plaintext`` and store it as ``context``'s secret, replacing any previous one.

    :raises SecretsUnavailable: no current key is configured (a 503 problem, never a 500).
    """
    sealed = store.encrypt(_plaintext_bytes(plaintext), context)
    row = await db.fetchrow(
        _UPSERT,
        [context.kind],
        [context.owner_id],
        [context.field],
        [store.key_id_of(sealed)],
        [sealed],
    )
    return SecretMetadata(is_set=True, changed_at=row["updated_at"])


async def get_secret(db: Db, store: SecretStore, context: SecretContext) -> SecretValue | None:
    """Open ``context``'s secret; ``None`` when none is set.

    :raises SecretDecryptionFailed: the stored value does not open (see its subclasses).
    """
    row = await db.fetchrow(f"SELECT sealed {_OF_CONTEXT}", *context.columns)
    if row is None:
        return None
    plaintext = store.decrypt(bytes(row["sealed"]), context)
    try:
        return SecretValue(plaintext.decode())
    except UnicodeDecodeError:
        raise SecretDecryptionFailed(
            f"The stored credential {context} is not text.", context=context
        ) from None


async def secret_metadata(db: Db, context: SecretContext) -> SecretMetadata:
    """Whether ``context``'s secret is set, and when it last changed (nothing is decrypted)."""
    changed_at = await db.fetchval(f"SELECT updated_at {_OF_CONTEXT}", *context.columns)
    return SecretMetadata(is_set=changed_at is not None, changed_at=changed_at)


async def secrets_metadata_of(db: Db, kind: str, owner_id: str) -> dict[str, SecretMetadata]:
    """The metadata of every secret one record owns, by field."""
    rows = await db.fetch(
        "SELECT field, updated_at FROM sealed_secrets WHERE kind = $1 AND owner_id = $2",
        kind,
        owner_id,
    )
    return {row["field"]: SecretMetadata(True, row["updated_at"]) for row in rows}


async def delete_secret(db: Db, context: SecretContext) -> bool:
    """Remove ``context``'s secret; ``False`` when none was set."""
    deleted = await db.fetchval(f"DELETE {_OF_CONTEXT} RETURNING 1", *context.columns)
    return deleted is not None


async def delete_secrets_of(db: Db, kind: str, owner_id: str) -> int:
    """Remove every secret of one record (when the record itself is deleted)."""
    rows = await db.fetch(
        "DELETE FROM sealed_secrets WHERE kind = $1 AND owner_id = $2 RETURNING 1", kind, owner_id
    )
    return len(rows)


@dataclass(frozen=True)
class OwnedSecret:
    """The one sealed field each record of a kind may have (a pool's domain-join password).

    A store names it once (``OwnedSecret("pool.domain_join", "password")``) and reaches the
    secret of a record by the record's id, without building contexts itself.
    """

    kind: str
    field: str

    def context(self, owner_id: str | uuid.UUID) -> SecretContext:
        """The context the record's secret is sealed for."""
        return SecretContext.of(self.kind, owner_id, self.field)

    def metadata_join(self, owner_id_sql: str, alias: str) -> str:
        """A ``LEFT JOIN`` of the record's row in ``sealed_secrets`` as ``alias``.

        Select ``{alias}.updated_at`` to say whether the secret is set and when it changed.

        :param owner_id_sql: the SQL of the record's id as text (``p.id::text``).
        """
        return (
            f"LEFT JOIN sealed_secrets AS {alias} ON {alias}.kind = '{self.kind}'"
            f" AND {alias}.field = '{self.field}' AND {alias}.owner_id = {owner_id_sql}"
        )

    async def put(
        self,
        db: Db,
        store: SecretStore,
        owner_id: str | uuid.UUID,
        plaintext: SecretValue | str,
    ) -> SecretMetadata:
        """Seal and store the record's secret, replacing any (see :func:`put_secret`)."""
        return await put_secret(db, store, self.context(owner_id), plaintext)

    async def get(
        self, db: Db, store: SecretStore, owner_id: str | uuid.UUID
    ) -> SecretValue | None:
        """Open the record's secret; ``None`` when none is set (see :func:`get_secret`)."""
        return await get_secret(db, store, self.context(owner_id))

    async def metadata(self, db: Db, owner_id: str | uuid.UUID) -> SecretMetadata:
        """Whether the record's secret is set, and when it last changed."""
        return await secret_metadata(db, self.context(owner_id))

    async def delete(self, db: Db, owner_id: str | uuid.UUID) -> int:
        """Remove every secret of this kind the record has (when it is deleted, or cleared)."""
        return await delete_secrets_of(db, self.kind, str(owner_id))
