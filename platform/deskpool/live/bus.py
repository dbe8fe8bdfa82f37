"""The Redis stream of live events: publishing, and one reader per process fanning out.

Publishers ``XADD`` to one stream (``<KVSTORE_KEY_PREFIX>live:events``), capped to the most
recent :data:`STREAM_LENGTH` entries. Each api process runs one :class:`LiveHub`: a single task
that blocks on ``XREAD`` and hands every entry to the process's subscribers, so a thousand open
streams cost one Redis connection. A subscriber that resumes (``Last-Event-ID``) first reads
what it missed with ``XRANGE``; the hub's entries it already saw are skipped by id. When
reading the stream fails (Redis stopped, restarted, or its connection dropped), events
published meanwhile may be lost: once reading works again, every subscriber gets a
:data:`RESET` entry first, and its client reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as redis
from redis.exceptions import NoScriptError, RedisError
from redis.typing import EncodableT, FieldT

from deskpool.live.model import LiveEvent, stream_id_key

log = logging.getLogger(__name__)

#: Entries kept in the stream (approximately): how far back a reconnecting client can resume.
STREAM_LENGTH = 10_000
#: How long one ``XREAD`` blocks at most, in milliseconds; never more than half the client's
#: socket timeout (``KVSTORE_TIMEOUT``), see :func:`block_ms`.
BLOCK_MS = 5_000


def block_ms(kv: redis.Redis) -> int:
    """How long an ``XREAD`` on ``kv`` may block, in milliseconds.

    Half its socket timeout, :data:`BLOCK_MS` at most: a read that outlasted the timeout would
    be taken for a store that stopped answering.
    """
    timeout = kv.connection_pool.connection_kwargs.get("socket_timeout")
    if not timeout:
        return BLOCK_MS
    return max(10, min(BLOCK_MS, int(float(timeout) * 1000 / 2)))


#: Entries buffered per subscriber before it is dropped (it reconnects and resumes).
SUBSCRIBER_BUFFER = 1_000
#: The type of the entry the hub hands its subscribers when events may have been lost (reading
#: the stream failed, and succeeded again): their clients must read everything again.
RESET = "reset"


def stream_key(prefix: str) -> str:
    """The stream's key under ``KVSTORE_KEY_PREFIX``."""
    return f"{prefix}live:events"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(raw_id: Any, raw_fields: Mapping[Any, Any]) -> tuple[str, LiveEvent]:
    fields = {_text(key): _text(value) for key, value in raw_fields.items()}
    return _text(raw_id), LiveEvent.from_fields(fields)


async def publish(kv: redis.Redis, prefix: str, event: LiveEvent) -> str | None:
    """Add ``event`` to the stream; its id, or ``None`` when Redis failed (logged, not raised)."""
    # The stream entry as redis types it (its dict is invariant in the key and value types).
    entry: dict[FieldT, EncodableT] = {key: value for key, value in event.fields().items()}
    try:
        raw = await kv.xadd(
            stream_key(prefix),
            entry,
            maxlen=STREAM_LENGTH,
            approximate=True,
        )
    except (RedisError, OSError) as error:
        log.warning("live event %s of %s not published: %s", event.type, event.resource_id, error)
        return None
    return _text(raw)


#: XADDs to the stream ``KEYS[1]`` the events of ``ARGV[2]`` (a JSON list of their fields, as
#: flat name, value lists), capped at ``ARGV[1]`` entries as :func:`publish` caps it; returns
#: how many it added.
_XADD_MANY = """
local events = cjson.decode(ARGV[2])
for _, fields in ipairs(events) do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
end
return #events
"""
_XADD_MANY_SHA = hashlib.sha1(_XADD_MANY.encode()).hexdigest()


async def publish_many(kv: redis.Redis, prefix: str, events: Sequence[LiveEvent]) -> int:
    """Add ``events`` to the stream in order, in one command; how many were added.

    The same entries as :func:`publish` for each, at the cost of one round trip (a script, so
    the batch is one command). A Redis failure is logged, not raised.
    """
    if not events:
        return 0
    batch = json.dumps(
        [[part for field in event.fields().items() for part in field] for event in events],
        separators=(",", ":"),
    )
    key = stream_key(prefix)
    try:
        try:
            added = await kv.evalsha(_XADD_MANY_SHA, 1, key, STREAM_LENGTH, batch)
        except NoScriptError:
            added = await kv.eval(_XADD_MANY, 1, key, STREAM_LENGTH, batch)
    except (RedisError, OSError) as error:
        log.warning("%d live event(s) not published: %s", len(events), error)
        return 0
    return int(added)


async def last_id(kv: redis.Redis, prefix: str) -> str:
    """The id of the newest entry (``0-0`` for an empty stream)."""
    newest = await kv.xrevrange(stream_key(prefix), count=1)
    return _text(newest[0][0]) if newest else "0-0"


async def first_id(kv: redis.Redis, prefix: str) -> str | None:
    """The id of the oldest entry kept, or ``None`` for an empty stream."""
    oldest = await kv.xrange(stream_key(prefix), count=1)
    return _text(oldest[0][0]) if oldest else None


async def read_after(
    kv: redis.Redis, prefix: str, after: str, count: int = 1_000
) -> list[tuple[str, LiveEvent]]:
    """Up to ``count`` entries after ``after`` (exclusive), oldest first."""
    raw: Any = await kv.xrange(stream_key(prefix), min=f"({after}", max="+", count=count)
    return [_entry(entry_id, fields) for entry_id, fields in raw]


@dataclass(eq=False)
class Subscription:
    """One stream's view of the hub: the entries it has not taken yet."""

    queue: asyncio.Queue[tuple[str, LiveEvent] | None] = field(
        default_factory=lambda: asyncio.Queue(SUBSCRIBER_BUFFER)
    )
    dropped: bool = False


class LiveHub:
    """The process's one reader of the stream (started on the first subscriber)."""

    def __init__(self, kv: redis.Redis, prefix: str) -> None:
        self.kv = kv
        self.prefix = prefix
        self._subscribers: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self._position: str | None = None
        self._started = asyncio.Event()
        self._closed = False
        #: Reading failed since the last entry delivered: events may have been lost.
        self._lost = False

    async def _run(self) -> None:
        while not self._closed:
            try:
                if self._position is None:
                    self._position = await last_id(self.kv, self.prefix)
                    self._started.set()
                answer: Any = await self.kv.xread(
                    {stream_key(self.prefix): self._position}, count=500, block=block_ms(self.kv)
                )
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as error:
                if self._closed:
                    # The client may turn the cancellation of a blocked read into an error.
                    return
                if not self._lost:
                    log.warning("reading live events failed (%s); retrying", error)
                # Events published meanwhile may be lost (a publisher that failed does not
                # retry, a restarted Redis keeps nothing): the subscribers must reload.
                self._lost = True
                await asyncio.sleep(1.0)
                continue
            if self._lost and self._position is not None:
                self._lost = False
                log.info("reading live events again; streams are told to reset")
                self._deliver((self._position, LiveEvent(RESET, "")))
            for _stream, entries in answer or ():
                for raw_id, raw_fields in entries:
                    entry = _entry(raw_id, raw_fields)
                    self._position = entry[0]
                    self._deliver(entry)

    def _deliver(self, entry: tuple[str, LiveEvent]) -> None:
        for subscription in list(self._subscribers):
            try:
                subscription.queue.put_nowait(entry)
            except asyncio.QueueFull:
                subscription.dropped = True
                self._subscribers.discard(subscription)
                with contextlib.suppress(asyncio.QueueEmpty):
                    subscription.queue.get_nowait()
                subscription.queue.put_nowait(None)

    async def subscribe(self) -> Subscription:
        """A new subscription; the hub reads the stream from now on.

        Once the hub is closed, the subscription is ended at once (a stream that subscribes
        while the application shuts down must not start the reader again).
        """
        if self._closed:
            ended = Subscription()
            ended.queue.put_nowait(None)
            return ended
        if self._task is None or self._task.done():
            self._started.clear()
            self._position = None
            self._task = asyncio.create_task(self._run(), name="live-events")
        await self._started.wait()
        subscription = Subscription()
        self._subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop delivering to ``subscription``."""
        self._subscribers.discard(subscription)

    async def close(self) -> None:
        """Stop reading; every subscriber's stream ends, and every later one at once."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for subscription in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                subscription.queue.put_nowait(None)
        self._subscribers.clear()

    async def events(
        self, resume_after: str | None, *, heartbeat: float
    ) -> AsyncIterator[tuple[str, LiveEvent] | None]:
        """Entries from now on, or after ``resume_after`` (``None``: a keep-alive is due).

        ``None`` comes every ``heartbeat`` seconds without an entry. The iteration ends when the
        subscriber falls too far behind (its client reconnects and resumes).

        :raises LiveResumeGap: ``resume_after`` is older than the oldest entry kept.
        """
        subscription = await self.subscribe()
        try:
            seen = (-1, -1)
            if resume_after is not None:
                oldest = await first_id(self.kv, self.prefix)
                if oldest is not None and stream_id_key(oldest) > stream_id_key(resume_after):
                    raise LiveResumeGap(oldest)
                after = resume_after
                while True:
                    batch = await read_after(self.kv, self.prefix, after)
                    for entry in batch:
                        seen = stream_id_key(entry[0])
                        yield entry
                    if len(batch) < 1_000:
                        break
                    after = batch[-1][0]
            while True:
                try:
                    item = await asyncio.wait_for(subscription.queue.get(), heartbeat)
                except TimeoutError:
                    yield None
                    continue
                if item is None:
                    return
                if item[1].type == RESET:
                    yield item
                    continue
                if stream_id_key(item[0]) <= seen:
                    continue
                seen = stream_id_key(item[0])
                yield item
        finally:
            self.unsubscribe(subscription)


class LiveResumeGap(Exception):
    """The client asked to resume after an entry the stream no longer keeps."""

    def __init__(self, oldest: str) -> None:
        super().__init__(oldest)
        self.oldest = oldest
