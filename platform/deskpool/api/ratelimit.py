"""Per-principal rate limiting, held in Redis.

Each caller has a budget of ``API_RATE_LIMIT_PER_MINUTE`` requests per window of one minute
(0 turns rate limiting off). The caller is the authenticated principal on protected operations
(its local id, else its token subject) and the client address on public ones (behind a
trusted proxy, the address it forwards: :mod:`deskpool.api.client_address`), so one user's
budget follows them across addresses and every API process shares it through Redis.

The window is a fixed one that opens with a caller's first request: one Redis key per caller,
incremented and given its expiry atomically by a Lua script. Redis stays off the request's path:
a process counts its callers' requests locally and adds them to the shared counters in one
script call every :data:`FLUSH_SECONDS`, reading back the deployment-wide totals and each
window's end; no request waits for Redis, not even a caller's first of a window (at 9 a.m.
that wait was a sixth of the api's time: every user's first request is one). Several processes
therefore see each other's requests within :data:`FLUSH_SECONDS`, which may let a caller exceed
its budget by the requests of that interval, a deliberate trade for a cheap request. Every
counted response carries the ``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset``
and ``RateLimit-Policy`` headers (the IETF RateLimit header fields draft); the request over
budget is answered 429 with ``Retry-After``.

Redis holds only what may be lost (DESIGN §5): while it cannot be reached requests are served
unlimited, and the outage is logged once, not per request. After a failure the limiter leaves
Redis alone for :data:`STORE_RETRY_SECONDS`, so an outage does not add the client's connection
retries to every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from redis.asyncio import Redis
from redis.exceptions import RedisError

from deskpool.api.client_address import client_address
from deskpool.errors import RateLimited

if TYPE_CHECKING:
    from deskpool.identity.principal import Principal

log = logging.getLogger(__name__)

#: Length of one rate-limit window, in seconds.
WINDOW_SECONDS = 60
#: How long the limiter stays suspended after the store failed to answer, in seconds.
STORE_RETRY_SECONDS = 5.0

#: How often locally counted requests are added to the shared counters, in seconds.
FLUSH_SECONDS = 0.05

#: Adds ``ARGV[i + 1]`` to the counter ``KEYS[i]`` for every key, opening a window of
#: ``ARGV[1]`` ms where none is open; returns each counter's total and milliseconds left, in
#: turn. A flush sends every caller counted since the last one in one call: as one call each
#: in a pipeline, redis-py's packing and reading of the calls was 6 % of a busy api.
_COUNT_SCRIPT = """
local answers = {}
for i, key in ipairs(KEYS) do
  local count = redis.call('INCRBY', key, ARGV[i + 1])
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    redis.call('PEXPIRE', key, ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  answers[#answers + 1] = count
  answers[#answers + 1] = ttl
end
return answers
"""


def seconds_until(resets_at: float, now: float) -> int:
    """Whole seconds from ``now`` until a window ``resets_at`` (both monotonic), 1 to 60.

    Half a millisecond is forgiven before the ceiling: ``(now + 60.0) - now`` is
    60.000000000007 for many a monotonic ``now``, which would tell a client to wait 61 seconds
    of a 60-second window. (Not ``round(…, 3)``: rounding a float to digits is slow, and this
    runs for every request.)
    """
    return min(WINDOW_SECONDS, max(1, math.ceil(resets_at - now - 0.0005)))


@dataclass(frozen=True)
class RateLimitState:
    """Where a caller stands in its current window."""

    limit: int
    remaining: int
    reset_seconds: int

    @property
    def exceeded(self) -> bool:
        """Whether the request that produced this state is over the budget."""
        return self.remaining < 0

    def headers(self) -> dict[str, str]:
        """The RateLimit header fields describing this state."""
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(max(self.remaining, 0)),
            "RateLimit-Reset": str(self.reset_seconds),
            "RateLimit-Policy": f"{self.limit};w={WINDOW_SECONDS}",
        }


#: The state of the request's caller, for the headers of whatever response it gets.
RATE_LIMIT_STATE_KEY = web.RequestKey("rate_limit_state", RateLimitState)


def caller_key(principal: Principal | None, request: web.Request) -> str:
    """Who a request counts against: the principal's id or subject, else the client address."""
    for attribute in ("id", "subject"):
        value = getattr(principal, attribute, None) if principal is not None else None
        if value:
            return f"principal:{value}"
    return f"address:{client_address(request) or 'unknown'}"


@dataclass
class _Window:
    """A caller's current window as this process knows it."""

    shared_count: int
    pending: int
    resets_at: float


class RateLimiter:
    """Counts requests per caller, shared through Redis, and refuses those over budget.

    :param kv: the Redis client.
    :param key_prefix: ``KVSTORE_KEY_PREFIX``.
    :param per_minute: ``API_RATE_LIMIT_PER_MINUTE``; 0 disables the limiter.
    :param flush_seconds: how often local counts are added to the shared counters.
    """

    def __init__(
        self, kv: Redis, key_prefix: str, per_minute: int, flush_seconds: float = FLUSH_SECONDS
    ) -> None:
        self.per_minute = per_minute
        self.flush_seconds = flush_seconds
        self._key_prefix = f"{key_prefix}ratelimit:"
        self._count = kv.register_script(_COUNT_SCRIPT)
        self._kv = kv
        self._store_down = False
        self._suspended_until = 0.0
        self._windows: dict[str, _Window] = {}
        #: The windows with requests counted here and not yet added to the shared counters.
        self._dirty: dict[str, _Window] = {}
        #: When windows that are over are next forgotten (see :meth:`flush`).
        self._next_sweep = 0.0
        self._flusher: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        """Whether requests are limited at all."""
        return self.per_minute > 0

    def _store_failed(self, error: BaseException) -> None:
        self._suspended_until = time.monotonic() + STORE_RETRY_SECONDS
        if not self._store_down:
            log.warning(
                "rate limiting is suspended: the key-value store cannot be reached (%s: %s)",
                type(error).__name__,
                error,
            )
            self._store_down = True

    def _store_answered(self) -> None:
        if self._store_down:
            log.warning("rate limiting resumed: the key-value store answers again")
            self._store_down = False

    async def count(self, caller: str) -> RateLimitState | None:
        """Count one request of ``caller``; ``None`` when disabled or Redis is unreachable."""
        now = time.monotonic()
        if not self.enabled or now < self._suspended_until:
            return None
        window = self._windows.get(caller)
        if window is None or now >= window.resets_at:
            # A window opened here: its shared count and its end are learned at the next
            # flush, as every other request's are (the first one waited for Redis alone).
            window = _Window(0, 0, now + WINDOW_SECONDS)
            self._windows[caller] = window
        window.pending += 1
        self._dirty[caller] = window
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon(), name="ratelimit-flush")
        return RateLimitState(
            limit=self.per_minute,
            remaining=self.per_minute - window.shared_count - window.pending,
            reset_seconds=seconds_until(window.resets_at, now),
        )

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self.flush_seconds)
        await self.flush()

    async def flush(self) -> None:
        """Add the locally counted requests to the shared counters and read the totals back."""
        now = time.monotonic()
        if now >= self._next_sweep:
            # Once a second, not at every flush: with thousands of callers a minute, scanning
            # every window 20 times a second took a tenth of a busy api's time.
            self._next_sweep = now + 1.0
            for caller in [c for c, w in self._windows.items() if now >= w.resets_at]:
                del self._windows[caller]
        dirty, self._dirty = self._dirty, {}
        # Requests counted in a window that is over are not carried into the next one.
        pending = [(c, w, w.pending) for c, w in dirty.items() if w.pending and now < w.resets_at]
        if not pending:
            return
        # The amounts stay pending until the totals that include them are read back, so that a
        # request counted while the script call is out is judged on them too.
        try:
            answers = await self._count(
                keys=[self._key_prefix + caller for caller, _, _ in pending],
                args=[WINDOW_SECONDS * 1000, *(amount for _, _, amount in pending)],
            )
        except (RedisError, OSError) as error:
            for _, window, amount in pending:
                window.pending -= amount
            self._store_failed(error)
            return
        self._store_answered()
        totals = zip(answers[::2], answers[1::2], strict=True)
        for (_, window, amount), (count, ttl_ms) in zip(pending, totals, strict=True):
            window.pending -= amount
            window.shared_count = int(count)
            window.resets_at = min(window.resets_at, now + int(ttl_ms) / 1000)

    async def close(self) -> None:
        """Flush what is still counted locally and stop the background flush."""
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        self._flusher = None
        await self.flush()

    async def check(self, request: web.Request, principal: Principal | None) -> None:
        """Count the request against its caller; remember the state for the response headers.

        :raises RateLimited: the caller is over budget (429 with ``Retry-After``).
        """
        state = await self.count(caller_key(principal, request))
        if state is None:
            return
        request[RATE_LIMIT_STATE_KEY] = state
        if state.exceeded:
            raise RateLimited(
                f"More than {state.limit} requests in {WINDOW_SECONDS} seconds; retry in "
                f"{state.reset_seconds} seconds.",
                headers={"Retry-After": str(state.reset_seconds), **state.headers()},
            )


def add_rate_limit_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Put the caller's RateLimit headers on ``response``, if the request was counted."""
    state = request.get(RATE_LIMIT_STATE_KEY)
    if state is not None and not response.prepared:
        for name, value in state.headers().items():
            response.headers.setdefault(name, value)
