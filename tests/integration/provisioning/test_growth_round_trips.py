"""Creating many desktops in one pass costs a handful of round trips under the growth lock.

A reconciliation that creates desktops holds the license's growth lock (an advisory lock taken
by :func:`deskpool.licensing.service.cap_desktops`, held until the transaction commits) while
it inserts them, enqueues their provisioning jobs and audits them. ``POST /api/v1/pools`` waits
for the same lock under the api's 1 s statement timeout: a pass that sent a statement per
desktop (a pool of ``min_size`` 250: some 500 round trips) held it long enough to answer an
administrator 503 "database unavailable". Counted in PostgreSQL's own statement log
(:mod:`tests.support.statement_log`: a private server logging every statement), from the lock's
statement to the commit, for pools of 25 and of 250 desktops: the same few round trips, and
still a job, an audit event and its webhook outbox row for each desktop.
"""

from __future__ import annotations

import json
import uuid
from itertools import groupby

import asyncpg
import pytest
from tests.support.provisioning import MakePool, desktops, no_fence
from tests.support.sessions import install_license
from tests.support.statement_log import Counted, Logged, LoggedDatabase

from deskpool.desktops.jobs import PROVISION, idempotency_key
from deskpool.events import event_type
from deskpool.pools.model import Pool
from deskpool.reconciliation.events import RECONCILER_ACTOR
from deskpool.reconciliation.reconciler import PoolReconcilerService
from deskpool.runtime import Runtime
from deskpool.testing.licensing import TestVendor

#: Round trips the growth lock may be held for, however many desktops the pass creates: the
#: lock, the license's judgement and the usage it counts, the desktops inserted (in a savepoint
#: of their own: three), their jobs, their audit events, the end of the creates' savepoint, the
#: pool marked reconciled, the commit.
MOST_ROUND_TRIPS = 11

#: The pools measured: as many round trips for the one as for the other.
SIZES = (25, 250)

CREATE = "reconcile.create_desktop"


@pytest.fixture(scope="module")
def provisioning_database(logged: LoggedDatabase) -> str:
    """The module's database (the worker's and ``db``'s): the logged one."""
    return logged.url


def under_growth_lock(counted: Counted) -> list[Logged]:
    """The statements of the transaction that took the growth lock, from the lock to its end.

    The lock is the statement of :func:`~deskpool.licensing.store.lock_growth` (its key is a
    parameter): the only one of its text in a pass.
    """
    statements = list(counted)
    [lock] = [
        index
        for index, statement in enumerate(statements)
        if "pg_advisory_xact_lock($1)" in statement.text and statement.kind == "execute"
    ]
    pid = statements[lock].pid
    held: list[Logged] = []
    for statement in statements[lock:]:
        if statement.pid != pid:
            continue
        held.append(statement)
        if statement.text.strip().rstrip(";").upper() in {"COMMIT", "ROLLBACK"}:
            return held
    raise AssertionError("the transaction that took the growth lock did not end")


def texts(statements: list[Logged]) -> str:
    """The statements, one a line; a run of one statement once, with how many times it ran."""
    lines = Counted(statements, set()).texts()
    runs = groupby(zip(statements, lines, strict=True), key=lambda pair: pair[0].text)
    shown = []
    for _, run in runs:
        pairs = list(run)
        shown.append(pairs[0][1] + (f"  (x{len(pairs)})" if len(pairs) > 1 else ""))
    return "\n".join(shown)


async def subscribe(db: asyncpg.Connection) -> tuple[uuid.UUID, uuid.UUID]:
    """A webhook subscription to reconciliation's events, and one that none of them matches."""
    await db.execute("DELETE FROM webhook_subscriptions")
    subscribed, other = uuid.uuid4(), uuid.uuid4()
    for subscription, types in ((subscribed, ["audit.reconcile.*"]), (other, ["session.*"])):
        await db.execute(
            "INSERT INTO webhook_subscriptions (id, name, url, event_types) "
            "VALUES ($1, $2, 'https://hooks.example.test/in', $3)",
            subscription,
            f"hook-{subscription}",
            types,
        )
    return subscribed, other


async def check_everything_was_recorded(
    db: asyncpg.Connection, pool: Pool, subscribed: uuid.UUID, other: uuid.UUID
) -> None:
    """Each desktop has its provisioning job, its audit event and its event's outbox row."""
    created = await desktops(db, pool)
    assert len(created) == pool.min_size
    jobs = {
        row["resource_id"]: row
        for row in await db.fetch(
            "SELECT * FROM jobs WHERE resource_type = 'desktops' AND resource_id = ANY($1::text[])",
            [str(desktop.id) for desktop in created],
        )
    }
    events = {
        row["resource_id"]: row
        for row in await db.fetch(
            "SELECT * FROM audit_events WHERE action = $1 AND details->>'pool_id' = $2",
            CREATE,
            str(pool.id),
        )
    }
    deliveries = {
        row["audit_event_id"]: row
        for row in await db.fetch(
            "SELECT * FROM webhook_deliveries WHERE audit_event_id = ANY($1::bigint[])",
            [event["id"] for event in events.values()],
        )
    }
    assert len(jobs) == len(events) == len(deliveries) == len(created)
    for desktop in created:
        job, event = jobs[str(desktop.id)], events[str(desktop.id)]
        assert (job["kind"], job["state"]) == (PROVISION, "queued")
        assert job["idempotency_key"] == idempotency_key(PROVISION, desktop)
        assert json.loads(job["payload"]) == {"desktop_id": str(desktop.id)}
        assert (event["actor"], event["resource_type"], event["outcome"]) == (
            RECONCILER_ACTOR,
            "desktops",
            "success",
        )
        details = json.loads(event["details"])
        assert details == {
            "reason": details["reason"],
            "pool_id": str(pool.id),
            "pool": pool.name,
            "desktop": desktop.name,
            "state": "provisioning",
            "job_id": job["id"],
            "job_kind": PROVISION,
        }
        assert f"min_size {pool.min_size}" in details["reason"]
        delivery = deliveries[event["id"]]
        assert delivery["subscription_id"] == subscribed  # only: ``other`` matches none
        assert delivery["message_id"] == f"msg_{event['id']}"
        assert delivery["event_type"] == event_type(CREATE, "success") == f"audit.{CREATE}"
        payload = json.loads(delivery["payload"])
        assert payload["type"] == f"audit.{CREATE}"
        assert payload["timestamp"] == payload["data"]["occurred_at"]
        assert payload["data"] == {
            "id": event["id"],
            "occurred_at": event["occurred_at"].isoformat(),
            "actor": RECONCILER_ACTOR,
            "action": CREATE,
            "resource_type": "desktops",
            "resource_id": str(desktop.id),
            "outcome": "success",
            "request_id": None,
            "source_address": None,
            "details": details,
        }


async def test_creating_a_pools_desktops_holds_the_growth_lock_for_a_few_round_trips(
    db: asyncpg.Connection,
    make_pool: MakePool,
    reconciler: PoolReconcilerService,
    runtime: Runtime,
    logged: LoggedDatabase,
    license_vendor: TestVendor,
) -> None:
    await install_license(runtime, license_vendor, desktops=1000, pools=100, sessions=1000)
    subscribed, other = await subscribe(db)
    # A first pass prepares the statements, as the worker's connections have long done.
    warm = await make_pool(min_size=2)
    assert await reconciler.reconcile_now(warm.id, no_fence) is not None

    held: dict[int, list[Logged]] = {}
    for size in SIZES:
        pool = await make_pool(min_size=size, max_size=size)
        mark = logged.log.mark()
        applied = await reconciler.reconcile_now(pool.id, no_fence)
        held[size] = under_growth_lock(logged.log.since(mark))
        assert applied is not None
        assert (applied.applied, applied.skipped) == (size, 0)
        await check_everything_was_recorded(db, pool, subscribed, other)

    counts = {size: len(statements) for size, statements in held.items()}
    assert max(counts.values()) <= MOST_ROUND_TRIPS, "\n\n".join(
        [f"round trips under the growth lock, by desktops created: {counts}"]
        + [f"{size} desktops:\n{texts(statements)}" for size, statements in held.items()]
    )
    assert len(set(counts.values())) == 1, counts
