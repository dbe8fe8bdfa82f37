"""Claiming from the snapshot in Redis, atomically, and journaling each act.

A desktop is claimed by one Lua script (:data:`CLAIM`), which Redis runs alone: it takes a
ready desktop of the pool no one holds (or the one the user holds there), counts it against
the license's sessions (a desktop that already counts is never refused), records the holder
and appends the act to the journal, all or nothing. So no desktop goes to two users, a user
holds one desktop per pool, and the license's limit holds, across every api process.

Tokens issued from the snapshot live in Redis for their lifetime and are taken once
(``GETDEL``); every act that follows (the session's start, connection, first frame, end) is
appended to the same journal (:func:`journal`).

Openings through the database take a desktop out of the ready desktops (:func:`withhold`,
:func:`note_handed_out`); a refresh's write reads what they did at its ``EXEC``
(:func:`install_holders_and_ready`), so neither undoes the other.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as redis
from redis.typing import EncodableT, FieldT

from deskpool.events import AuditEvent
from deskpool.outage_brokering.model import (
    TAKEN_FOR_MS,
    ActKind,
    Keys,
    act_fields,
    audit_fields,
    held_key,
    text_of,
)

#: KEYS: ready set, holders, held, counted, license, taken, journal, acts, epoch, refreshed
#: epoch, revoked. ARGV: user, pool, now (ms), desktop wanted (empty: any), and the act's fields
#: (pairs). Answers ``{outcome, desktop, entry id}``; outcomes: ``allocate``, ``reconnect``,
#: ``stale`` (access changed since the snapshot), ``none``, ``not_held``, ``license``.
CLAIM = """
if redis.call('GET', KEYS[9]) ~= redis.call('GET', KEYS[10]) then return {'stale'} end
local user, pool, now, wanted = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if redis.call('HEXISTS', KEYS[11], user) == 1 then return {'stale'} end
local heldkey = user .. '|' .. pool
local desktop = redis.call('HGET', KEYS[3], heldkey)
local kind = 'reconnect'
if wanted ~= '' then
  if redis.call('HGET', KEYS[2], wanted) ~= user then return {'not_held'} end
  desktop = wanted
elseif not desktop then
  kind = 'allocate'
  while true do
    desktop = redis.call('SPOP', KEYS[1])
    if not desktop then return {'none'} end
    local taken = tonumber(redis.call('HGET', KEYS[6], desktop) or '0')
    if taken < now and redis.call('HEXISTS', KEYS[2], desktop) == 0 then break end
  end
end
if redis.call('SISMEMBER', KEYS[4], desktop) == 0 then
  local limit = redis.call('HGET', KEYS[5], 'limit')
  if limit and limit ~= '' and redis.call('SCARD', KEYS[4]) >= tonumber(limit) then
    if kind == 'allocate' then redis.call('SADD', KEYS[1], desktop) end
    return {'license', limit}
  end
  redis.call('SADD', KEYS[4], desktop)
end
if kind == 'allocate' then
  redis.call('HSET', KEYS[2], desktop, user)
  redis.call('HSET', KEYS[3], heldkey, desktop)
end
redis.call('INCR', KEYS[8])
local fields = {'kind', kind, 'desktop_id', desktop}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[7], '*', unpack(fields))
return {kind, desktop, id}
"""


def now_ms() -> int:
    """Now, in milliseconds since the epoch (what the snapshot's scripts compare)."""
    return int(datetime.now(UTC).timestamp() * 1000)


@dataclass(frozen=True)
class Claim:
    """What :func:`claim` answered: the outcome, the desktop and the journal entry."""

    outcome: str
    desktop_id: uuid.UUID | None = None
    entry_id: str | None = None
    #: For ``license``: the limit reached.
    limit: int | None = None


async def claim(
    kv: redis.Redis,
    keys: Keys,
    *,
    user_id: str,
    pool_id: uuid.UUID,
    logon_id: uuid.UUID,
    desktop_id: uuid.UUID | None = None,
    at: datetime | None = None,
) -> Claim:
    """Claim a desktop of ``pool_id`` for ``user_id`` (``desktop_id``: the one he holds)."""
    when = at or datetime.now(UTC)
    fields = act_fields(ActKind.ALLOCATE, when, user_id=user_id, pool_id=pool_id, logon_id=logon_id)
    fields.pop("kind")
    pairs = [item for pair in fields.items() for item in pair]
    answer = await kv.eval(
        CLAIM,
        11,
        keys.ready(pool_id),
        keys.holders,
        keys.held,
        keys.counted,
        keys.license,
        keys.taken,
        keys.journal,
        keys.acts,
        keys.epoch,
        keys.refreshed_epoch,
        keys.revoked,
        user_id,
        str(pool_id),
        int(when.timestamp() * 1000),
        "" if desktop_id is None else str(desktop_id),
        *pairs,
    )
    outcome = text_of(answer[0])
    if outcome in ("allocate", "reconnect"):
        return Claim(outcome, uuid.UUID(text_of(answer[1])), text_of(answer[2]))
    if outcome == "license":
        return Claim(outcome, limit=int(text_of(answer[1])))
    return Claim(outcome)


async def journal(kv: redis.Redis, keys: Keys, kind: ActKind, **fields: object) -> str:
    """Append an act done now to the journal; its entry id."""
    return await _append(kv, keys, act_fields(kind, datetime.now(UTC), **fields))


async def journal_audit(kv: redis.Redis, keys: Keys, event: AuditEvent) -> str:
    """Append an audit event that could not be recorded to the journal."""
    return await _append(
        kv, keys, act_fields(ActKind.AUDIT, event.occurred_at, **audit_fields(event))
    )


async def _append(kv: redis.Redis, keys: Keys, fields: Mapping[str, str]) -> str:
    """``XADD`` an act's fields to the journal; the entry id."""
    entry: dict[FieldT, EncodableT] = dict(fields.items())
    return text_of(await kv.xadd(keys.journal, entry))


async def pending(kv: redis.Redis, keys: Keys) -> int:
    """How many acts are journaled and not yet written to the database."""
    return int(await kv.xlen(keys.journal))


async def put_token(
    kv: redis.Redis, keys: Keys, key: bytes, record: dict[str, Any], ttl: float
) -> None:
    """Keep a token issued from the snapshot for ``ttl`` seconds (by its key)."""
    await kv.set(keys.token(key), json.dumps(record), px=max(1, int(ttl * 1000)))


async def take_token(kv: redis.Redis, keys: Keys, key: bytes) -> dict[str, Any] | None:
    """The record of a token issued from the snapshot, taken once (``None``: not one)."""
    raw = await kv.getdel(keys.token(key))
    if raw is None:
        return None
    record: dict[str, Any] = json.loads(raw)
    return record


#: A desktop leaves its pool's ready desktops for a while (KEYS: taken, the pool's ready;
#: ARGV: the desktop, until when in ms); with a holder (KEYS: holders, held, counted; ARGV:
#: the user, his held key), it is noted as his. One command where a MULTI of two or five
#: was five or eight replies to parse (at 9 a.m. two of them for every opening).
_TAKE_OUT = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SREM', KEYS[2], ARGV[1])
if #KEYS > 2 then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  redis.call('HSET', KEYS[4], ARGV[4], ARGV[1])
  redis.call('SADD', KEYS[5], ARGV[1])
end
return 1
"""


async def withhold(kv: redis.Redis, keys: Keys, desktop_id: uuid.UUID, pool_id: uuid.UUID) -> None:
    """Take a desktop out of its pool's ready desktops, for a refresh that read before too."""
    until = now_ms() + TAKEN_FOR_MS
    await kv.eval(_TAKE_OUT, 2, keys.taken, keys.ready(pool_id), str(desktop_id), until)


async def note_handed_out(
    kv: redis.Redis, keys: Keys, *, desktop_id: uuid.UUID, pool_id: uuid.UUID, user_id: str
) -> None:
    """A desktop was handed out through the database: the snapshot follows at once.

    It leaves the pool's ready desktops, and stays out of them for
    :data:`~deskpool.outage_brokering.model.TAKEN_FOR_MS` whatever a refresh that read the
    database before the change writes.
    """
    until = now_ms() + TAKEN_FOR_MS
    await kv.eval(
        _TAKE_OUT,
        5,
        keys.taken,
        keys.ready(pool_id),
        keys.holders,
        keys.held,
        keys.counted,
        str(desktop_id),
        until,
        user_id,
        held_key(user_id, pool_id),
    )


#: Queued last in a refresh's transaction, so it runs at the ``EXEC`` and sees what openings
#: did while the refresh read the database and built its write: a desktop withheld or handed
#: out meanwhile stays out of the ready desktops, and the holder, held key and count a hand-out
#: noted meanwhile are kept over what the database showed before it. (Watching the withheld
#: desktops instead gave the refresh up whenever one was withheld: at 9 a.m. every half
#: second for as long as the storm lasted, each time after reading the whole database.)
#: KEYS: taken, holders, held, counted, then the ready desktops of the enabled pools. ARGV:
#: now (ms); since when a hand-out counts as meanwhile (ms); :data:`TAKEN_FOR_MS`; the number
#: of holders read; each holder's desktop, user and held key; then pairs (the ready
#: desktops' index in KEYS, a desktop ready in the database). Answers the hand-outs kept.
_INSTALL_HOLDERS_AND_READY = """
local now, since, taken_for = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out, meanwhile = {}, {}
local taken = redis.call('HGETALL', KEYS[1])
for i = 1, #taken, 2 do
  local until_ms = tonumber(taken[i + 1])
  if until_ms < now then
    redis.call('HDEL', KEYS[1], taken[i])
  else
    out[taken[i]] = true
    if until_ms - taken_for >= since then meanwhile[taken[i]] = true end
  end
end
local kept = {}
local held = redis.call('HGETALL', KEYS[3])
for i = 1, #held, 2 do
  local desktop = held[i + 1]
  if meanwhile[desktop] then
    local user = redis.call('HGET', KEYS[2], desktop)
    if user then kept[#kept + 1] = {desktop, user, held[i]} end
  end
end
redis.call('DEL', KEYS[2], KEYS[3])
local i = 5
for _ = 1, tonumber(ARGV[4]) do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('HSET', KEYS[3], ARGV[i + 2], ARGV[i])
  i = i + 3
end
for _, hand_out in ipairs(kept) do
  redis.call('HSET', KEYS[2], hand_out[1], hand_out[2])
  redis.call('HSET', KEYS[3], hand_out[3], hand_out[1])
  redis.call('SADD', KEYS[4], hand_out[1])
end
while i <= #ARGV do
  if not out[ARGV[i + 1]] then redis.call('SADD', KEYS[tonumber(ARGV[i])], ARGV[i + 1]) end
  i = i + 2
end
return #kept
"""

#: A hand-out noted up to this long before a refresh began reading counts as meanwhile: the
#: api process that noted it and the worker may not agree on the time to the millisecond.
CLOCKS_DIFFER_MS = 5_000


def install_holders_and_ready(
    pipe: redis.client.Pipeline,
    keys: Keys,
    *,
    read_from_ms: int,
    holders: Collection[tuple[str, str, str]],
    ready: Mapping[uuid.UUID, Collection[str]],
) -> None:
    """Queue, last in a refresh's transaction, its holders and ready desktops.

    :param read_from_ms: when the refresh began reading the database (ms since the epoch).
    :param holders: each desktop held in the database, its user and held key.
    :param ready: the desktops ready in the database, by enabled pool.
    """
    ready_keys = [keys.ready(pool_id) for pool_id in ready]
    arguments: list[EncodableT] = [
        now_ms(),
        read_from_ms - CLOCKS_DIFFER_MS,
        TAKEN_FOR_MS,
        len(holders),
    ]
    for holder in holders:
        arguments.extend(holder)
    for index, desktops in enumerate(ready.values(), 5):
        for desktop in desktops:
            arguments.extend((index, desktop))
    pipe.eval(
        _INSTALL_HOLDERS_AND_READY,
        4 + len(ready_keys),
        keys.taken,
        keys.holders,
        keys.held,
        keys.counted,
        *ready_keys,
        *arguments,
    )
