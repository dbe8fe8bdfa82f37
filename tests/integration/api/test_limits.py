"""Rate limiting (held in the real Redis) and cursor pagination with a bounded limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from tests.integration.api.extra_operations import PROBLEM, ApiClientFactory, NumberSchema

from deskpool.api.app import RATE_LIMITER_KEY
from deskpool.api.pagination import PageLimits, PageQuery, check_page_contract, page_schema
from deskpool.api.ratelimit import RateLimiter, caller_key
from deskpool.api.routes import Operation, ResponseSpec

RATE_LIMIT_HEADERS = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")


# ------------------------------------------------------------------------------ rate limiting


@pytest.fixture(autouse=True)
def _frozen_clock(frozen_rate_limit_clock: float) -> None:
    """Every window of these tests stays open for the whole test."""


async def test_responses_carry_the_callers_budget(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(API_RATE_LIMIT_PER_MINUTE="5")
    first = await client.get("/test/numbers")
    second = await client.get("/test/numbers")
    assert first.headers["RateLimit-Limit"] == "5"
    assert first.headers["RateLimit-Remaining"] == "4"
    assert second.headers["RateLimit-Remaining"] == "3"
    assert 1 <= int(second.headers["RateLimit-Reset"]) <= 60
    assert second.headers["RateLimit-Policy"] == "5;w=60"


async def test_a_request_over_the_budget_is_429_with_retry_after(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(API_RATE_LIMIT_PER_MINUTE="3")
    for _ in range(3):
        assert (await client.get("/test/numbers")).status == 200
    refused = await client.get("/test/numbers")
    assert refused.status == 429
    assert refused.content_type == PROBLEM
    body = await refused.json()
    assert body["code"] == "rate_limited"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["RateLimit-Remaining"] == "0"
    assert all(name in refused.headers for name in RATE_LIMIT_HEADERS)


async def test_problem_responses_of_counted_requests_carry_the_budget(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(API_RATE_LIMIT_PER_MINUTE="5")
    response = await client.get("/test/numbers", params={"limit": "0"})
    assert response.status == 422
    assert response.headers["RateLimit-Remaining"] == "4"


async def test_the_budget_is_shared_through_redis_by_every_process(
    make_api_client: ApiClientFactory, deskpool_environ: dict[str, str]
) -> None:
    from deskpool.api.app import RUNTIME_KEY

    # Two applications (as two API processes would be) on the same store and key prefix: the
    # test's own prefix, which no concurrent test run shares.
    one = await make_api_client(API_RATE_LIMIT_PER_MINUTE="2")
    two = await make_api_client(API_RATE_LIMIT_PER_MINUTE="2")
    prefix = deskpool_environ["KVSTORE_KEY_PREFIX"]
    assert one.app[RUNTIME_KEY].config["KVSTORE_KEY_PREFIX"] == prefix
    assert two.app[RUNTIME_KEY].config["KVSTORE_KEY_PREFIX"] == prefix
    # Requests are counted locally and added to the shared counter at the next flush
    # (FLUSH_SECONDS; here explicit), which reads back the deployment-wide total.
    assert (await one.get("/test/numbers")).status == 200
    assert (await one.get("/test/numbers")).status == 200
    await one.app[RATE_LIMITER_KEY].flush()
    # The other process admits what it counts until its own flush tells it of one's two.
    assert (await two.get("/test/numbers")).status == 200
    await two.app[RATE_LIMITER_KEY].flush()
    assert (await two.get("/test/numbers")).status == 429
    assert (await one.get("/test/numbers")).status == 429
    await _clear_prefix(one, prefix)


async def _clear_prefix(client: Any, prefix: str) -> None:
    from deskpool.api.app import RUNTIME_KEY

    kv = client.app[RUNTIME_KEY].kv
    keys = [key async for key in kv.scan_iter(match=f"{prefix}*")]
    if keys:
        await kv.delete(*keys)


async def test_zero_turns_rate_limiting_off(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(API_RATE_LIMIT_PER_MINUTE="0")
    for _ in range(5):
        response = await client.get("/test/numbers")
        assert response.status == 200
        assert "RateLimit-Limit" not in response.headers


async def test_the_budget_is_kept_in_redis_under_the_key_prefix(
    make_api_client: ApiClientFactory, deskpool_environ: dict[str, str]
) -> None:
    from deskpool.api.app import RUNTIME_KEY

    client = await make_api_client(API_RATE_LIMIT_PER_MINUTE="10")
    await client.get("/test/numbers")
    await client.app[RATE_LIMITER_KEY].flush()
    kv = client.app[RUNTIME_KEY].kv
    prefix = deskpool_environ["KVSTORE_KEY_PREFIX"]
    keys = [key async for key in kv.scan_iter(match=f"{prefix}ratelimit:*")]
    assert keys == [f"{prefix}ratelimit:address:127.0.0.1".encode()]
    assert 0 < await kv.ttl(keys[0]) <= 60


async def test_an_unreachable_store_suspends_limiting_instead_of_failing() -> None:
    import redis.asyncio as redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    kv = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    limiter = RateLimiter(kv, "deskpool-test:", per_minute=1)
    try:
        # Counted here, then the flush meets the outage: limiting is suspended, not failing.
        assert await limiter.count("address:127.0.0.1") is not None
        await limiter.flush()
        assert await limiter.count("address:127.0.0.1") is None
        # Suspended for a while: the store is not asked again on the next request.
        assert await limiter.count("address:127.0.0.1") is None
    finally:
        await kv.aclose()


@dataclass(frozen=True)
class FakePrincipal:
    id: str = ""
    subject: str = ""


def test_callers_are_principals_when_known_else_addresses() -> None:
    request = make_mocked_request("GET", "/api/v1/pools")
    assert caller_key(FakePrincipal(id="u-1", subject="alice"), request) == "principal:u-1"
    assert caller_key(FakePrincipal(subject="alice"), request) == "principal:alice"
    assert caller_key(None, request).startswith("address:")


# --------------------------------------------------------------------------------- pagination


async def walk(client: Any, **params: str) -> list[list[int]]:
    """Every page of ``GET /test/numbers``, following ``next``."""
    pages: list[list[int]] = []
    cursor: str | None = None
    while True:
        query = dict(params) | ({"cursor": cursor} if cursor else {})
        response = await client.get("/test/numbers", params=query)
        assert response.status == 200, await response.text()
        body = await response.json()
        pages.append([item["value"] for item in body["items"]])
        cursor = body["next"]
        if cursor is None:
            return pages


async def test_lists_page_with_an_opaque_cursor(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(numbers=7)
    assert await walk(client, limit="3") == [[1, 2, 3], [4, 5, 6], [7]]


async def test_the_default_page_size_is_configurable(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(numbers=120, API_PAGE_SIZE_DEFAULT="40")
    pages = await walk(client)
    assert [len(page) for page in pages] == [40, 40, 40]


async def test_the_default_page_size_is_50(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(numbers=60)
    assert [len(page) for page in await walk(client)] == [50, 10]


async def test_a_limit_above_the_configured_maximum_is_reduced(
    make_api_client: ApiClientFactory,
) -> None:
    client = await make_api_client(numbers=30, API_PAGE_SIZE_MAX="20")
    assert [len(page) for page in await walk(client, limit="500")] == [20, 10]


@pytest.mark.parametrize("limit", ["0", "501", "-1", "ten"])
async def test_a_limit_out_of_bounds_is_422(make_api_client: ApiClientFactory, limit: str) -> None:
    client = await make_api_client(numbers=3)
    response = await client.get("/test/numbers", params={"limit": limit})
    assert response.status == 422
    assert response.content_type == PROBLEM
    errors = (await response.json())["errors"]
    assert [(e["pointer"], e["location"]) for e in errors] == [("/query/limit", "query")]


async def test_a_cursor_outside_its_alphabet_is_422(make_api_client: ApiClientFactory) -> None:
    client = await make_api_client(numbers=3)
    response = await client.get("/test/numbers", params={"cursor": "%%%"})
    assert response.status == 422
    errors = (await response.json())["errors"]
    assert [e["pointer"] for e in errors] == ["/query/cursor"]


@pytest.mark.parametrize("cursor", ["bm90IGpzb24", "W1tbW1s", "x", "MQ" + "A" * 22])
async def test_a_cursor_this_server_did_not_issue_is_400(
    make_api_client: ApiClientFactory, cursor: str
) -> None:
    client = await make_api_client(numbers=3)
    response = await client.get("/test/numbers", params={"cursor": cursor})
    assert response.status == 400
    assert (await response.json())["code"] == "invalid_cursor"


def test_page_limits_resolve_within_the_configured_bounds() -> None:
    limits = PageLimits(default=50, maximum=100)
    assert limits.resolve(None) == 50
    assert limits.resolve(7) == 7
    assert limits.resolve(400) == 100


async def _never(call: Any) -> Any:
    return None


@pytest.mark.parametrize(
    ("schema", "query", "missing"),
    [
        (page_schema(NumberSchema), None, "limit"),  # a page, but no limit or cursor to ask
        (NumberSchema, PageQuery, "next"),  # the query, but an answer with no next cursor
    ],
)
def test_a_list_that_does_not_page_the_standard_way_is_refused(
    schema: Any, query: Any, missing: str
) -> None:
    operation = Operation(
        method="GET",
        path="/things",
        handler=_never,
        operation_id="listThings",
        summary="List things",
        tags=("things",),
        permission="things:read",
        responses={200: ResponseSpec("Things.", schema)},
        query=query,
        paginated=True,
    )
    with pytest.raises(ValueError, match=missing):
        check_page_contract(operation)


async def test_requests_wait_for_no_redis_and_a_flush_adds_every_callers_count_in_one_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import secrets

    import redis.asyncio as redis
    from redis.asyncio.connection import AbstractConnection

    from deskpool.testing.services import ServiceAddresses

    host, _, port = ServiceAddresses.from_environ().kv_addr.rpartition(":")
    kv = redis.Redis(host=host, port=int(port))
    limiter = RateLimiter(kv, f"deskpool-test-{secrets.token_hex(4)}:", per_minute=100)
    callers = [f"principal:user-{n}" for n in range(50)]
    packed: list[tuple[Any, ...]] = []
    pack = AbstractConnection.pack_command

    def counting(self: AbstractConnection, *args: Any) -> Any:
        packed.append(args)
        return pack(self, *args)

    try:
        # The connection open and the script known to Redis (a flush of another caller), so
        # only the calls of the callers below count.
        await limiter.count("principal:warming-up")
        await limiter.flush()
        monkeypatch.setattr(AbstractConnection, "pack_command", counting)
        for caller in callers:
            await limiter.count(caller)
            await limiter.count(caller)
            await limiter.count(caller)
        # Not even a caller's first request of its window waits for Redis.
        assert packed == []
        await limiter.flush()
        assert len(packed) == 1
        monkeypatch.undo()
        # Every caller's three requests are in the shared counter, and the process knows it.
        shared = await kv.mget([limiter._key_prefix + caller for caller in callers])
        assert shared == [b"3"] * 50
        state = await limiter.count(callers[0])
        assert state is not None
        assert state.remaining == 100 - 4
    finally:
        await kv.aclose()
