"""Claims on the outage snapshot, against the real Redis: one desktop per user, the license held.

The snapshot is written here as a refresh would leave it (a pool's ready desktops, the license's
limit, the snapshot fresh), then many claims run at once, as many api processes would.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from deskpool.outage_brokering import claims
from deskpool.outage_brokering.model import Act, ActKind, Keys
from deskpool.outage_brokering.snapshot import is_fresh, mark_access_changed

POOL = uuid.uuid4()


async def _snapshot(kv: Any, keys: Keys, desktops: list[str], limit: str = "") -> None:
    await kv.sadd(keys.ready(POOL), *desktops)
    await kv.hset(keys.license, "limit", limit)
    await kv.set(keys.epoch, 0)
    await kv.set(keys.refreshed_epoch, 0)


async def test_concurrent_claims_give_each_desktop_to_one_user_and_journal_each_once(
    runtime: Any,
) -> None:
    kv, keys = runtime.kv, Keys(runtime.config["KVSTORE_KEY_PREFIX"])
    desktops = [str(uuid.uuid4()) for _ in range(20)]
    await _snapshot(kv, keys, desktops)
    users = [str(uuid.uuid4()) for _ in range(40)]

    async def one(user: str) -> claims.Claim:
        return await claims.claim(kv, keys, user_id=user, pool_id=POOL, logon_id=uuid.uuid4())

    answers = await asyncio.gather(*(one(user) for user in users))
    taken = [answer.desktop_id for answer in answers if answer.outcome == "allocate"]
    assert len(taken) == 20
    assert {str(desktop) for desktop in taken} == set(desktops)
    assert (
        sorted(answer.outcome for answer in answers if answer.outcome != "allocate")
        == ["none"] * 20
    )
    entries = await kv.xrange(keys.journal)
    acts = [Act.of_entry(entry_id, fields) for entry_id, fields in entries]
    assert [act.kind for act in acts] == [ActKind.ALLOCATE] * 20
    assert sorted(act.fields["desktop_id"] for act in acts) == sorted(desktops)
    # A user who holds a desktop of the pool gets it again, counted once.
    holder = next(answer for answer in answers if answer.outcome == "allocate")
    user = users[answers.index(holder)]
    again = await one(user)
    assert (again.outcome, again.desktop_id) == ("reconnect", holder.desktop_id)


async def test_the_license_limit_holds_and_counted_desktops_are_never_refused(
    runtime: Any,
) -> None:
    kv, keys = runtime.kv, Keys(runtime.config["KVSTORE_KEY_PREFIX"])
    desktops = [str(uuid.uuid4()) for _ in range(5)]
    await _snapshot(kv, keys, desktops, limit="3")
    held = str(uuid.uuid4())
    await kv.sadd(keys.counted, held)
    holder = str(uuid.uuid4())
    await kv.hset(keys.holders, held, holder)
    answers = [
        await claims.claim(kv, keys, user_id=str(uuid.uuid4()), pool_id=POOL, logon_id=uuid.uuid4())
        for _ in range(4)
    ]
    assert [answer.outcome for answer in answers] == ["allocate", "allocate", "license", "license"]
    assert answers[2].limit == 3
    # The refused claims put their desktop back.
    assert await kv.scard(keys.ready(POOL)) == 3
    reconnect = await claims.claim(
        kv, keys, user_id=holder, pool_id=POOL, logon_id=uuid.uuid4(), desktop_id=uuid.UUID(held)
    )
    assert reconnect.outcome == "reconnect"
    stranger = await claims.claim(
        kv,
        keys,
        user_id=str(uuid.uuid4()),
        pool_id=POOL,
        logon_id=uuid.uuid4(),
        desktop_id=uuid.UUID(held),
    )
    assert stranger.outcome == "not_held"


async def test_nothing_is_claimed_from_a_stale_snapshot_or_a_desktop_taken_meanwhile(
    runtime: Any,
) -> None:
    kv, keys = runtime.kv, Keys(runtime.config["KVSTORE_KEY_PREFIX"])
    desktop = str(uuid.uuid4())
    await _snapshot(kv, keys, [desktop])
    await kv.incr(keys.epoch)
    stale = await claims.claim(kv, keys, user_id="u", pool_id=POOL, logon_id=uuid.uuid4())
    assert stale.outcome == "stale"
    await kv.set(keys.refreshed_epoch, 1)
    # Handed out through the database after the refresh read it: out of the ready desktops.
    await claims.note_handed_out(
        kv, keys, desktop_id=uuid.UUID(desktop), pool_id=POOL, user_id="someone"
    )
    await kv.sadd(keys.ready(POOL), desktop)  # as a refresh that read before would write it
    await kv.hdel(keys.holders, desktop)
    none = await claims.claim(kv, keys, user_id="u", pool_id=POOL, logon_id=uuid.uuid4())
    assert none.outcome == "none"
    assert await kv.xlen(keys.journal) == 0


async def test_a_user_whose_access_was_taken_is_refused_until_the_snapshot_is_read_again(
    runtime: Any,
) -> None:
    kv, keys = runtime.kv, Keys(runtime.config["KVSTORE_KEY_PREFIX"])
    await _snapshot(kv, keys, [str(uuid.uuid4()), str(uuid.uuid4())])
    revoked, other = uuid.uuid4(), uuid.uuid4()
    await mark_access_changed(runtime, [revoked])
    refused = await claims.claim(
        kv, keys, user_id=str(revoked), pool_id=POOL, logon_id=uuid.uuid4()
    )
    served = await claims.claim(kv, keys, user_id=str(other), pool_id=POOL, logon_id=uuid.uuid4())
    assert (refused.outcome, served.outcome) == ("stale", "allocate")
    assert not await is_fresh(kv, keys, str(revoked))
    assert await is_fresh(kv, keys, str(other))
