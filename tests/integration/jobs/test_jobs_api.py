"""The jobs API: its declarations in the route table, and its handlers against the database.

Authentication is the API's (every protected operation answers 503 until OIDC is configured);
here the handlers are called directly with a validated call, as the operation wrapper would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import make_mocked_request

from deskpool.api.context import Call
from deskpool.api.pagination import Page, page_schema
from deskpool.api.resources import jobs as jobs_resource
from deskpool.api.routes import Operation, RouteTable
from deskpool.errors import BadRequest, Conflict, NotFound
from deskpool.jobs import queue
from deskpool.runtime import Runtime


@pytest.fixture
def operations() -> dict[str, Operation]:
    routes = RouteTable()
    routes.include(jobs_resource.ROUTES)
    return {operation.operation_id: operation for operation in routes.operations()}


@pytest.fixture
async def api_runtime(make_config: Any, db: asyncpg.Connection) -> AsyncIterator[Runtime]:
    process = make_config()
    runtime = Runtime(process.config, process.plugins)
    await runtime.open()
    yield runtime
    await runtime.close()


def call(operation: Operation, runtime: Runtime, job_id: str | None = None, **query: Any) -> Call:
    match_info = {"id": job_id} if job_id is not None else {}
    request = make_mocked_request(operation.method, operation.path, match_info=match_info)
    page = {"limit": 50, "cursor": None, "state": None, "kind": None}
    page.update({"resource_type": None, "resource_id": None})
    return Call(request=request, operation=operation, runtime=runtime, query={**page, **query})


def test_the_operations_declare_their_permissions(operations: dict[str, Operation]) -> None:
    declared = {(op.method, op.path): op.permission for op in operations.values()}
    assert declared == {
        ("GET", "/api/v1/jobs"): "jobs:read",
        ("GET", "/api/v1/jobs/{id}"): "jobs:read",
        ("POST", "/api/v1/jobs/{id}/retry"): "jobs:manage",
        ("POST", "/api/v1/jobs/{id}/cancel"): "jobs:manage",
    }


async def test_list_filters_and_pages(
    operations: dict[str, Operation], api_runtime: Runtime, db: asyncpg.Connection
) -> None:
    ids = [
        (await queue.enqueue(db, "clone", resource_type="desktops", resource_id=f"d{n}")).id
        for n in range(3)
    ]
    await queue.enqueue(db, "power", resource_type="desktops", resource_id="d0")
    operation = operations["listJobs"]
    first = await operation.handler(call(operation, api_runtime, limit=2, kind="clone"))
    assert isinstance(first, Page)
    assert [job.id for job in first.items] == [ids[2], ids[1]]
    assert first.next is not None
    second = await operation.handler(
        call(operation, api_runtime, limit=2, kind="clone", cursor=first.next)
    )
    assert [job.id for job in second.items] == [ids[0]]
    assert second.next is None
    d0 = await operation.handler(
        call(operation, api_runtime, resource_type="desktops", resource_id="d0", state="queued")
    )
    assert sorted(job.kind for job in d0.items) == ["clone", "power"]
    body = page_schema(jobs_resource.JobSchema)().dump(first)
    assert body["items"][0]["state"] == "queued"
    assert body["items"][0]["errors"] == []
    with pytest.raises(BadRequest):
        await operation.handler(call(operation, api_runtime, cursor="bm90LWFuLWlk"))


async def test_get_shows_attempts_errors_and_timestamps(
    operations: dict[str, Operation], api_runtime: Runtime, db: asyncpg.Connection
) -> None:
    job = await queue.enqueue(db, "clone", {"template": "win11"}, max_attempts=3)
    (claimed,) = await queue.claim(
        db, worker="host:1:ab", kinds=["clone"], limit=1, lease=timedelta(minutes=1)
    )
    await queue.fail(db, claimed.lease, "RuntimeError: no space", retry_after=timedelta(hours=1))
    operation = operations["getJob"]
    found = await operation.handler(call(operation, api_runtime, str(job.id)))
    body = jobs_resource.JobSchema().dump(found)
    assert body["id"] == job.id
    assert body["attempts"] == 1
    assert body["last_error"] == "RuntimeError: no space"
    assert body["errors"][0]["attempt"] == 1
    assert body["errors"][0]["worker"] == "host:1:ab"
    assert body["payload"] == {"template": "win11"}
    assert body["started_at"] is not None
    assert body["finished_at"] is None
    for missing in ("999999999", "not-a-number"):
        with pytest.raises(NotFound):
            await operation.handler(call(operation, api_runtime, missing))


async def test_retry_a_dead_job_and_cancel_a_queued_one_with_an_audit_trail(
    operations: dict[str, Operation], api_runtime: Runtime, db: asyncpg.Connection
) -> None:
    dead = await queue.enqueue(db, "clone", max_attempts=1)
    (claimed,) = await queue.claim(
        db, worker="w", kinds=["clone"], limit=1, lease=timedelta(minutes=1)
    )
    await queue.fail(db, claimed.lease, "boom", retry_after=None)
    queued = await queue.enqueue(db, "power", delay=timedelta(hours=1))
    retry, cancel = operations["retryJob"], operations["cancelJob"]

    with pytest.raises(Conflict):
        await retry.handler(call(retry, api_runtime, str(queued.id)))
    with pytest.raises(Conflict):
        await cancel.handler(call(cancel, api_runtime, str(dead.id)))
    with pytest.raises(NotFound):
        await cancel.handler(call(cancel, api_runtime, "424242424"))

    retried = await retry.handler(call(retry, api_runtime, str(dead.id)))
    cancelled = await cancel.handler(call(cancel, api_runtime, str(queued.id)))
    assert (retried.state, retried.attempts) == ("queued", 0)
    assert cancelled.state == "cancelled"
    actions = await db.fetch(
        "SELECT action, resource_id FROM audit_events WHERE resource_type = 'jobs' "
        "AND resource_id = ANY($1::text[]) ORDER BY id",
        [str(dead.id), str(queued.id)],
    )
    assert [(row["action"], row["resource_id"]) for row in actions] == [
        ("job.retry", str(dead.id)),
        ("job.cancel", str(queued.id)),
    ]
