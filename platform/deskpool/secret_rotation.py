"""Master-key rotation of the sealed secrets: which key seals what, and the re-wrap.

:func:`count_by_key_id` counts the sealed values under each key id without decrypting any;
:class:`KeyUsage` compares the counts with the keys the store has configured (``deskpool
secrets status`` and the secret store's startup rules). :func:`rewrap_batch` and
:func:`rewrap_all` (``deskpool secrets rewrap``) re-seal the values under the current key,
comparing and setting each row on its version, so a re-wrap is safe while the api and the
worker are serving and an interrupted run is resumed by the next. The secrets themselves, and
the store's contract, are :mod:`deskpool.secrets`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from deskpool.db.rows import Db
from deskpool.secrets import (
    SecretContext,
    SecretDecryptionFailed,
    SecretStore,
    SecretsUnavailable,
)

log = logging.getLogger(__name__)


async def count_by_key_id(db: Db) -> dict[str, int]:
    """How many sealed values are under each key id (nothing is decrypted)."""
    rows = await db.fetch(
        "SELECT key_id, count(*) AS n FROM sealed_secrets GROUP BY key_id ORDER BY key_id"
    )
    return {row["key_id"]: int(row["n"]) for row in rows}


@dataclass(frozen=True)
class KeyUsage:
    """Sealed values per key id, compared with the keys a store has configured."""

    counts: Mapping[str, int]
    current_key_id: str | None
    previous_key_ids: tuple[str, ...]

    @classmethod
    def of(cls, counts: Mapping[str, int], store: SecretStore) -> KeyUsage:
        """Compare ``counts`` with ``store``'s keys."""
        current = store.current_key_id
        previous = tuple(k for k in store.previous_key_ids if k != current)
        return cls(dict(counts), current, previous)

    @property
    def total(self) -> int:
        """Every sealed value."""
        return sum(self.counts.values())

    @property
    def under_current(self) -> int:
        """Values under the current key."""
        return self.counts.get(self.current_key_id or "", 0)

    @property
    def under_previous(self) -> int:
        """Values under a previous key (to be re-wrapped)."""
        return sum(self.counts.get(key_id, 0) for key_id in self.previous_key_ids)

    @property
    def unknown(self) -> dict[str, int]:
        """Values under key ids no configured key matches, by key id."""
        known = {self.current_key_id, *self.previous_key_ids}
        return {k: n for k, n in self.counts.items() if k not in known}

    def role(self, key_id: str) -> str:
        """``current``, ``previous`` or ``unknown``."""
        if key_id == self.current_key_id:
            return "current"
        return "previous" if key_id in self.previous_key_ids else "unknown"


_NIL_ID = uuid.UUID(int=0)

_SELECT_BATCH = """
SELECT id, kind, owner_id, field, sealed, version
FROM sealed_secrets
WHERE key_id <> $1 AND id > $2
ORDER BY id
LIMIT $3
"""

_COMPARE_AND_SET = """
UPDATE sealed_secrets AS s
SET sealed = u.sealed, key_id = u.key_id, version = s.version + 1, rewrapped_at = now()
FROM unnest($1::uuid[], $2::bytea[], $3::text[], $4::bigint[]) AS u(id, sealed, key_id, version)
WHERE s.id = u.id AND s.version = u.version
RETURNING s.id
"""


@dataclass(frozen=True)
class RewrapBatch:
    """The outcome of one batch of :func:`rewrap_batch`.

    :param examined: rows read that were not under the current key.
    :param rewrapped: rows now under the current key.
    :param changed_meanwhile: rows written by someone else between read and write (left as
        they are: whoever wrote them sealed them afresh).
    :param failed: contexts whose value could not be opened (unknown key, damaged).
    :param last_id: the cursor to continue after; ``None`` when there was nothing left.
    """

    examined: int
    rewrapped: int
    changed_meanwhile: int
    failed: tuple[SecretContext, ...]
    last_id: uuid.UUID | None


async def rewrap_batch(
    db: Db, store: SecretStore, *, batch_size: int, after_id: uuid.UUID | None = None
) -> RewrapBatch:
    """Re-wrap up to ``batch_size`` values not under the current key, after ``after_id``.

    Each row is compared and set on its ``version``: a row changed meanwhile (by the api
    storing a new credential, or another re-wrap) is left alone. Rows are visited in id order,
    so a caller passing back ``last_id`` visits each row once per run; a run interrupted at any
    point leaves every row either re-wrapped or as it was, and the next run picks up the rest.

    :raises SecretsUnavailable: no current key is configured.
    """
    current = store.current_key_id
    if current is None:
        raise SecretsUnavailable("No current master key is configured to re-wrap under.")
    rows = await db.fetch(_SELECT_BATCH, current, after_id or _NIL_ID, batch_size)
    if not rows:
        return RewrapBatch(0, 0, 0, (), None)
    ids: list[uuid.UUID] = []
    sealed_values: list[bytes] = []
    versions: list[int] = []
    failed: list[SecretContext] = []
    for row in rows:
        context = SecretContext(row["kind"], row["owner_id"], row["field"])
        try:
            sealed_values.append(store.rewrap(bytes(row["sealed"]), context))
        except SecretDecryptionFailed as error:
            log.warning(
                "cannot re-wrap the secret %s: %s",
                context,
                error.code,
                extra={"key_id": error.key_id or ""},
            )
            failed.append(context)
            continue
        ids.append(row["id"])
        versions.append(row["version"])
    updated = []
    if ids:
        updated = await db.fetch(
            _COMPARE_AND_SET, ids, sealed_values, [current] * len(ids), versions
        )
    return RewrapBatch(
        examined=len(rows),
        rewrapped=len(updated),
        changed_meanwhile=len(ids) - len(updated),
        failed=tuple(failed),
        last_id=rows[-1]["id"],
    )


@dataclass
class RewrapTotals:
    """What a whole :func:`rewrap_all` run did."""

    batches: int = 0
    rewrapped: int = 0
    changed_meanwhile: int = 0
    failed: list[SecretContext] = field(default_factory=list)


async def rewrap_all(
    db: Db,
    store: SecretStore,
    *,
    batch_size: int = 500,
    on_batch: Callable[[RewrapBatch, RewrapTotals], Awaitable[None] | None] | None = None,
) -> RewrapTotals:
    """Re-wrap every value not under the current key, one batch (one statement) at a time.

    :param on_batch: called after each committed batch with it and the running totals.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    totals = RewrapTotals()
    after: uuid.UUID | None = None
    while True:
        batch = await rewrap_batch(db, store, batch_size=batch_size, after_id=after)
        if batch.last_id is None:
            return totals
        totals.batches += 1
        totals.rewrapped += batch.rewrapped
        totals.changed_meanwhile += batch.changed_meanwhile
        totals.failed.extend(batch.failed)
        after = batch.last_id
        if on_batch is not None:
            result = on_batch(batch, totals)
            if result is not None:
                await result
