"""The 9 a.m. login storm: many users reach their desktops at once (issue 27).

Shared by the correctness test (50 users, ``tests/e2e/test_login_storm.py``) and the
benchmark (``bench/login_storm.py``). :func:`prepare` makes, through the REST API of a running
deployment, simulated clusters (one per pool) and pools holding the users' desktops, entitles
a group bound to an OIDC group claim (so users who never signed in are entitled through their
token), and waits until every desktop is ready. :func:`storm` then sends every user at once,
each with a token the API has never seen, along the path a browser takes:

1. ``list_pools``: ``GET /api/v1/me/pools`` (the token is verified and the user created);
2. ``open_desktop``: ``POST /api/v1/me/pools/{id}/desktop`` (a desktop is allocated);
3. ``redeem``: the connection token is sent to a gateway, which answers with the tunnel's id;
4. ``first_frame``: the first image (``img`` or ``png``) arrives through the tunnel.

Each user's step durations, the answers that were refused (by status and problem type) and
retried, and the 5xx answers are recorded. :func:`check_allocations` reads the database: no
desktop went to two users and every user got one. :func:`open_at_once` sends only the
openings of users who signed in before, all at once (``bench/openings_alone.py``).
:func:`daemon_processes` starts several desktop daemon simulator processes on one address, for
a burst one process cannot answer in time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg

from deskpool.testing.processes import ANY_PORT, until
from deskpool.testing.tunnels import TunnelClosed, WebSocketTunnelClient

#: The steps of one user, in order.
STEPS = ("list_pools", "open_desktop", "redeem", "first_frame")
#: The OIDC group claim value every storm user carries, and the local group it is bound to.
CLAIM = "storm-users"
#: Simulated phases short enough that a few hundred desktops are provisioned in seconds.
SIMULATOR_OPTIONS = {
    "clone_seconds": 0.01,
    "boot_seconds": 0.01,
    "agent_seconds": 0.01,
    "oobe_seconds": 0.01,
    "shutdown_seconds": 0.01,
}
#: Retries of one step before the user is counted as not served.
MAX_RETRIES = 20


@dataclass
class UserRun:
    """What happened to one user of the storm."""

    subject: str
    #: When the user's first request went (``time.perf_counter()``).
    started: float = 0.0
    #: Seconds each step took (the last try, retries included), by step name.
    steps: dict[str, float] = field(default_factory=dict)
    #: Seconds from the user's first request to the first image.
    total: float | None = None
    desktop_id: str | None = None
    #: Refused answers that were retried, by ``"step status reason"``.
    retries: collections.Counter[str] = field(default_factory=collections.Counter)
    #: 5xx answers, by ``"step status reason"`` (a 503 with Retry-After is retried too).
    server_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Why the user got no first image, when they did not.
    failure: str | None = None


@dataclass
class Prepared:
    """Pools holding the storm's desktops."""

    pool_ids: list[str]
    desktops: int


@dataclass
class AllocationCheck:
    """What the database says about the storm's allocations."""

    users: int
    users_with_one_desktop: int
    users_without_desktop: int
    users_with_several: int
    desktops_with_several_users: int
    #: Desktops the API handed to a user that the database does not show as theirs.
    mismatches: int

    @property
    def sound(self) -> bool:
        """No desktop went to two users, every user got exactly one, as the API said."""
        return (
            self.users_with_one_desktop == self.users
            and self.users_without_desktop == 0
            and self.users_with_several == 0
            and self.desktops_with_several_users == 0
            and self.mismatches == 0
        )


class Api:
    """JSON calls to the REST API that must succeed (set-up, not measured)."""

    def __init__(self, http: aiohttp.ClientSession, base: str, token: str) -> None:
        self.http = http
        self.base = base.rstrip("/") + "/api/v1"
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        """The answer's JSON body; an error answer raises AssertionError.

        A 503 with ``Retry-After`` is sent again after it, as a well-behaved client does (with
        one ``Idempotency-Key``, so a change is made once): creating a pool waits for the
        license's growth lock, which the worker holds while it inserts a pool's desktops.
        """
        headers = {**self.headers, "Idempotency-Key": str(uuid.uuid4())}
        for _ in range(MAX_RETRIES):
            async with self.http.request(
                method, self.base + path, headers=headers, **kw
            ) as response:
                body = await response.json(content_type=None)
                retry_after = response.headers.get("Retry-After")
                if response.status == 503 and retry_after is not None:
                    await asyncio.sleep(min(float(retry_after), 2.0))
                    continue
                assert response.status < 300, (method, path, response.status, body)
                return body
        raise AssertionError((method, path, f"still 503 after {MAX_RETRIES} tries"))


async def prepare(
    http: aiohttp.ClientSession,
    api_url: str,
    admin_token: str,
    db: asyncpg.Connection,
    *,
    desktops: int,
    per_pool: int = 250,
    name: str = "storm",
    within: float = 600,
) -> Prepared:
    """``desktops`` ready desktops in pools of ``per_pool``, each pool on a simulated cluster.

    The group bound to :data:`CLAIM` is entitled to every pool. Returns once every desktop is
    ready (read from ``db``, the deployment's database). Each pool has a cluster of its own:
    the simulator keeps a cluster's VMs as one document that every driver call reads whole,
    so one cluster of a thousand VMs would make every call (and provisioning) cost a thousand.
    """
    api = Api(http, api_url, admin_token)
    group = await api.call("POST", "/groups", json={"key": name, "name": name})
    await api.call(
        "POST", "/oidc-group-bindings", json={"claim_value": CLAIM, "group_id": group["id"]}
    )
    sizes = [per_pool] * (desktops // per_pool) + (
        [desktops % per_pool] * (desktops % per_pool > 0)
    )
    pool_ids = []
    for number, size in enumerate(sizes, 1):
        cluster = await api.call(
            "POST",
            "/clusters",
            json={
                "name": f"{name}-{number}",
                "driver": "simulator",
                "endpoint": f"simulator://{name}-{number}",
                "options": SIMULATOR_OPTIONS,
            },
        )
        pool = await api.call(
            "POST",
            "/pools",
            json={
                "name": f"{name}-{number}",
                "cluster_id": cluster["id"],
                "template": "ubuntu-22.04",
                "kind": "non_persistent",
                "os_type": "linux",
                "min_size": size,
                "spare": 0,
                "max_size": size,
                "naming_pattern": f"{name}{number}-{{n:04}}",
            },
        )
        await api.call(
            "POST",
            f"/pools/{pool['id']}/entitlements",
            json={"subject_type": "group", "subject_id": group["id"]},
        )
        pool_ids.append(pool["id"])

    prepared = Prepared(pool_ids, desktops)
    await wait_ready(db, prepared, within)
    return prepared


async def wait_ready(db: asyncpg.Connection, prepared: Prepared, within: float = 600) -> None:
    """Return once every desktop of ``prepared`` is ready and free (read from ``db``)."""

    async def all_ready() -> bool:
        ready = await db.fetchval(
            "SELECT count(*) FROM desktops WHERE pool_id = ANY($1::uuid[]) AND state = 'ready' "
            "AND assigned_user IS NULL AND NOT in_session AND NOT used_since_refresh",
            prepared.pool_ids,
        )
        return int(ready) == prepared.desktops

    await until(all_ready, f"{prepared.desktops} desktops are ready", within, every=0.5)


def _reason(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("code") or body.get("type") or body.get("title") or "")
    return ""


async def _request(
    http: aiohttp.ClientSession,
    run: UserRun,
    step: str,
    method: str,
    url: str | Callable[[int], str],
    headers: dict[str, str],
) -> Any:
    """The JSON answer of a request that succeeded, retrying refusals with Retry-After.

    :param url: the URL, or the URL of each try by its number (a user who finds a pool
        empty tries the next one).
    """
    for attempt in range(MAX_RETRIES):
        target = url if isinstance(url, str) else url(attempt)
        async with http.request(method, target, headers=headers) as response:
            body = await response.json(content_type=None)
            if response.status < 300:
                return body
            label = f"{step} {response.status} {_reason(body)}".rstrip()
            if response.status >= 500:
                run.server_errors[label] += 1
            retry_after = response.headers.get("Retry-After")
            if retry_after is None:
                raise _Failed(label)
            run.retries[label] += 1
            await asyncio.sleep(min(float(retry_after), 1.0))
    raise _Failed(f"{step}: still refused after {MAX_RETRIES} tries")


class _Failed(Exception):
    """A user could not go on."""


async def _one_user(
    http: aiohttp.ClientSession,
    api_url: str,
    gateway_url: str,
    subject: str,
    token: str,
    first_pool: int,
    go: asyncio.Event,
    tunnels: list[WebSocketTunnelClient],
    within: float,
) -> UserRun:
    run = UserRun(subject)
    api = api_url.rstrip("/") + "/api/v1"
    headers = {"Authorization": f"Bearer {token}"}
    await go.wait()
    started = run.started = time.perf_counter()
    mark = started
    async with _until_stopped(run, within, "first image"):
        page = await _request(http, run, "list_pools", "GET", f"{api}/me/pools", headers)
        now = time.perf_counter()
        run.steps["list_pools"], mark = now - mark, now
        listed = page["items"]
        if not listed:
            raise _Failed("list_pools: no pool listed")
        # Users spread over the pools, as people pick different ones: user i the i-th
        # pool of the list (in its order, which every user sees the same), or the next
        # one shown available after it; one who finds a pool empty tries the next. (Picking
        # the i-th of the pools shown available made the spread drift as pools filled:
        # the last users found theirs empty, and were answered 503 no_desktop_available.)
        turned = [listed[(first_pool + n) % len(listed)] for n in range(len(listed))]
        pools = [pool for pool in turned if pool["availability"] == "available"] or turned

        def pool_url(attempt: int) -> str:
            pool = pools[attempt % len(pools)]
            return f"{api}/me/pools/{pool['id']}/desktop"

        opened = await _request(http, run, "open_desktop", "POST", pool_url, headers)
        now = time.perf_counter()
        run.steps["open_desktop"], mark = now - mark, now
        run.desktop_id = str(opened["id"])
        client = await WebSocketTunnelClient.connect(
            http, gateway_url, {"token": opened["connection"]["token"]}
        )
        tunnels.append(client)
        await client.tunnel_id(within)
        now = time.perf_counter()
        run.steps["redeem"], mark = now - mark, now
        while (await client.read(within)).opcode not in ("img", "png"):
            pass
        now = time.perf_counter()
        run.steps["first_frame"] = now - mark
        run.total = now - started
    return run


@contextlib.asynccontextmanager
async def _until_stopped(run: UserRun, within: float, awaited: str) -> AsyncIterator[None]:
    """A user's steps, ``within`` seconds at most; why they stopped early goes to ``run``."""
    try:
        async with asyncio.timeout(within):
            yield
    except _Failed as failed:
        run.failure = str(failed)
    except TunnelClosed as closed:
        run.failure = f"tunnel closed: {closed}"
    except TimeoutError:
        run.failure = f"no {awaited} within {within} s"
    except aiohttp.ClientError as error:
        run.failure = f"{type(error).__name__}: {error}"


@dataclass
class StormResult:
    """Every user's run and the storm's wall time."""

    users: list[UserRun]
    #: Seconds from the burst's start until the last user had a first image.
    wall: float

    @property
    def served(self) -> int:
        """Users who got a first image."""
        return sum(1 for user in self.users if user.total is not None)

    def retries(self) -> collections.Counter[str]:
        """Retried refusals of every user, by reason."""
        total: collections.Counter[str] = collections.Counter()
        for user in self.users:
            total.update(user.retries)
        return total

    def server_errors(self) -> collections.Counter[str]:
        """5xx answers of every user, by reason."""
        total: collections.Counter[str] = collections.Counter()
        for user in self.users:
            total.update(user.server_errors)
        return total

    def failures(self) -> collections.Counter[str]:
        """Users not served, by why."""
        return collections.Counter(user.failure for user in self.users if user.failure)


async def storm(
    api_urls: Sequence[str],
    gateway_urls: Sequence[str],
    tokens: Sequence[tuple[str, str]],
    *,
    within: float = 120,
    connections: int = 0,
) -> StormResult:
    """Send every ``(subject, token)`` along the path at once; tunnels closed at the end.

    User *i* talks to ``api_urls[i % len]`` and ``gateway_urls[i % len]`` (the tunnel's
    ``…/websocket-tunnel`` URL), as a load balancer spreading users would.

    :param connections: the HTTP client's connection limit (0: none, every user at once).
    """
    go = asyncio.Event()
    tunnels: list[WebSocketTunnelClient] = []
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as http:
        users = [
            asyncio.create_task(
                _one_user(
                    http,
                    api_urls[index % len(api_urls)],
                    gateway_urls[index % len(gateway_urls)],
                    subject,
                    token,
                    index,
                    go,
                    tunnels,
                    within,
                )
            )
            for index, (subject, token) in enumerate(tokens)
        ]
        result = await _all_at_once(go, users)
        await asyncio.gather(*(tunnel.ws.close() for tunnel in tunnels), return_exceptions=True)
    return result


async def _all_at_once(go: asyncio.Event, users: list[asyncio.Task[UserRun]]) -> StormResult:
    """Let every user waiting on ``go`` go at once; their runs and the seconds until the last."""
    await asyncio.sleep(0)  # every user is waiting on ``go`` before the clock starts
    started = time.perf_counter()
    go.set()
    runs = await asyncio.gather(*users)
    return StormResult(list(runs), time.perf_counter() - started)


async def open_at_once(
    api_url: str,
    tokens: Sequence[tuple[str, str]],
    pool_ids: Sequence[str],
    *,
    within: float = 120,
) -> StormResult:
    """Every ``(subject, token)`` opens a desktop at once, and nothing else: the openings alone.

    The users have signed in before (their principals are the API's to recall, as after
    ``list_pools`` in :func:`storm`); user *i* opens ``pool_ids[i % len]``, the next pool on a
    refusal, as a user of :func:`storm` does. Each user's ``open_desktop`` step and ``total``
    are the opening's seconds; ``wall`` runs until the last answer.
    """
    go = asyncio.Event()
    api = api_url.rstrip("/") + "/api/v1"

    async def one_user(index: int, subject: str, token: str) -> UserRun:
        run = UserRun(subject)
        headers = {"Authorization": f"Bearer {token}"}

        def pool_url(attempt: int) -> str:
            return f"{api}/me/pools/{pool_ids[(index + attempt) % len(pool_ids)]}/desktop"

        await go.wait()
        run.started = time.perf_counter()
        async with _until_stopped(run, within, "desktop opened"):
            opened = await _request(http, run, "open_desktop", "POST", pool_url, headers)
            run.desktop_id = str(opened["id"])
            run.total = run.steps["open_desktop"] = time.perf_counter() - run.started
        return run

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        users = [
            asyncio.create_task(one_user(index, subject, token))
            for index, (subject, token) in enumerate(tokens)
        ]
        return await _all_at_once(go, users)


async def check_allocations(
    db: asyncpg.Connection, issuer: str, result: StormResult
) -> AllocationCheck:
    """Read the database: who got which desktop, against what the API answered.

    A desktop "went to" a user when a session of that user was opened on it; the storm's
    users are the subjects of ``result`` under ``issuer``.
    """
    subjects = [user.subject for user in result.users]
    rows = await db.fetch(
        """
        SELECT u.subject, array_remove(array_agg(DISTINCT s.desktop_id), NULL) AS desktops
          FROM users u LEFT JOIN desktop_sessions s ON s.user_id = u.id
         WHERE u.issuer = $1 AND u.subject = ANY($2::text[])
         GROUP BY u.subject
        """,
        issuer,
        subjects,
    )
    by_subject = {row["subject"]: [str(desktop) for desktop in row["desktops"]] for row in rows}
    shared = await db.fetchval(
        """
        SELECT count(*) FROM (
            SELECT s.desktop_id FROM desktop_sessions s JOIN users u ON u.id = s.user_id
             WHERE u.issuer = $1 AND u.subject = ANY($2::text[])
             GROUP BY s.desktop_id HAVING count(DISTINCT s.user_id) > 1) AS several
        """,
        issuer,
        subjects,
    )
    counts = [len(by_subject.get(subject, [])) for subject in subjects]
    mismatches = sum(
        1
        for user in result.users
        if user.desktop_id is not None and by_subject.get(user.subject) != [user.desktop_id]
    )
    return AllocationCheck(
        users=len(subjects),
        users_with_one_desktop=counts.count(1),
        users_without_desktop=counts.count(0),
        users_with_several=sum(1 for count in counts if count > 1),
        desktops_with_several_users=int(shared),
        mismatches=mismatches,
    )


@contextlib.contextmanager
def daemon_processes(count: int) -> Iterator[str]:
    """``count`` desktop daemon simulator processes sharing one address; yields ``host:port``.

    Each listens with ``SO_REUSEPORT`` (``python -m deskpool.desktopd --reuse-port``), so the
    kernel spreads the gateways' connections over them: one Python process cannot complete a
    thousand handshakes at once on a loaded machine, as guacd would not in one process. The
    first binds a port the system picks; the others bind the one it printed.
    """
    started: list[subprocess.Popen[str]] = []
    address = ANY_PORT
    try:
        for _ in range(count):
            daemon = subprocess.Popen(
                [sys.executable, "-m", "deskpool.desktopd", "--reuse-port", address],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            started.append(daemon)
            assert daemon.stdout is not None
            printed = daemon.stdout.readline().rsplit(" ", 1)[-1].strip()
            if not printed:
                raise RuntimeError(f"a desktop daemon simulator did not start on {address}")
            address = printed
        yield address
    finally:
        for daemon in started:
            daemon.terminate()
        for daemon in started:
            daemon.wait(10)


def new_subjects(count: int) -> list[str]:
    """``count`` subjects no API has seen."""
    run = uuid.uuid4().hex[:8]
    return [f"storm-{run}-{number:05d}" for number in range(count)]
