"""The licensing use cases: install, remove, show the state, check a growth, judge and record.

The CLI, the worker and the pools' reconciliation call these; each validates, changes and
audits in one transaction on the connection it is given (the API calls :func:`state_of`,
:func:`install` and :func:`remove`, which take the connection from the runtime). Growth checks
(:func:`check_can_create_pool`, :func:`desktop_headroom`, and the sessions' in
:mod:`deskpool.licensing.sessions`) take
a transaction-scoped lock, so two transactions never both take the last unit of a limit; call
them inside the transaction that makes the growth.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deskpool.actor import Actor
from deskpool.events import Outcome
from deskpool.licensing import store
from deskpool.licensing.context import LicensingContext
from deskpool.licensing.document import LicenseRefused, check_installable, verify_document
from deskpool.licensing.manifest import ManifestCheck
from deskpool.licensing.model import (
    CLOCK_SKEW_TOLERANCE,
    ClockReading,
    Judgement,
    License,
    LicenseLimitReached,
    Resource,
    Usage,
    WatermarkView,
    check_growth,
    format_instant,
    headroom,
    judge,
    judged_time,
    limit_reason,
)
from deskpool.licensing.reporting import (
    LicenseReporter,
    ReportFailed,
    activation_report,
    first_due,
    next_due,
    retry_delay,
)
from deskpool.licensing.watermark import Seen, StoredWatermark, advance, cleared, inspect

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: The resource type of licensing audit events (the permission model's ``license``).
LICENSE = "license"


async def _record(
    connection: asyncpg.Connection,
    context: LicensingContext,
    actor: Actor,
    action: str,
    details: dict[str, Any],
    outcome: Outcome = "success",
) -> None:
    """Record an event of ``actor`` on the license (its id, when the details name one).

    It is stamped with this process's clock, whatever it says: an event whose month has no
    partition is kept in the audit trail's default partition (:mod:`deskpool.audit`).
    """
    resource_id = str(details.get("license_id") or "") or None
    await actor.record(
        connection, action, LICENSE, resource_id, details, outcome, occurred_at=context.now()
    )


#: Automatic changes (expiry, watermark evidence) are recorded as this actor.
SYSTEM = Actor.system("system:licensing")


@dataclass(frozen=True)
class LicenseState:
    """Everything ``license:read`` shows."""

    judgement: Judgement
    usage: Usage
    watermark: WatermarkView
    build: ManifestCheck
    installation: store.Installation | None
    reports: store.ReportRecord
    instance_id: str
    #: This process's clock against the database server's and the watermark.
    clock: ClockReading


@dataclass(frozen=True)
class Headroom:
    """How many more desktops may be created (``None``: no limit), and the limit's reason."""

    room: int | None
    reason: str

    def cap(self, wanted: int) -> tuple[int, str | None]:
        """How many of ``wanted`` may be created, and why the rest may not (``None``: all)."""
        if self.room is None or wanted <= self.room:
            return wanted, None
        held = wanted - self.room
        return self.room, f"{held} desktop(s) not created: {self.reason}"


# --------------------------------------------------------------------------- judging


def _floor(installation: store.Installation | None, context: LicensingContext) -> Seen | None:
    """The lowest the watermark may be: what this process saw, and the license's installation.

    Installing a license persists the watermark first, and the installation time is the
    database's clock, so a watermark earlier than it (less the skew tolerance) moved backwards,
    even to a process that has just started (an old row put back, a restored backup).
    """
    floor = context.seen
    if installation is not None:
        witnessed = installation.installed_at - CLOCK_SKEW_TOLERANCE
        if floor is None or witnessed > floor.instant:
            floor = Seen(floor.seq if floor is not None else 0, witnessed)
    return floor


@dataclass(frozen=True)
class _Reading:
    """The installation, what the stored watermark is worth, and the clocks, read together."""

    installation: store.Installation | None
    watermark: WatermarkView
    clock: ClockReading


async def _read(
    connection: asyncpg.Connection, context: LicensingContext, read: store.Snapshot | None = None
) -> _Reading:
    """The installation, the stored watermark's worth and the clocks (one round trip).

    :param read: the snapshot, when the caller read it in a statement of its own.
    """
    snapshot = read or await store.snapshot(connection)
    instance = snapshot.instance_id or await store.instance_id(connection)
    row, installation = snapshot.watermark, snapshot.installation
    view = inspect(row, context.watermark_keys, instance, _floor(installation, context))
    if row is not None and view.trusted:
        context.remember(connection, row.seq, row.instant)
    metrics = context.metrics
    if metrics is not None:
        _show(connection, context, lambda: metrics.observe_watermark(view))
    clock = ClockReading(context.now(), snapshot.database_time, view.instant)
    context.report_clock(clock)
    return _Reading(installation, view, clock)


def _observe(
    connection: asyncpg.Connection, context: LicensingContext, judgement: Judgement, usage: Usage
) -> None:
    """Show ``judgement`` and ``usage`` in the metrics (once committed)."""
    metrics = context.metrics
    if metrics is not None:
        _show(connection, context, lambda: metrics.observe(judgement, usage))


def _show(connection: asyncpg.Connection, context: LicensingContext, change: Any) -> None:
    """Update a metric with what was read on ``connection`` (once it is committed)."""
    context.commits.apply(connection, change, foreign="apply")


def _installed_license(
    installation: store.Installation | None, context: LicensingContext
) -> tuple[License | None, str | None]:
    """The installed license verified, or why it is refused.

    The verdict depends on the document and the trusted keys only: it is remembered for the
    last pair (every opening judges the license, issue 39), and made again for another.
    """
    if installation is None:
        return None, None
    trusted = context.trusted()
    seen = (
        installation.document,
        tuple(
            sorted(
                (key_id, key.public_bytes(Encoding.Raw, PublicFormat.Raw))
                for key_id, key in trusted.items()
            )
        ),
    )
    remembered = context.verified
    if remembered is not None and remembered[0] == seen:
        return remembered[1]
    verdict: tuple[License | None, str | None]
    try:
        verdict = verify_document(installation.document, trusted), None
    except LicenseRefused as refused:
        verdict = None, f"{refused.detail} ({refused.code})"
    context.verified = (seen, verdict)
    return verdict


async def current_judgement(connection: asyncpg.Connection, context: LicensingContext) -> Judgement:
    """Judge the installed license now (the limits in force)."""
    return _judge(connection, context, await _read(connection, context))


def _judge(connection: asyncpg.Connection, context: LicensingContext, read: _Reading) -> Judgement:
    license, invalid = _installed_license(read.installation, context)
    judgement = judge(
        license,
        now=read.clock.process,
        watermark=read.watermark,
        build=context.check_build().state,
        invalid_reason=invalid,
        clock=read.clock,
    )
    metrics = context.metrics
    if metrics is not None:
        _show(connection, context, lambda: metrics.observe(judgement))
    return judgement


async def license_state(connection: asyncpg.Connection, context: LicensingContext) -> LicenseState:
    """The license state, usage, watermark, build integrity and last activation report."""
    read = await _read(connection, context)
    judgement = _judge(connection, context, read)
    usage = await store.usage(connection)
    metrics = context.metrics
    if metrics is not None:
        _show(connection, context, lambda: metrics.observe(judgement, usage))
    return LicenseState(
        judgement=judgement,
        usage=usage,
        watermark=read.watermark,
        build=context.check_build(),
        installation=read.installation,
        clock=read.clock,
        reports=await store.get_reports(connection),
        instance_id=await store.instance_id(connection),
    )


async def record_judgement(
    connection: asyncpg.Connection,
    context: LicensingContext,
    judgement: Judgement,
    *,
    actor: Actor = SYSTEM,
    audit: bool = True,
) -> bool:
    """Record ``judgement`` as the deployment's state; audit it when it changed.

    Returns whether it changed. Any number of processes may call it: a change is recorded (and
    audited) once, in one transaction; it is counted and logged once that commits.
    """
    status, edition = judgement.status.value, judgement.edition.value
    async with context.commits.transaction(connection):
        previous = await store.get_judged(connection)
        if (previous.status, previous.edition) == (status, edition):
            return False
        if not await store.set_judged(connection, status, edition, previous):
            return False
        if audit:
            details = {
                "license_id": judgement.license.id if judgement.license else None,
                "from": {"status": previous.status, "edition": previous.edition},
                "to": {"status": status, "edition": edition},
                "reasons": list(judgement.reasons),
            }
            await _record(connection, context, actor, "license.state_change", details)
        context.commits.apply(connection, lambda: _changed(context, judgement))
    return True


def _changed(context: LicensingContext, judgement: Judgement) -> None:
    """Count and log a recorded change of state (after it was committed)."""
    status = judgement.status.value
    if context.metrics is not None:
        context.metrics.changes.labels(status).inc()
    log.info(
        "license state: %s (%s edition)%s",
        status,
        judgement.edition.value,
        "".join(f"; {reason}" for reason in judgement.reasons),
    )


async def clock_reading(connection: asyncpg.Connection, context: LicensingContext) -> ClockReading:
    """This process's clock against the database server's and the stored watermark.

    Logged when skewed beyond the tolerance; ``/readyz`` shows it.
    """
    database, watermark = await store.clocks(connection)
    reading = ClockReading(context.now(), database, watermark)
    context.report_clock(reading)
    return reading


# --------------------------------------------------------------------------- install, remove


async def install_license(
    connection: asyncpg.Connection, context: LicensingContext, document: str, actor: Actor
) -> LicenseState:
    """Verify and install a license document, replacing any installed one.

    :raises LicenseRefused: malformed, modified, for another product, forged or expired (each
        its own subclass and code); the refusal is audited.
    """
    try:
        license = verify_document(document, context.trusted())
        read = await _read(connection, context)
        check_installable(license, judged_time(read.clock.process, read.watermark))
    except LicenseRefused as refused:
        details = {"code": refused.code, "detail": refused.detail}
        await _record(connection, context, actor, "license.install", details, "failure")
        raise
    async with context.commits.transaction(connection):
        # The watermark is persisted before the installation, whose time is its floor.
        await persist_watermark(connection, context)
        previous = await store.get_installation(connection)
        await store.put_installation(connection, license.id, document, actor.name)
        await _clear_evidence_before(connection, context, license)
        await _record(
            connection,
            context,
            actor,
            "license.install",
            {
                "license_id": license.id,
                "edition": license.edition.value,
                "expires_at": format_instant(license.expires_at),
                "limits": license.limits.as_dict(),
                "replaced": previous.license_id if previous else None,
            },
        )
        await record_judgement(
            connection, context, await current_judgement(connection, context), audit=False
        )
    return await license_state(connection, context)


async def _clear_evidence_before(
    connection: asyncpg.Connection, context: LicensingContext, license: License
) -> None:
    """A license issued after the watermark's evidence was recorded clears the evidence."""
    row = await store.get_watermark(connection, for_update=True)
    if row is None or row.evidence_at is None or license.issued_at <= row.evidence_at:
        return
    instance = await store.instance_id(connection)
    following = cleared(row, context.now(), context.watermark_keys, instance)
    await store.write_watermark(connection, following)
    context.remember(connection, following.seq, following.instant)
    log.warning(
        "license %s was issued after the watermark evidence (%s); the evidence is cleared",
        license.id,
        row.evidence,
    )


async def remove_license(
    connection: asyncpg.Connection, context: LicensingContext, actor: Actor
) -> LicenseState:
    """Remove the installed license: the free edition's limits apply (nothing is deleted).

    Removing when none is installed changes nothing and records nothing.
    """
    async with context.commits.transaction(connection):
        removed = await store.delete_installation(connection)
        if removed is None:
            return await license_state(connection, context)
        await _record(connection, context, actor, "license.remove", {"license_id": removed})
        await record_judgement(
            connection, context, await current_judgement(connection, context), audit=False
        )
    return await license_state(connection, context)


# --------------------------------------------------------------------------- with a runtime


async def state_of(runtime: Runtime) -> LicenseState:
    """:func:`license_state` on a connection of ``runtime`` (what ``GET /license`` shows)."""
    async with runtime.db.acquire() as connection:
        return await license_state(connection, runtime.licensing)


async def install(runtime: Runtime, document: str, actor: Actor) -> LicenseState:
    """:func:`install_license` on a connection of ``runtime``."""
    async with runtime.db.acquire() as connection:
        return await install_license(connection, runtime.licensing, document, actor)


async def remove(runtime: Runtime, actor: Actor) -> LicenseState:
    """:func:`remove_license` on a connection of ``runtime``."""
    async with runtime.db.acquire() as connection:
        return await remove_license(connection, runtime.licensing, actor)


# --------------------------------------------------------------------------- growth


async def _growth(
    connection: asyncpg.Connection, context: LicensingContext
) -> tuple[Judgement, Usage]:
    await store.lock_growth(connection)
    judgement = await current_judgement(connection, context)
    usage = await store.usage(connection)
    metrics = context.metrics
    if metrics is not None:
        _show(connection, context, lambda: metrics.observe(judgement, usage))
    return judgement, usage


async def _check(
    connection: asyncpg.Connection, context: LicensingContext, resource: Resource
) -> None:
    judgement, usage = await _growth(connection, context)
    _check_judged(context, judgement, usage, resource)


def _check_judged(
    context: LicensingContext, judgement: Judgement, usage: Usage, resource: Resource
) -> None:
    try:
        check_growth(judgement, usage, resource)
    except LicenseLimitReached:
        if context.metrics is not None:
            context.metrics.growth_refused.labels(resource.value).inc()
        raise


async def check_can_create_pool(connection: asyncpg.Connection, context: LicensingContext) -> None:
    """Allow one more pool, or raise :class:`~deskpool.licensing.model.LicenseLimitReached`."""
    await _check(connection, context, Resource.POOLS)


async def desktop_headroom(connection: asyncpg.Connection, context: LicensingContext) -> Headroom:
    """How many more desktops may be created now (call it in the creating transaction)."""
    judgement, usage = await _growth(connection, context)
    room = headroom(judgement, usage, Resource.DESKTOPS)
    reason = "" if room is None else limit_reason(judgement, usage, Resource.DESKTOPS)
    return Headroom(room, reason)


async def cap_desktops(
    connection: asyncpg.Connection, context: LicensingContext, wanted: int
) -> tuple[int, str | None]:
    """How many of ``wanted`` new desktops may be created, and why not the rest.

    Reconciliation calls it in the transaction that inserts the desktops: it creates what the
    limit allows, never more, and shows the reason on the pool.
    """
    allowed, held = (await desktop_headroom(connection, context)).cap(wanted)
    if held is not None and context.metrics is not None:
        context.metrics.growth_refused.labels(Resource.DESKTOPS.value).inc(wanted - allowed)
    return allowed, held


# --------------------------------------------------------------------------- the watermark


async def persist_watermark(
    connection: asyncpg.Connection, context: LicensingContext
) -> WatermarkView:
    """Persist the highest time seen; record and audit evidence of tampering once.

    Safe with any number of workers at once: the row is locked while it is advanced, and the
    stored instant only ever grows (``GREATEST``). Returns what the stored row was worth. The
    process remembers the new watermark only once it is committed (nested in the caller's
    transaction: once that commits).
    """
    async with context.commits.transaction(connection):
        instance = await store.instance_id(connection)
        row = await store.get_watermark(connection, for_update=True)
        # The highest time seen: this process's clock and the database's.
        now = max(context.now(), await store.database_now(connection))
        floor = _floor(await store.get_installation(connection), context)
        following, view = advance(row, now, context.watermark_keys, instance, floor)
        await store.write_watermark(connection, following)
        if view.evidence and _newly_recorded(row, following):
            log.warning("license watermark %s: %s", view.integrity.value, view.detail)
            await _record(
                connection,
                context,
                SYSTEM,
                f"license.watermark_{view.integrity.value}",
                {"detail": view.detail, "watermark": _instant(following.instant)},
                "failure",
            )
        context.remember(connection, following.seq, following.instant)
    if context.metrics is not None and not connection.is_in_transaction():
        await _read(connection, context)
    return view


def _newly_recorded(row: StoredWatermark | None, following: StoredWatermark) -> bool:
    return following.evidence is not None and (
        row is None or row.evidence_at != following.evidence_at
    )


def _instant(moment: datetime | None) -> str | None:
    return format_instant(moment) if moment is not None else None


# --------------------------------------------------------------------------- activation reports


async def send_report_if_due(
    connection: asyncpg.Connection,
    context: LicensingContext,
    reporter: LicenseReporter,
    interval: timedelta,
    rng: random.Random,
) -> str:
    """Send the activation report when one is due; what happened, in a word.

    ``free``: the free edition's limits are in force, nothing is ever sent; ``disabled``: the
    reporter is off (``LICENSE_REPORT_URL`` empty); ``scheduled``: the first report was given
    its time; ``waiting``: not due yet; ``sent`` or ``failed``: an attempt was made (a failure
    is retried with backoff). Only one worker runs this at a time (a periodic task).
    """
    judgement = await current_judgement(connection, context)
    if not judgement.licensed:
        return "free"
    if not reporter.enabled:
        return "disabled"
    record = await store.get_reports(connection)
    now = context.now()
    if record.next_due_at is None:
        await store.schedule_report(connection, first_due(now, interval, rng))
        return "scheduled"
    if now < record.next_due_at:
        return "waiting"
    payload = activation_report(
        instance_id=await store.instance_id(connection),
        version=context.version,
        judgement=judgement,
        build=context.check_build().state,
        usage=await store.usage(connection),
        sent_at=now,
    )
    outcome, error = "sent", None
    try:
        await reporter.send(payload)
    except ReportFailed as failure:
        outcome, error = "failed", str(failure)[:500]
    due = (
        next_due(now, interval, rng)
        if outcome == "sent"
        else now + retry_delay(record.consecutive_failures + 1, interval)
    )
    await store.record_report(
        connection, attempted_at=now, outcome=outcome, error=error, next_due_at=due
    )
    if context.metrics is not None:
        context.metrics.reports.labels(outcome).inc()
    if error is not None:
        log.warning("activation report failed (%s); next attempt at %s", error, _instant(due))
    return outcome
