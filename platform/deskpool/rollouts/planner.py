"""The pure rollout planner: what a pool's active rollout does in one reconciliation pass.

:func:`plan_rollout` takes the pool, its desktops, the rollout with its per-desktop entries and
the time, and returns a :class:`~deskpool.rollouts.plan.RolloutPlan`. The pool planner
(:func:`deskpool.reconciliation.planner.plan_pool`) calls it and folds the result into the pool's
plan.
The rules, in order:

1. *Bookkeeping.* An entry ``replacing`` whose desktop is ready (or in use) on the new
   template is ``replaced``; one whose desktop failed is ``failed``; one waiting for a log-off
   whose desktop is being rebuilt (its user logged off) is ``replacing``. A desktop gone from
   the pool counts as replaced.
2. *Start.* A ``scheduled`` rollout starts at ``start_at``: ``canary`` (or ``rolling`` when
   ``canary`` is 0). A ``paused`` one only does the bookkeeping.
3. *Stop on error.* With ``stop_on_error``, a failed canary or batch desktop stops the rollout
   in ``failed``: the pool clones the old template again and the reason says which desktop
   failed and why.
4. *Canary.* Up to ``canary`` desktops are replaced, and nothing else is touched until every
   one of them is ready on the new template; then the rollout is ``rolling`` and the pool
   clones the new template.
5. *Rolling.* At most ``batch_size`` desktops are being replaced at once. Free desktops go
   first (used ones and those a schedule powered off, which no user can be given at once
   anyway, before clean ones); a ready, clean,
   free desktop is only taken while at least ``min_ready`` such desktops remain. When that
   cannot be kept, the pool may create ``extra`` desktops first, never more records than
   ``max_size + surge``; only when it can create none, and nothing is being replaced, is one
   desktop replaced anyway (the rollout could not avoid it otherwise). Desktops in use come
   last: with ``wait_for_logoff`` they are replaced once their user logs off; with
   ``force_logoff`` their user is warned and logged off ``warning_seconds`` later.
   Desktops assigned to a user of a persistent pool keep their disks unless
   ``recreate_assigned``. When no desktop in scope is left on the old template and the pool
   is back at the size it keeps (:func:`kept_size`: the desktops the rollout's ``surge``
   added are removed first), the rollout ``succeeded``.

The planner does no I/O: the invariants (``min_ready``, ``max_size + surge``, no desktop in
use replaced before its time) are checked by unit and property tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from uuid import UUID

from deskpool.pools.model import Desktop, DesktopState, Pool
from deskpool.rollouts.model import (
    ENDED,
    EntryRole,
    EntryState,
    InUsePolicy,
    Rollout,
    RolloutCounts,
    RolloutDesktop,
    RolloutState,
    serving_template,
)
from deskpool.rollouts.plan import (
    ChangeRollout,
    ForceLogoff,
    ReplaceForRollout,
    RolloutAction,
    RolloutPlan,
    SettleEntry,
    WaitForLogoff,
    WarnUser,
)

S = DesktopState
E = EntryState

#: Desktop states in which a VM is being built (after a log-off, a refresh or a retry).
_BUILDING = frozenset(
    {S.PROVISIONING, S.STARTING, S.WAITING_FOR_AGENT, S.WAITING_FOR_WINDOWS, S.REFRESHING}
)

#: Entry states of desktops whose user the rollout waits for.
_WAITING = frozenset({E.WAITING_FOR_LOGOFF, E.WARNED})


@dataclass(frozen=True, slots=True)
class RolloutView:
    """A pool's active rollout and its per-desktop entries (by desktop id)."""

    rollout: Rollout
    entries: Mapping[UUID, RolloutDesktop]


def _is_live(desktop: Desktop) -> bool:
    return not (
        desktop.state is S.DELETING
        or (desktop.state is S.FAILED and desktop.failed_step is S.DELETING)
    )


def on_template(desktop: Desktop, template: str) -> bool:
    """Whether ``desktop`` is ready or in use on ``template``."""
    return desktop.template == template and desktop.state in (S.READY, S.IN_USE)


def in_use(desktop: Desktop) -> bool:
    """Whether a user is logged on to ``desktop`` (in use, or with a session open)."""
    return desktop.state is S.IN_USE or desktop.in_session


class _Pass:
    """One pass over one pool's rollout (:func:`plan_rollout`)."""

    def __init__(
        self,
        pool: Pool,
        desktops: Sequence[Desktop],
        view: RolloutView,
        now: datetime,
        floor: int = 0,
    ) -> None:
        self.pool = pool
        self.floor = floor
        self.shrink_to: int | None = None
        self.rollout = view.rollout
        self.now = now
        self.entries = dict(view.entries)
        self.desktops = [d for d in desktops if d.pool_id == pool.id]
        self.by_id = {d.id: d for d in self.desktops}
        self.actions: list[RolloutAction] = []
        self.touched: set[UUID] = set()
        self.extra = 0

    # ------------------------------------------------------------------ scope and counts

    def kept(self, desktop: Desktop) -> bool:
        """Whether the desktop keeps its disks (assigned in a persistent pool)."""
        return (
            self.pool.is_persistent
            and desktop.assigned_user is not None
            and not self.rollout.recreate_assigned
        )

    def needs_new_image(self, desktop: Desktop) -> bool:
        """Whether the desktop is in the rollout's scope and will not run the new template.

        A desktop being built already gets the new template when the pool clones it (the
        rollout is rolling) or when the rollout is rebuilding it.
        """
        to = self.rollout.to_template
        if not _is_live(desktop) or self.kept(desktop) or on_template(desktop, to):
            return False
        if desktop.state in _BUILDING:
            entry = self.entries.get(desktop.id)
            rebuilding = entry is not None and entry.state is E.REPLACING
            return not (rebuilding or self.pool.template == to)
        return True

    def counts(self) -> RolloutCounts:
        """How far the rollout is (after the bookkeeping)."""
        to = self.rollout.to_template
        scope = [d for d in self.desktops if _is_live(d) and not self.kept(d)]
        states = [entry.state for entry in self.entries.values()]
        # One rebuilt on the new template is replaced already (its next pass settles it).
        rebuilt = sum(
            entry.state is E.REPLACING
            and (desktop := self.by_id.get(entry.desktop_id)) is not None
            and on_template(desktop, to)
            for entry in self.entries.values()
        )
        return RolloutCounts(
            total=len(scope),
            on_new_template=sum(on_template(d, to) for d in scope),
            replacing=states.count(E.REPLACING) - rebuilt,
            waiting_for_logoff=sum(state in _WAITING for state in states),
            failed=states.count(E.FAILED),
        )

    # ------------------------------------------------------------------ bookkeeping

    def settle(self) -> None:
        """Rule 1: what became of each desktop the rollout touched."""
        to = self.rollout.to_template
        for entry in list(self.entries.values()):
            desktop = self.by_id.get(entry.desktop_id)
            error: str | None = None
            if desktop is None or not _is_live(desktop):
                state = E.REPLACED if entry.state is not E.FAILED else E.FAILED
                why = f"{entry.desktop_name} is gone from the pool"
            elif on_template(desktop, to):
                state, why = E.REPLACED, f"{desktop.name} runs template {to}"
            elif entry.state is E.REPLACING and desktop.state is S.FAILED:
                state, error = E.FAILED, desktop.last_error or "it failed"
                why = f"{desktop.name} failed at {desktop.failed_step}: {error}"
            elif entry.state is E.REPLACING and desktop.state is S.READY:
                state, error = E.FAILED, f"it was rebuilt from template {desktop.template}"
                why = f"{desktop.name} was rebuilt from {desktop.template}, not {to}"
            elif entry.state in _WAITING and desktop.state in _BUILDING:
                state, why = E.REPLACING, f"{desktop.name} is rebuilt after its user logged off"
            else:
                continue
            if state is entry.state:
                continue
            self.entries[entry.desktop_id] = replace(entry, state=state, error=error)
            self.actions.append(
                SettleEntry(entry.desktop_id, entry.desktop_name, entry.role, state, error, why)
            )

    def change(self, state: RolloutState, reason: str) -> None:
        """Move the rollout to ``state``."""
        serving = serving_template(replace(self.rollout, state=state, paused_from=None))
        self.actions.append(ChangeRollout(self.rollout.id, state, serving, reason))

    # ------------------------------------------------------------------ replacing

    def free(self, desktop: Desktop) -> bool:
        """Whether the desktop can be rebuilt now: nobody logged on, nobody's own.

        Ready, or powered off by a schedule (rollouts run at night, when schedules power
        desktops off): rebuilt, it is started on the new template, then the schedule powers it
        off again once the rollout is over.
        """
        return (
            desktop.state in (S.READY, S.POWERED_OFF)
            and not desktop.in_session
            and (desktop.assigned_user is None or self.rollout.recreate_assigned)
        )

    def replace_free(self, role: EntryRole, wanted: int) -> tuple[int, bool]:
        """Replace up to ``wanted`` free desktops; return how many, and whether any is left.

        Used desktops (nobody can be given them before a rebuild anyway) go before clean ones;
        a clean one only while ``min_ready`` clean free desktops remain (rule 5).
        """
        rollout = self.rollout
        candidates = [
            d
            for d in self.desktops
            if self.needs_new_image(d)
            and self.free(d)
            and self._untouched(d.id)
            and d.id not in self.touched
        ]
        candidates.sort(key=lambda d: (d.is_available, d.name))
        available = sum(d.is_available for d in self.desktops)
        in_flight = sum(entry.state is E.REPLACING for entry in self.entries.values())
        live = len(self.desktops)
        headroom = max(0, self.pool.max_size + rollout.surge - live)
        budget = available - rollout.min_ready
        done = 0
        blocked = 0
        for desktop in candidates:
            if done >= wanted:
                break
            if desktop.is_available:
                if budget <= 0:
                    if headroom > 0 or in_flight + done > 0:
                        blocked += 1
                        continue
                    budget = 1  # unavoidable: nothing else can make room
                budget -= 1
            self._replace(desktop, role)
            done += 1
        # Desktops the pool may create to keep min_ready while these are rebuilt.
        self.extra = min(headroom, in_flight + done + blocked)
        return done, len(candidates) > done

    def _untouched(self, desktop_id: UUID) -> bool:
        """Whether the rollout has not rebuilt the desktop yet.

        It may be waiting for the desktop's user, who has left (a persistent desktop whose user
        logged off is free now).
        """
        entry = self.entries.get(desktop_id)
        return entry is None or entry.state in _WAITING

    def _replace(self, desktop: Desktop, role: EntryRole) -> None:
        to = self.rollout.to_template
        was = desktop.template or self.pool.template
        self.actions.append(
            ReplaceForRollout(
                desktop.id,
                desktop.name,
                role,
                f"{desktop.name}: rebuilt from template {to} (was {was}) by the rollout, "
                f"as a {role} desktop",
            )
        )
        self.touched.add(desktop.id)
        self.entries[desktop.id] = RolloutDesktop(
            rollout_id=self.rollout.id,
            desktop_id=desktop.id,
            desktop_name=desktop.name,
            role=role,
            state=E.REPLACING,
            updated_at=self.now,
        )

    def handle_in_use(self, role: EntryRole, limit: int | None = None) -> int:
        """Wait for, or warn and then log off, the users of desktops in use (rule 5)."""
        rollout = self.rollout
        handled = 0
        for desktop in sorted(self.desktops, key=lambda d: d.name):
            if limit is not None and handled >= limit:
                break
            if not self.needs_new_image(desktop) or not in_use(desktop):
                continue
            entry = self.entries.get(desktop.id)
            if entry is not None and entry.state not in _WAITING:
                continue
            handled += 1
            user = desktop.assigned_user
            if rollout.in_use is InUsePolicy.WAIT_FOR_LOGOFF or user is None:
                if entry is None:
                    self.actions.append(
                        WaitForLogoff(
                            desktop.id,
                            desktop.name,
                            role,
                            f"{desktop.name} is in use; it is replaced once its user logs off",
                        )
                    )
                    self._enter(desktop, role, E.WAITING_FOR_LOGOFF)
                continue
            if entry is None or entry.state is E.WAITING_FOR_LOGOFF:
                ends_at = self.now + timedelta(seconds=rollout.warning_seconds)
                self.actions.append(
                    WarnUser(
                        desktop.id,
                        desktop.name,
                        role,
                        user,
                        ends_at,
                        rollout.message,
                        f"{desktop.name} is in use: its user is warned and logged off in "
                        f"{rollout.warning_seconds}s",
                    )
                )
                self._enter(desktop, role, E.WARNED, warned_at=self.now, logoff_at=ends_at)
            elif entry.logoff_at is not None and entry.logoff_at <= self.now:
                self.actions.append(
                    ForceLogoff(
                        desktop.id,
                        desktop.name,
                        user,
                        f"{desktop.name}: its user was warned at {entry.warned_at} and the "
                        f"{rollout.warning_seconds}s have passed",
                    )
                )
            self.touched.add(desktop.id)
        return handled

    def _enter(
        self,
        desktop: Desktop,
        role: EntryRole,
        state: EntryState,
        *,
        warned_at: datetime | None = None,
        logoff_at: datetime | None = None,
    ) -> None:
        self.touched.add(desktop.id)
        self.entries[desktop.id] = RolloutDesktop(
            rollout_id=self.rollout.id,
            desktop_id=desktop.id,
            desktop_name=desktop.name,
            role=role,
            state=state,
            updated_at=self.now,
            warned_at=warned_at,
            logoff_at=logoff_at,
        )

    # ------------------------------------------------------------------ phases

    def canary(self) -> None:
        """Rule 4."""
        rollout = self.rollout

        def canaries() -> list[RolloutDesktop]:
            return [e for e in self.entries.values() if e.role is EntryRole.CANARY]

        need = rollout.canary - len(canaries())
        if need > 0:
            done, free_left = self.replace_free(EntryRole.CANARY, need)
            if need - done > 0 and not free_left:
                # No free desktop left to take: desktops in use become canaries.
                self.handle_in_use(EntryRole.CANARY, limit=need - done)
        chosen = canaries()
        pending = any(self.needs_new_image(d) for d in self.desktops)
        if not all(e.state is E.REPLACED for e in chosen):
            return
        if (chosen and len(chosen) >= rollout.canary) or not pending:
            names = ", ".join(sorted(e.desktop_name for e in chosen)) or "none needed"
            self.change(
                RolloutState.ROLLING,
                f"canary ready on template {rollout.to_template} ({names})",
            )

    def rolling(self) -> None:
        """Rule 5."""
        rollout = self.rollout
        in_flight = sum(e.state is E.REPLACING for e in self.entries.values())
        slots = max(0, rollout.batch_size - in_flight)
        _, free_left = self.replace_free(EntryRole.BATCH, slots)
        if not free_left:
            self.handle_in_use(EntryRole.BATCH)
        waiting = any(e.state in (E.REPLACING, *_WAITING) for e in self.entries.values()) or any(
            self.needs_new_image(d) and d.state is not S.FAILED and d.id not in self.entries
            for d in self.desktops
        )
        if not waiting and not any(isinstance(a, ReplaceForRollout) for a in self.actions):
            if surge_left(self.pool, self.desktops, rollout, self.floor):
                self.shrink_to = kept_size(self.pool, self.desktops, rollout, self.floor)
                return
            counts = self.counts()
            failed = f"; {counts.failed} failed" if counts.failed else ""
            self.change(
                RolloutState.SUCCEEDED,
                f"{counts.on_new_template} of {counts.total} desktops run template "
                f"{rollout.to_template}{failed}",
            )


def kept_size(pool: Pool, desktops: Sequence[Desktop], rollout: Rollout, floor: int = 0) -> int:
    """How many desktops the pool keeps once ``rollout`` is over.

    Its own size (``min_size``, or its users and ``spare``, up to ``max_size``), the desktops
    it had before the rollout began (a schedule keeps those up to ``max_size``), or ``floor``
    (what the pool planner wants besides), whichever is more: the desktops the rollout's
    ``surge`` added beyond it are removed before it ends (issue 37).
    """
    live = [d for d in desktops if d.pool_id == pool.id and _is_live(d)]
    own = min(pool.max_size, max(pool.min_size, sum(d.is_busy for d in live) + pool.spare))
    started = rollout.started_at
    before = len(live) if started is None else sum(d.created_at < started for d in live)
    return max(own, min(before, pool.max_size), floor)


def surge_left(
    pool: Pool, desktops: Sequence[Desktop], rollout: Rollout, floor: int = 0
) -> list[str]:
    """The desktops to remove before ``rollout`` ends (newest first), if it must wait for any.

    Beyond :func:`kept_size`, free ones are removed at once and a non-persistent pool's busy
    ones once their users log off; a persistent pool's desktops their owners hold are theirs,
    and the rollout does not wait for them.
    """
    live = [d for d in desktops if d.pool_id == pool.id and _is_live(d)]
    beyond = len(live) - kept_size(pool, desktops, rollout, floor)
    if beyond <= 0:
        return []
    removable = [d for d in live if not pool.is_persistent or not d.is_busy or d.state is S.FAILED]
    removable.sort(key=lambda d: (d.is_busy, -d.created_at.timestamp(), d.name))
    return [d.name for d in removable[:beyond]]


def plan_rollout(
    pool: Pool, desktops: Sequence[Desktop], view: RolloutView, now: datetime, floor: int = 0
) -> RolloutPlan:
    """What ``view``'s rollout does to ``pool`` in this pass (rules: module docstring).

    :param floor: the desktops the pool planner wants besides the rollout (a schedule's
        phase may want more than the pool's own size); the rollout never shrinks below it.
    """
    rollout = view.rollout
    step = _Pass(pool, desktops, view, now, floor)
    step.settle()
    state = rollout.state
    if state is RolloutState.SCHEDULED and now >= rollout.start_at:
        first = RolloutState.CANARY if rollout.canary > 0 else RolloutState.ROLLING
        step.change(first, f"started: {rollout.from_template} -> {rollout.to_template}")
    elif state in (RolloutState.CANARY, RolloutState.ROLLING):
        failed = sorted(
            (e for e in step.entries.values() if e.state is E.FAILED),
            key=lambda e: e.desktop_name,
        )
        if failed and rollout.stop_on_error:
            entry = failed[0]
            step.change(
                RolloutState.FAILED,
                f"{entry.role} desktop {entry.desktop_name} failed on template "
                f"{rollout.to_template}: {entry.error}; the pool serves template "
                f"{rollout.from_template} again",
            )
        elif state is RolloutState.CANARY:
            step.canary()
        else:
            step.rolling()
    active = rollout.state is not RolloutState.SCHEDULED
    return RolloutPlan(
        rollout_id=rollout.id,
        actions=tuple(step.actions),
        touched=frozenset(step.touched),
        extra=step.extra,
        record_cap=pool.max_size + rollout.surge,
        hold_size=active and step.shrink_to is None,
        counts=step.counts(),
        shrink_to=step.shrink_to,
    )


def count_rollout(pool: Pool, desktops: Sequence[Desktop], view: RolloutView) -> RolloutCounts:
    """How far ``view``'s rollout is on ``pool`` with ``desktops`` (no planning).

    An active rollout is counted on the pool's desktops as they are; one that ended, on the
    desktops it touched (what became of them does not change what it did).
    """
    if view.rollout.state in ENDED:
        states = [entry.state for entry in view.entries.values()]
        return RolloutCounts(
            total=len(states),
            on_new_template=states.count(E.REPLACED),
            replacing=0,
            waiting_for_logoff=0,
            failed=states.count(E.FAILED),
        )
    return _Pass(pool, desktops, view, view.rollout.created_at).counts()


def waiting_for(pool: Pool, desktops: Sequence[Desktop], view: RolloutView) -> str | None:
    """What ``view``'s rollout waits for now, in words; ``None`` once it ended.

    Desktops being rebuilt, users to log off (and when the warned ones are logged off),
    failed desktops to be repaired, and what is left after them; or, when none of these
    holds it, what keeps the next desktop from being taken (``min_ready`` and the room
    ``max_size + surge`` leaves).
    """
    rollout = view.rollout
    if rollout.state in ENDED:
        return None
    if rollout.state is RolloutState.SCHEDULED:
        return f"its start at {rollout.start_at.isoformat(timespec='seconds')}"
    if rollout.state is RolloutState.PAUSED:
        return "an administrator to resume it"
    step = _Pass(pool, desktops, view, rollout.created_at)
    entries = sorted(step.entries.values(), key=lambda e: e.desktop_name)
    parts = []
    rebuilt = [e.desktop_name for e in entries if e.state is E.REPLACING]
    if rebuilt:
        parts.append(f"{_listed(rebuilt)} to be rebuilt on {rollout.to_template}")
    users = [e for e in entries if e.state in _WAITING]
    if users:
        whose = "the user of" if len(users) == 1 else "the users of"
        parts.append(f"{whose} {_listed([e.desktop_name for e in users])} to log off")
        warned = [e.logoff_at for e in users if e.logoff_at is not None]
        if warned:
            parts[-1] += f" (warned: logged off at {min(warned).isoformat(timespec='seconds')})"
    left = [d for d in step.desktops if step.needs_new_image(d) and d.id not in step.entries]
    # A failed desktop holds only the canary (rolling ends without it, as the planner does).
    holding = rollout.state is RolloutState.CANARY
    for desktop in (d for d in left if d.state is S.FAILED and holding):
        error = f": {desktop.last_error}" if desktop.last_error else ""
        parts.append(f"{desktop.name} to be repaired (failed at {desktop.failed_step}{error})")
    left = [d for d in left if d.state is not S.FAILED]
    surge = (
        surge_left(pool, step.desktops, rollout) if rollout.state is RolloutState.ROLLING else []
    )
    if surge and not parts and not left:
        keeps = kept_size(pool, step.desktops, rollout)
        which = "surge desktop" if len(surge) == 1 else "surge desktops"
        parts.append(
            f"{_listed(surge)} to be removed: the rollout's {which} (the pool keeps {keeps})"
        )
    if left and parts:
        parts.append(f"then {len(left)} more desktop{'s' if len(left) > 1 else ''}")
    elif left:
        busy = [d.name for d in left if in_use(d)]
        if busy:
            whose = "the user of" if len(busy) == 1 else "the users of"
            parts.append(f"{whose} {_listed(busy)} to log off")
        else:
            parts.append(
                f"room to keep {rollout.min_ready} desktops ready while "
                f"{_listed([d.name for d in left])} are rebuilt (max_size {pool.max_size} + "
                f"surge {rollout.surge})"
            )
    return "; ".join(parts) or "its next pass, which ends it"


def _listed(names: Sequence[str], shown: int = 3) -> str:
    """``a, b, c and 2 more``."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
