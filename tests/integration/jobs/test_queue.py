"""The queue's statements against the real PostgreSQL: claims, leases, fencing, retries."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from deskpool.jobs import queue
from deskpool.jobs.model import JOBS_CHANNEL, JobLease, JobState
from deskpool.jobs.queue_keyed import KeyedJob, enqueue_keyed_many

LEASE = timedelta(seconds=30)


async def claim(
    db: asyncpg.Connection, limit: int = 10, worker: str = "w1"
) -> list[queue.ClaimedJob]:
    return await queue.claim(db, worker=worker, kinds=["k"], limit=limit, lease=LEASE)


async def expire_leases(db: asyncpg.Connection) -> None:
    await db.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE state = 'running'"
    )


async def test_the_same_idempotency_key_gives_the_same_job(db: asyncpg.Connection) -> None:
    first = await queue.enqueue(db, "k", {"n": 1}, idempotency_key="clone:desktop-1")
    again = await queue.enqueue(db, "k", {"n": 2}, idempotency_key="clone:desktop-1")
    other = await queue.enqueue(db, "k", {"n": 3}, idempotency_key="clone:desktop-2")
    plain = [await queue.enqueue(db, "k") for _ in range(2)]
    assert again.id == first.id
    assert again.payload == {"n": 1}
    assert other.id != first.id
    assert plain[0].id != plain[1].id
    assert await db.fetchval("SELECT count(*) FROM jobs") == 4


async def test_keyed_jobs_enqueued_at_once_are_each_enqueued_as_one_by_one(
    db: asyncpg.Connection, migrated_database_url: str
) -> None:
    before = await queue.enqueue(db, "k", {"n": 0}, idempotency_key="a")
    assert await enqueue_keyed_many(db, "k", []) == []
    listener = await asyncpg.connect(migrated_database_url)
    woken = asyncio.Event()
    await listener.add_listener(JOBS_CHANNEL, lambda *_: woken.set())
    try:
        async with db.transaction():
            jobs = await enqueue_keyed_many(
                db,
                "k",
                [
                    KeyedJob("b", {"n": 1}, "desktops", "d1"),
                    KeyedJob("a", {"n": 2}),
                    KeyedJob("b", {"n": 3}),
                    KeyedJob("c", {"n": 4}),
                ],
            )
            await asyncio.sleep(0)
            assert not woken.is_set()
        await asyncio.wait_for(woken.wait(), 10)
    finally:
        await listener.close()
    b, a, again, c = jobs
    assert (a.id, again.id) == (before.id, b.id)  # a key taken, a key given twice: one job
    assert (a.payload, b.payload, c.payload) == ({"n": 0}, {"n": 1}, {"n": 4})
    assert (b.state, b.idempotency_key, b.resource_type, b.resource_id) == (
        JobState.QUEUED,
        "b",
        "desktops",
        "d1",
    )
    assert b.max_attempts == before.max_attempts
    assert b.priority == before.priority == 0
    repeated = await enqueue_keyed_many(db, "k", [KeyedJob(key, {}) for key in "cba"])
    assert [job.id for job in repeated] == [c.id, b.id, a.id]
    assert await db.fetchval("SELECT count(*) FROM jobs") == 3


async def test_concurrent_enqueues_of_one_key_make_one_job(
    db: asyncpg.Connection, migrated_database_url: str
) -> None:
    connections = [await asyncpg.connect(migrated_database_url) for _ in range(4)]
    try:
        jobs = await asyncio.gather(
            *(queue.enqueue(c, "k", idempotency_key="once") for c in connections)
        )
    finally:
        for connection in connections:
            await connection.close()
    assert len({job.id for job in jobs}) == 1


async def test_claims_take_due_jobs_by_priority_and_due_time(db: asyncpg.Connection) -> None:
    low = await queue.enqueue(db, "k", {"name": "low"})
    high = await queue.enqueue(db, "k", {"name": "high"}, priority=5)
    later = await queue.enqueue(db, "k", {"name": "later"}, delay=timedelta(hours=1))
    await queue.enqueue(db, "other", {"name": "other kind"})
    claimed = await claim(db)
    assert [job.id for job in claimed] in ([high.id, low.id], [low.id, high.id])
    by_id = {job.id: job for job in claimed}
    assert by_id[high.id].attempt == 1
    assert by_id[high.id].fence == 1
    assert later.id not in by_id
    row = await db.fetchrow(
        "SELECT state, worker, lease_expires_at > now() AS leased FROM jobs WHERE id = $1", low.id
    )
    assert row["state"] == "running"
    assert row["worker"] == "w1"
    assert row["leased"]
    assert await queue.next_due_in(db, ["k"]) == pytest.approx(3600, abs=5)
    # Priority decides the order of the claim itself.
    await db.execute("TRUNCATE jobs")
    for priority in (1, 3, 2):
        await queue.enqueue(db, "k", {"p": priority}, priority=priority)
    first = await claim(db, limit=1)
    assert first[0].payload == {"p": 3}


async def test_two_claims_in_flight_never_take_the_same_job(
    db: asyncpg.Connection, migrated_database_url: str
) -> None:
    for n in range(10):
        await queue.enqueue(db, "k", {"n": n})
    other = await asyncpg.connect(migrated_database_url)
    try:
        async with db.transaction(), other.transaction():
            mine = await claim(db, limit=6)
            theirs = await claim(other, limit=6, worker="w2")
    finally:
        await other.close()
    assert len(mine) == 6
    assert len(theirs) == 4
    assert not {job.id for job in mine} & {job.id for job in theirs}


async def test_only_the_current_fencing_token_completes_a_job(db: asyncpg.Connection) -> None:
    job = await queue.enqueue(db, "k")
    (first,) = await claim(db)
    await expire_leases(db)
    (reclaimed,) = await queue.reclaim_expired(db)
    assert reclaimed.state is JobState.QUEUED
    assert reclaimed.worker == "w1"
    (second,) = await claim(db, worker="w2")
    assert second.fence == first.fence + 1
    assert second.attempt == 2
    assert await queue.complete(db, [first.lease]) == set()
    assert await queue.fail(db, first.lease, "late", retry_after=timedelta(0)) is None
    assert await queue.heartbeat(db, [first.lease], LEASE) == set()
    assert await queue.complete(db, [second.lease]) == {second.lease}
    stored = await queue.get_job(db, job.id)
    assert stored is not None
    assert stored.state is JobState.SUCCEEDED
    assert stored.reclaims == 1
    assert stored.fence == second.fence
    assert stored.worker == "w2"
    assert stored.errors[0]["error"] == "lease expired without a heartbeat"
    assert stored.errors[0]["worker"] == "w1"


async def test_completions_are_accepted_in_batches(db: asyncpg.Connection) -> None:
    for _ in range(5):
        await queue.enqueue(db, "k")
    claimed = await claim(db)
    stale = JobLease(claimed[0].id, claimed[0].fence + 7)
    accepted = await queue.complete(db, [job.lease for job in claimed[1:]] + [stale])
    assert accepted == {job.lease for job in claimed[1:]}
    states = await db.fetch("SELECT state, count(*) FROM jobs GROUP BY state")
    assert {row["state"]: row["count"] for row in states} == {"succeeded": 4, "running": 1}


async def test_completions_ride_with_the_claim_that_fills_their_slots(
    db: asyncpg.Connection,
) -> None:
    for priority in (3, 2, 1, 0):
        await queue.enqueue(db, "k", priority=priority)
    first = await claim(db, limit=2)
    stale = JobLease(first[0].id, first[0].fence + 7)
    accepted, claimed = await queue.complete_and_claim(
        db, [first[1].lease, stale], worker="w2", kinds=["k"], limit=5, lease=LEASE
    )
    assert accepted == {first[1].lease}
    assert len(claimed) == 2
    assert all(job.attempt == 1 and job.fence == 1 for job in claimed)
    assert {job.id for job in claimed}.isdisjoint(job.id for job in first)
    states = await db.fetch("SELECT state, worker, count(*) FROM jobs GROUP BY state, worker")
    assert {(row["state"], row["worker"]): row["count"] for row in states} == {
        ("running", "w1"): 1,
        ("succeeded", "w1"): 1,
        ("running", "w2"): 2,
    }
    accepted, claimed = await queue.complete_and_claim(
        db, [job.lease for job in claimed], worker="w2", kinds=["k"], limit=5, lease=LEASE
    )
    assert (len(accepted), claimed) == (2, [])


async def test_heartbeats_extend_held_leases(db: asyncpg.Connection) -> None:
    await queue.enqueue(db, "k")
    (job,) = await claim(db)
    held = await queue.heartbeat(db, [job.lease], timedelta(hours=2))
    assert held == {job.lease}
    remaining = await db.fetchval(
        "SELECT extract(epoch FROM lease_expires_at - now()) FROM jobs WHERE id = $1", job.id
    )
    assert remaining > 3600


async def test_a_failure_retries_with_backoff_then_the_job_is_dead(db: asyncpg.Connection) -> None:
    job = await queue.enqueue(db, "k", max_attempts=2)
    (first,) = await claim(db)
    state = await queue.fail(db, first.lease, "boom 1", retry_after=timedelta(minutes=5))
    assert state is JobState.QUEUED
    assert await claim(db) == []  # not due before its backoff
    await db.execute("UPDATE jobs SET run_at = now()")
    (second,) = await claim(db)
    assert second.attempt == 2
    assert await queue.fail(db, second.lease, "boom 2", retry_after=None) is JobState.DEAD
    stored = await queue.get_job(db, job.id)
    assert stored is not None
    assert stored.state is JobState.DEAD
    assert stored.attempts == 2
    assert stored.last_error == "boom 2"
    assert [entry["error"] for entry in stored.errors] == ["boom 1", "boom 2"]
    assert [entry["attempt"] for entry in stored.errors] == [1, 2]
    assert stored.finished_at is not None


async def test_an_expired_lease_on_the_last_attempt_makes_the_job_dead(
    db: asyncpg.Connection,
) -> None:
    await queue.enqueue(db, "k", max_attempts=1)
    await claim(db)
    await expire_leases(db)
    (reclaimed,) = await queue.reclaim_expired(db)
    assert reclaimed.state is JobState.DEAD


async def test_released_jobs_are_due_at_once_and_the_attempt_is_not_counted(
    db: asyncpg.Connection, migrated_database_url: str
) -> None:
    await queue.enqueue(db, "k")
    (job,) = await claim(db)
    listener = await asyncpg.connect(migrated_database_url)
    woken = asyncio.Event()
    await listener.add_listener(JOBS_CHANNEL, lambda *_: woken.set())
    try:
        assert await queue.release(db, [job.lease]) == {job.lease}
        await asyncio.wait_for(woken.wait(), 10)
    finally:
        await listener.close()
    (again,) = await claim(db, worker="w2")
    assert again.attempt == 1
    assert again.fence == job.fence + 1


async def test_enqueueing_notifies_listeners_when_the_transaction_commits(
    db: asyncpg.Connection, migrated_database_url: str
) -> None:
    listener = await asyncpg.connect(migrated_database_url)
    woken = asyncio.Event()
    await listener.add_listener(JOBS_CHANNEL, lambda *_: woken.set())
    try:
        async with db.transaction():
            await queue.enqueue(db, "k")
            await asyncio.sleep(0)
            assert not woken.is_set()
        await asyncio.wait_for(woken.wait(), 10)
    finally:
        await listener.close()


async def test_hold_lease_fences_a_transaction(db: asyncpg.Connection) -> None:
    await queue.enqueue(db, "k")
    (job,) = await claim(db)
    with pytest.raises(RuntimeError):
        await queue.hold_lease(db, job.lease, LEASE)
    async with db.transaction():
        assert await queue.hold_lease(db, job.lease, LEASE)
    async with db.transaction():
        assert not await queue.hold_lease(db, JobLease(job.id, job.fence - 1), LEASE)


async def test_dead_jobs_can_be_retried_and_queued_ones_cancelled(db: asyncpg.Connection) -> None:
    dead = await queue.enqueue(db, "k", max_attempts=1)
    (claimed,) = await claim(db)
    await queue.fail(db, claimed.lease, "no", retry_after=None)
    queued = await queue.enqueue(db, "k", delay=timedelta(hours=1))
    assert await queue.cancel_queued(db, dead.id) is None
    assert await queue.retry_dead(db, queued.id) is None
    retried = await queue.retry_dead(db, dead.id)
    assert retried is not None
    assert retried.state is JobState.QUEUED
    assert retried.attempts == 0
    cancelled = await queue.cancel_queued(db, queued.id)
    assert cancelled is not None
    assert cancelled.state is JobState.CANCELLED
    (again,) = await claim(db)
    assert again.id == dead.id


async def test_lists_filter_by_state_kind_and_resource_newest_first(
    db: asyncpg.Connection,
) -> None:
    a = await queue.enqueue(db, "clone", resource_type="desktops", resource_id="d1")
    b = await queue.enqueue(db, "power", resource_type="desktops", resource_id="d1")
    c = await queue.enqueue(db, "clone", resource_type="desktops", resource_id="d2")
    await queue.cancel_queued(db, c.id)
    everything = await queue.list_jobs(db, queue.JobFilter(), limit=10)
    assert [job.id for job in everything] == [c.id, b.id, a.id]
    d1 = queue.JobFilter(resource_type="desktops", resource_id="d1")
    assert [job.id for job in await queue.list_jobs(db, d1, limit=10)] == [b.id, a.id]
    clones = queue.JobFilter(kind="clone", state=JobState.QUEUED)
    assert [job.id for job in await queue.list_jobs(db, clones, limit=10)] == [a.id]
    page = await queue.list_jobs(db, queue.JobFilter(), limit=1, before_id=b.id)
    assert [job.id for job in page] == [a.id]
    depth = await queue.queue_depth(db)
    assert depth == {("queued", "clone"): 1, ("queued", "power"): 1}


async def test_finished_jobs_are_pruned_but_dead_ones_are_kept(db: asyncpg.Connection) -> None:
    for _ in range(3):
        await queue.enqueue(db, "k", max_attempts=1)
    first, second, third = await claim(db)
    await queue.complete(db, [first.lease])
    await queue.fail(db, second.lease, "no", retry_after=None)
    await db.execute("UPDATE jobs SET finished_at = now() - interval '30 days'")
    assert await queue.prune_finished(db, timedelta(days=7), batch=1) == 1
    remaining = await db.fetch("SELECT id, state FROM jobs ORDER BY id")
    assert [(row["id"], row["state"]) for row in remaining] == [
        (second.id, "dead"),
        (third.id, "running"),
    ]


async def test_many_jobs_are_enqueued_in_one_statement(db: asyncpg.Connection) -> None:
    ids = await queue.enqueue_many(db, "k", [{"n": n} for n in range(3)], priority=2)
    claimed = await claim(db)
    assert sorted(job.id for job in claimed) == sorted(ids)
    assert sorted(job.payload["n"] for job in claimed) == [0, 1, 2]
