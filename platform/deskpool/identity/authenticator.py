"""From a bearer token to a :class:`Principal`, cheaply on the warm path.

The auth provider verifies the token (and caches verified tokens until their expiry). This
module turns the verified identity into a principal: the user is created at first sign-in
(bootstrap admins receive ``platform_admin`` then, in the same transaction, with audit events:
see :mod:`deskpool.identity.sign_in`),
and its groups, grants and effective permissions are resolved from the database once, then
cached in the process. Any change to grants, memberships, bindings or roles calls
:func:`identity_changed`, which publishes on a Redis channel; every process clears its cache
when it hears it (and entries also expire after :data:`PRINCIPAL_CACHE_SECONDS`, in case a
message is lost). The warm path touches neither the database nor Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter
from redis.exceptions import RedisError

from deskpool.auth import AuthProvider, VerifiedToken, bearer_token_from_header
from deskpool.errors import Forbidden, ServiceUnavailable, Unauthenticated
from deskpool.identity import store
from deskpool.identity.kinds import principal_kind
from deskpool.identity.operator import apply_bootstrap_bindings
from deskpool.identity.principal import Principal
from deskpool.identity.sign_in import resolve_effective, sign_in
from deskpool.kv import subscription
from deskpool.live import bus
from deskpool.live.model import LiveEvent
from deskpool.outages import DATABASE, outage_of

if TYPE_CHECKING:
    from deskpool.config import Config
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: How long a resolved principal is reused without hearing of a change.
PRINCIPAL_CACHE_SECONDS = 60.0
#: How many principals one process keeps.
PRINCIPAL_CACHE_SIZE = 10_000

_CacheKey = tuple[str, str, str, tuple[str, ...], tuple[str, ...], str | None, str | None]


def invalidation_channel(config: Config) -> str:
    """The Redis channel on which identity changes are announced."""
    return f"{config['KVSTORE_KEY_PREFIX']}identity:changed"


def generation_key(config: Config) -> str:
    """The Redis counter every identity change increments (readers compare it)."""
    return f"{config['KVSTORE_KEY_PREFIX']}identity:generation"


#: The live event that marks an identity change in the event stream (never sent to clients).
IDENTITY_CHANGED_EVENT = "identity.changed"


async def identity_changed(runtime: Runtime) -> None:
    """Announce that grants, memberships, bindings or roles changed (call after commit).

    Every process drops its cached principals; the live event stream also gets a marker
    (:data:`IDENTITY_CHANGED_EVENT`), so each open stream reads its subscriber's permissions
    again before any event published after the change; and :func:`generation_key` grows (the
    outage snapshot reads every principal again when it did).
    """
    try:
        await runtime.kv.incr(generation_key(runtime.config))
        await runtime.kv.publish(invalidation_channel(runtime.config), b"1")
    except RedisError:
        log.warning(
            "could not announce an identity change; caches expire within %ss",
            PRINCIPAL_CACHE_SECONDS,
        )
    await bus.publish(
        runtime.kv, runtime.config["KVSTORE_KEY_PREFIX"], LiveEvent(IDENTITY_CHANGED_EVENT, "")
    )


class PrincipalMemory(Protocol):
    """Where principals are remembered for a database outage (the composition gives one).

    :mod:`deskpool.outage_brokering.snapshot` implements it; the authenticator remembers each
    principal it resolves from the database, and recalls a known user's while the database is
    away.
    """

    async def remember(self, principal: Principal) -> None:
        """Keep ``principal`` as of this sign-in (best effort, never raises for Redis)."""
        ...

    async def recall(self, token: VerifiedToken) -> Principal | None:
        """The remembered principal of ``token``'s user (``None``: not known)."""
        ...

    async def written(self) -> None:
        """Wait until what was remembered so far is kept (or failed to be)."""
        ...


class FirstSignInUnavailable(ServiceUnavailable):
    """The database is away and the caller never signed in (or with other claims): 503."""

    code = "dependency_unavailable"
    title = "A dependency is unavailable"


class AuthMetrics:
    """How authentication goes: outcomes, and how often the principal cache serves."""

    OUTCOMES = ("authenticated", "unauthenticated", "unavailable", "disabled")

    def __init__(self, registry: CollectorRegistry) -> None:
        requests = Counter(
            "deskpool_auth_requests",
            "Protected calls by authentication outcome.",
            ["outcome"],
            registry=registry,
        )
        cache = Counter(
            "deskpool_auth_principal_cache",
            "Principal look-ups served from the process cache (hit) or resolved (miss).",
            ["result"],
            registry=registry,
        )
        # Children made once: the hot path only increments.
        self.outcome = {name: requests.labels(name) for name in self.OUTCOMES}
        self.cache_hit = cache.labels("hit")
        self.cache_miss = cache.labels("miss")


class Authenticator:
    """Authenticates requests for one process.

    :param runtime: the process runtime.
    :param provider: the auth provider chosen by ``AUTH_PROVIDER``.
    """

    def __init__(self, runtime: Runtime, provider: AuthProvider) -> None:
        self.runtime = runtime
        self.provider = provider
        self.config = runtime.config
        self._cache: OrderedDict[_CacheKey, tuple[float, Principal]] = OrderedDict()
        # Grows with every clear: a principal resolved while a change was announced may be
        # from before the change, and is not cached.
        self._generation = 0
        self._listener: asyncio.Task[None] | None = None
        self.metrics = AuthMetrics(runtime.metrics)
        #: Set once per change, then renewed (see :meth:`wait_changed`).
        self._changed = asyncio.Event()
        #: Where principals are remembered for a database outage (``None``: nowhere).
        self.memory: PrincipalMemory | None = None

    @property
    def configured(self) -> bool:
        """Whether the auth provider has the settings it needs (SPEC §5.1.4)."""
        return self.provider.configured

    async def start(self) -> None:
        """Create the bootstrap bindings, start the provider and the invalidation listener."""
        await self._create_bootstrap_bindings(self.config["AUTH_BOOTSTRAP_OIDC_GROUP_BINDINGS"])
        await self.provider.start()
        self._listener = asyncio.create_task(self._listen(), name="identity-invalidation")

    async def close(self) -> None:
        """Stop the listener and the provider; what the memory was given is kept first."""
        if self.memory is not None:
            await self.memory.written()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        await self.provider.close()

    def clear(self) -> None:
        """Forget every cached principal (and any being resolved now); wake change waiters."""
        self._generation += 1
        self._cache.clear()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @property
    def generation(self) -> int:
        """How many identity changes this process heard of (long-lived requests compare it)."""
        return self._generation

    async def wait_changed(self) -> None:
        """Wait for the next identity change (bound it with ``asyncio.timeout``)."""
        await self._changed.wait()

    async def reload(self, principal: Principal) -> Principal:
        """``principal`` as the database says now: disabled, groups, permissions.

        The claims of its token are kept (the token was verified already). A user that no
        longer exists comes back disabled. Long-lived requests (the live event stream) call it
        when :attr:`generation` moved.
        """
        async with self.runtime.db.acquire() as connection:
            user = await store.get_user(connection, uuid.UUID(principal.id))
            groups, effective = await resolve_effective(
                connection, principal.id, principal.claimed_groups, principal.claimed_roles
            )
        return replace(
            principal,
            disabled=user is None or bool(user["disabled"]),
            groups=groups,
            effective=effective,
        )

    async def _listen(self) -> None:
        channel = invalidation_channel(self.config)
        delay = 0.5
        while True:
            try:
                async with subscription(self.runtime.kv, channel) as pubsub:
                    delay = 0.5
                    self.clear()  # anything may have changed while not subscribed
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self.clear()
            except (RedisError, OSError) as error:
                log.warning("identity invalidation channel lost (%s); retrying", error)
                self.clear()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _create_bootstrap_bindings(self, bindings: tuple[tuple[str, str], ...]) -> None:
        async with self.runtime.db.acquire() as connection:
            changed = await apply_bootstrap_bindings(connection, bindings)
        if changed:
            await identity_changed(self.runtime)

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization`` header value.

        :raises AuthNotConfigured: the auth provider lacks its settings (503).
        :raises Unauthenticated: no token, or one the provider does not accept (401).
        :raises ServiceUnavailable: the provider cannot verify yet (503).
        :raises Forbidden: the user is disabled (403).
        """
        if not self.configured:
            raise self.provider.not_configured_error()
        try:
            token = bearer_token_from_header(authorization)
            verified = await self.provider.verify(token)
        except Unauthenticated:
            self.metrics.outcome["unauthenticated"].inc()
            raise
        except ServiceUnavailable:
            self.metrics.outcome["unavailable"].inc()
            raise
        # The kind is part of the key: a client and a person with one subject are two users.
        key: _CacheKey = (
            verified.issuer,
            verified.subject,
            principal_kind(verified.subject, verified.claims),
            verified.groups,
            verified.roles,
            verified.email,
            verified.name,
        )
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < PRINCIPAL_CACHE_SECONDS:
            principal = cached[1]
            self.metrics.cache_hit.inc()
        else:
            self.metrics.cache_miss.inc()
            generation = self._generation
            principal, resolved = await self._resolve(verified)
            # Cached only when committed (_resolve returns after the commit) and no change
            # was announced meanwhile; never when recalled during an outage.
            if resolved and generation == self._generation:
                self._cache[key] = (now, principal)
                self._cache.move_to_end(key)
                while len(self._cache) > PRINCIPAL_CACHE_SIZE:
                    self._cache.popitem(last=False)
        if principal.disabled:
            self.metrics.outcome["disabled"].inc()
            raise Forbidden("This account is disabled.")
        self.metrics.outcome["authenticated"].inc()
        return principal

    async def _resolve(self, token: VerifiedToken) -> tuple[Principal, bool]:
        """The principal from the database (``True``), or, while it is away, as remembered.

        A principal recalled from the memory is not cached in the process: the database
        resolves it again as soon as it answers.
        """
        memory = self.memory
        try:
            # One statement, committed on its own (sign_in opens a transaction where needed).
            async with self.runtime.db.acquire() as connection:
                principal = await sign_in(connection, self.config, token)
        except Exception as error:
            if memory is None or outage_of(error) != DATABASE:
                raise
            recalled = await memory.recall(token)
            if recalled is None:
                raise FirstSignInUnavailable(
                    "The database is unavailable, and this account is not known without it "
                    "(a first sign-in, or new groups or roles, need it); retry it.",
                    headers={"Retry-After": "2"},
                ) from None
            return recalled, False
        if memory is not None:
            await memory.remember(principal)
        return principal, True
