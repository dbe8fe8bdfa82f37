"""SQL of the cluster aggregate: connection records and their sealed credentials.

A cluster record (table ``clusters``) holds everything needed to reach a cluster except its
credentials. Those are one JSON document of strings (``{"token_id": ..., "token_secret": ...}``,
whatever the driver asks for) sealed by the secret store into ``sealed_secrets`` under
:func:`credentials_context`; what is read back with a record is only
:class:`~deskpool.secrets.SecretMetadata` (set or not, and when it last changed). Writes take a
connection, so the API writes a record, its credentials and its audit event in one transaction.

The values of the options a driver declares secret (``ConnectionField.sealed`` and
``sealed_keys``, driver contract 0.4) are kept the same way: one JSON document of those values
by JSON pointer into the options (``{"/required_token": ..., "/desktop/password": ...}``),
sealed under :func:`secret_options_context`; the ``options`` column holds the rest.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from deskpool.db.rows import Db, fetch_record, lock_clause
from deskpool.errors import Conflict
from deskpool.secrets import (
    OwnedSecret,
    SecretContext,
    SecretDecryptionFailed,
    SecretMetadata,
    SecretStore,
    SecretValue,
)

#: A cluster's credentials document, sealed under the cluster's id.
CREDENTIALS = OwnedSecret("cluster.credentials", "values")
#: The secret-store kind of a cluster's credentials (the owner is the cluster's id).
CREDENTIALS_KIND = CREDENTIALS.kind
#: The field the credentials document is sealed under.
CREDENTIALS_FIELD = CREDENTIALS.field
#: The secret values of a cluster's options, by JSON pointer, sealed under the cluster's id.
SECRET_OPTIONS = OwnedSecret("cluster.secret_options", "values")


class ClusterNameTaken(Conflict):
    """Another cluster already has this name (names are compared without case)."""

    code = "cluster_name_taken"
    title = "A cluster with this name exists"


def credentials_context(cluster_id: uuid.UUID | str) -> SecretContext:
    """The secret context a cluster's credentials are sealed for."""
    return CREDENTIALS.context(cluster_id)


def secret_options_context(cluster_id: uuid.UUID | str) -> SecretContext:
    """The secret context the secret values of a cluster's options are sealed for."""
    return SECRET_OPTIONS.context(cluster_id)


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach a cluster, credentials aside (what a driver's connection is built from).

    :param endpoint: the cluster's API address, in the form its driver documents.
    :param tls_verify: verify the server certificate.
    :param ca_certificate: PEM text of the CA to trust instead of the system's.
    :param fingerprint: the pinned SHA-256 fingerprint (``AB:CD:...``), if any.
    :param options: driver-specific settings (without the values its driver declares secret,
        which are sealed apart; see :func:`load_secret_options`).
    """

    endpoint: str
    tls_verify: bool = True
    ca_certificate: str | None = None
    fingerprint: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


#: What a record without secret option values says about them.
NOT_SET = SecretMetadata(is_set=False)


@dataclass(frozen=True)
class ClusterRecord:
    """A stored cluster connection, with what may be said about its credentials."""

    id: uuid.UUID
    name: str
    driver: str
    settings: ConnectionSettings
    credentials: SecretMetadata
    created_at: datetime
    updated_at: datetime
    last_check_at: datetime | None = None
    last_check_ok: bool | None = None
    last_check_error: str | None = None
    secret_options: SecretMetadata = NOT_SET

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ClusterRecord:
        """Read a row of :data:`_SELECT` (the record joined with its credentials' metadata)."""
        options = row["options"]
        changed_at = row["credentials_changed_at"]
        return cls(
            id=row["id"],
            name=row["name"],
            driver=row["driver"],
            settings=ConnectionSettings(
                endpoint=row["endpoint"],
                tls_verify=row["tls_verify"],
                ca_certificate=row["ca_certificate"],
                fingerprint=row["fingerprint"],
                options=json.loads(options) if isinstance(options, str) else dict(options),
            ),
            credentials=SecretMetadata(is_set=changed_at is not None, changed_at=changed_at),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_check_at=row["last_check_at"],
            last_check_ok=row["last_check_ok"],
            last_check_error=row["last_check_error"],
            secret_options=SecretMetadata(
                is_set=row["secret_options_changed_at"] is not None,
                changed_at=row["secret_options_changed_at"],
            ),
        )


# The metadata of the sealed credentials comes with each record (one query for a whole page);
# nothing sealed is read here.
_SELECT = f"""
SELECT c.*, s.updated_at AS credentials_changed_at, o.updated_at AS secret_options_changed_at
  FROM clusters AS c
  {CREDENTIALS.metadata_join("c.id::text", "s")}
  {SECRET_OPTIONS.metadata_join("c.id::text", "o")}
"""


def _columns(settings: ConnectionSettings) -> tuple[Any, ...]:
    """The settings columns' values: endpoint, TLS verify, CA, fingerprint, options."""
    return (
        settings.endpoint,
        settings.tls_verify,
        settings.ca_certificate,
        settings.fingerprint,
        json.dumps(dict(settings.options)),
    )


async def insert_cluster(
    connection: asyncpg.Connection,
    *,
    cluster_id: uuid.UUID,
    name: str,
    driver: str,
    settings: ConnectionSettings,
) -> None:
    """Insert a cluster record (its credentials are stored with :func:`store_credentials`).

    :raises ClusterNameTaken: the name is in use.
    """
    try:
        await connection.execute(
            """
            INSERT INTO clusters (id, name, driver, endpoint, tls_verify, ca_certificate,
                                  fingerprint, options)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
            """,
            cluster_id,
            name,
            driver,
            *_columns(settings),
        )
    except asyncpg.UniqueViolationError:
        raise ClusterNameTaken(f"A cluster named {name!r} exists.") from None


async def get_cluster(
    db: Db, cluster_id: uuid.UUID, *, for_update: bool = False
) -> ClusterRecord | None:
    """The cluster ``cluster_id``, or ``None``; ``for_update`` locks its row."""
    query = f"{_SELECT} WHERE c.id = $1{lock_clause(for_update, 'c')}"
    return await fetch_record(db, ClusterRecord.from_row, query, cluster_id)


async def list_clusters(
    db: Db,
    *,
    limit: int,
    after_name: str | None = None,
    driver: str | None = None,
) -> list[ClusterRecord]:
    """Up to ``limit`` clusters in name order, after ``after_name``, of ``driver`` if given."""
    rows = await db.fetch(
        f"""{_SELECT}
        WHERE ($1::text IS NULL OR c.name > $1) AND ($2::text IS NULL OR c.driver = $2)
        ORDER BY c.name
        LIMIT $3""",
        after_name,
        driver,
        limit,
    )
    return [ClusterRecord.from_row(row) for row in rows]


async def cluster_ids(db: Db) -> list[uuid.UUID]:
    """The id of every cluster."""
    return [row["id"] for row in await db.fetch("SELECT id FROM clusters ORDER BY id")]


async def clusters_by_driver(db: Db) -> dict[str, int]:
    """How many clusters each driver serves."""
    rows = await db.fetch("SELECT driver, count(*) AS n FROM clusters GROUP BY driver")
    return {row["driver"]: int(row["n"]) for row in rows}


async def update_cluster(
    connection: asyncpg.Connection,
    cluster_id: uuid.UUID,
    *,
    name: str,
    settings: ConnectionSettings,
) -> None:
    """Replace a cluster's name and settings; ``updated_at`` becomes now.

    :raises ClusterNameTaken: the name is in use by another cluster.
    """
    try:
        await connection.execute(
            """
            UPDATE clusters
               SET name = $2, endpoint = $3, tls_verify = $4, ca_certificate = $5,
                   fingerprint = $6, options = $7::jsonb, updated_at = now()
             WHERE id = $1
            """,
            cluster_id,
            name,
            *_columns(settings),
        )
    except asyncpg.UniqueViolationError:
        raise ClusterNameTaken(f"A cluster named {name!r} exists.") from None


async def delete_cluster(connection: asyncpg.Connection, cluster_id: uuid.UUID) -> bool:
    """Delete a cluster and its credentials; ``False`` when it did not exist."""
    deleted = await connection.fetchval(
        "DELETE FROM clusters WHERE id = $1 RETURNING true", cluster_id
    )
    await CREDENTIALS.delete(connection, cluster_id)
    await SECRET_OPTIONS.delete(connection, cluster_id)
    return bool(deleted)


async def record_check(
    db: Db,
    cluster_id: uuid.UUID,
    *,
    ok: bool,
    error: str | None,
) -> datetime | None:
    """Record the outcome of a connection check; the check's time, or ``None`` if it is gone."""
    checked_at: datetime | None = await db.fetchval(
        """
        UPDATE clusters SET last_check_at = now(), last_check_ok = $2, last_check_error = $3
         WHERE id = $1
        RETURNING last_check_at
        """,
        cluster_id,
        ok,
        error,
    )
    return checked_at


async def record_seen(
    db: Db, cluster_id: uuid.UUID, *, ok: bool, error: str | None, every: timedelta
) -> bool:
    """Record what a listing of the cluster's VMs found as its check; whether it was written.

    Written when the outcome changed, or the last check is older than ``every``: a
    reconciliation pass lists each cluster every few seconds, its check need not be written as
    often.
    """
    written = await db.fetchval(
        """
        UPDATE clusters SET last_check_at = now(), last_check_ok = $2, last_check_error = $3
         WHERE id = $1
           AND (last_check_at IS NULL OR last_check_at < now() - $4::interval
                OR last_check_ok IS DISTINCT FROM $2 OR last_check_error IS DISTINCT FROM $3)
        RETURNING true
        """,
        cluster_id,
        ok,
        error,
        every,
    )
    return bool(written)


async def pools_using_cluster(db: Db, cluster_id: uuid.UUID) -> int:
    """How many desktop pools provision on ``cluster_id`` (a cluster in use is not deleted)."""
    count: int = await db.fetchval("SELECT count(*) FROM pools WHERE cluster_id = $1", cluster_id)
    return count


# ------------------------------------------------------------------------------ credentials


async def store_credentials(
    connection: asyncpg.Connection,
    store: SecretStore,
    cluster_id: uuid.UUID,
    credentials: Mapping[str, SecretValue | str],
) -> SecretMetadata:
    """Seal ``credentials`` as the cluster's, replacing what it had.

    :raises SecretsUnavailable: no master key is configured (a 503 problem).
    """
    document = json.dumps(
        {
            key: value.reveal() if isinstance(value, SecretValue) else value
            for key, value in credentials.items()
        },
        sort_keys=True,
    )
    return await CREDENTIALS.put(connection, store, cluster_id, SecretValue(document))


async def delete_credentials(connection: asyncpg.Connection, cluster_id: uuid.UUID) -> None:
    """Remove the cluster's credentials (it then connects without any)."""
    await CREDENTIALS.delete(connection, cluster_id)


async def load_credentials(db: Db, store: SecretStore, cluster_id: uuid.UUID) -> dict[str, str]:
    """Open the cluster's credentials; ``{}`` when none are stored.

    The plaintexts returned are for building a driver connection (whose ``repr`` redacts them)
    and nothing else.

    :raises SecretDecryptionFailed: the sealed document does not open or is not a credentials
        document.
    """
    context = credentials_context(cluster_id)
    sealed = await CREDENTIALS.get(db, store, cluster_id)
    if sealed is None:
        return {}
    try:
        document = json.loads(sealed.reveal())
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in document.items()
    ):
        raise SecretDecryptionFailed(
            f"The stored credential {context} is not a credentials document.", context=context
        )
    return document


# --------------------------------------------------------------------------- secret options


async def store_secret_options(
    connection: asyncpg.Connection,
    store: SecretStore,
    cluster_id: uuid.UUID,
    values: Mapping[str, Any],
) -> None:
    """Seal ``values`` (JSON pointer -> value) as the cluster's secret options; none removes them.

    :raises SecretsUnavailable: values are given and no master key is configured (a 503).
    """
    if not values:
        await SECRET_OPTIONS.delete(connection, cluster_id)
        return
    document = json.dumps(dict(values), sort_keys=True)
    await SECRET_OPTIONS.put(connection, store, cluster_id, SecretValue(document))


async def load_secret_options(db: Db, store: SecretStore, cluster_id: uuid.UUID) -> dict[str, Any]:
    """Open the cluster's secret option values, by JSON pointer; ``{}`` when none are stored.

    :raises SecretDecryptionFailed: the sealed document does not open or is not such a document.
    """
    context = secret_options_context(cluster_id)
    sealed = await SECRET_OPTIONS.get(db, store, cluster_id)
    if sealed is None:
        return {}
    try:
        document = json.loads(sealed.reveal())
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(
        isinstance(key, str) and key.startswith("/") for key in document
    ):
        raise SecretDecryptionFailed(
            f"The stored secret {context} is not a document of secret options.", context=context
        )
    return document
