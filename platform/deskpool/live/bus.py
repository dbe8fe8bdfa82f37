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
import weakref
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
    """Add ``event`` to the stream; its id, or ``None`` when Redis failed (logged, not raised).

    Returns once the event is in the stream. Events published while another write of this
    client is on its way go together in the next write (:class:`_Gathering`): at 9 a.m. every
    opening and redemption publishes one, and an ``XADD`` each was 4 % of the api's and 6 % of
    the gateway's time (issue 39). Alone, an event is written at once, by itself.
    """
    loop = asyncio.get_running_loop()
    key = stream_key(prefix)
    gatherings = _GATHERINGS.setdefault(kv, {})
    gathering = gatherings.get(key)
    if gathering is None or gathering.loop is not loop:
        gathering = gatherings[key] = _Gathering(loop)
    written: asyncio.Future[str | None] = loop.create_future()
    gathering.waiting.append((event, written))
    if gathering.writer is None or gathering.writer.done():
        gathering.writer = loop.create_task(gathering.write(kv, key), name="live-publish")
    # A caller cancelled meanwhile does not take its event back: it is written all the same.
    return await asyncio.shield(written)


@dataclass(eq=False)
class _Gathering:
    """The events waiting to be added to one stream through one client, and their writer."""

    loop: asyncio.AbstractEventLoop
    waiting: list[tuple[LiveEvent, asyncio.Future[str | None]]] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None

    async def write(self, kv: redis.Redis, key: str) -> None:
        """Write what waits, in order, one batch at a time, until nothing does."""
        batch: list[tuple[LiveEvent, asyncio.Future[str | None]]] = []
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                ids = await _add(kv, key, [event for event, _ in batch])
                for (_, written), entry_id in zip(batch, ids, strict=True):
                    if not written.done():
                        written.set_result(entry_id)
                batch = []
        except Exception as error:  # not Redis's failures (those are logged, ids None): a bug
            for _, written in (*batch, *self.waiting):
                if not written.done():
                    written.set_exception(error)  # raised in its publisher, as it was before
            self.waiting = []
        finally:
            # Cancelled (the process stops): nobody waits for ever for an event not written.
            for _, written in (*batch, *self.waiting):
                if not written.done():
                    written.set_result(None)


#: The gatherings of each client, by stream key (a client that is gone takes its own along).
_GATHERINGS: weakref.WeakKeyDictionary[redis.Redis, dict[str, _Gathering]] = (
    weakref.WeakKeyDictionary()
)


async def _add(kv: redis.Redis, key: str, events: Sequence[LiveEvent]) -> list[str | None]:
    """``XADD`` ``events`` to the stream ``key`` in order, in one command; their ids.

    Every id is ``None`` when Redis failed (logged, not raised).
    """
    try:
        if len(events) == 1:
            # The stream entry as redis types it (its dict is invariant in its types).
            entry: dict[FieldT, EncodableT] = dict(events[0].fields().items())
            raw: Any = [await kv.xadd(key, entry, maxlen=STREAM_LENGTH, approximate=True)]
        else:
            raw = await _script(kv, key, events, _XADD_EACH, _XADD_EACH_SHA)
    except (RedisError, OSError) as error:
        for event in events:
            log.warning(
                "live event %s of %s not published: %s", event.type, event.resource_id, error
            )
        return [None] * len(events)
    return [_text(entry_id) for entry_id in raw]


async def _script(
    kv: redis.Redis, key: str, events: Sequence[LiveEvent], script: str, sha: str
) -> Any:
    """Run ``script`` (:data:`_XADD_MANY`'s arguments) over ``events``, loading it if needed."""
    batch = json.dumps(
        [[part for field in event.fields().items() for part in field] for event in events],
        separators=(",", ":"),
    )
    try:
        return await kv.evalsha(sha, 1, key, STREAM_LENGTH, batch)
    except NoScriptError:
        return await kv.eval(script, 1, key, STREAM_LENGTH, batch)


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
#: :data:`_XADD_MANY` returning the entries' ids, in order (:func:`publish`'s batches).
_XADD_EACH = """
local events = cjson.decode(ARGV[2])
local ids = {}
for i, fields in ipairs(events) do
  ids[i] = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
end
return ids
"""
_XADD_EACH_SHA = hashlib.sha1(_XADD_EACH.encode()).hexdigest()


async def publish_many(kv: redis.Redis, prefix: str, events: Sequence[LiveEvent]) -> int:
    """Add ``events`` to the stream in order, in one command; how many were added.

    The same entries as :func:`publish` for each, at the cost of one round trip (a script, so
    the batch is one command). A Redis failure is logged, not raised.
    """
    if not events:
        return 0
    try:
        added = await _script(kv, stream_key(prefix), events, _XADD_MANY, _XADD_MANY_SHA)
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
