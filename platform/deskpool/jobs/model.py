"""The job model: states, jobs, leases, job kinds and the retry policy (no I/O).

A job moves ``queued`` -> ``running`` (claimed under a lease) -> ``succeeded``; a failed attempt
goes back to ``queued`` with a backoff, or to ``dead`` once its attempts are spent; a queued job
can be ``cancelled``, and a dead one retried (back to ``queued``). Every claim gives the job a
new fencing token: a :class:`JobLease` is the pair (job id, token), and only the current lease
can heartbeat, complete, fail or release the job.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from deskpool.jobs.context import JobContext

#: Attempts a job gets unless its enqueuer says otherwise.
DEFAULT_MAX_ATTEMPTS = 5

#: How long one attempt may run unless its kind says otherwise.
DEFAULT_JOB_TIMEOUT = timedelta(hours=1)

#: The channel idle workers LISTEN on; new and re-queued jobs NOTIFY it.
JOBS_CHANNEL = "deskpool_jobs"

#: How many failed attempts a job keeps in its error history.
ERROR_HISTORY = 20


class JobState(StrEnum):
    """Where a job is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


class JobError(Exception):
    """Base of the errors the job machinery raises to handlers."""


class LeaseLost(JobError):
    """The job's lease expired and was reclaimed: this worker must stop working on it."""


class PermanentJobFailure(JobError):
    """Raised by a handler for a failure no retry can fix: the job goes ``dead`` at once."""


JobHandler = Callable[["JobContext"], Awaitable[Any]]


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter between attempts.

    The delay after attempt *n* is ``base * 2**(n-1)``, capped at ``cap``, of which the last
    ``jitter`` fraction is random (so workers that failed together do not retry together).
    """

    base: timedelta = timedelta(seconds=10)
    cap: timedelta = timedelta(minutes=15)
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base:
            raise ValueError("a retry policy needs 0 < base <= cap")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter is a fraction between 0 and 1")

    def delay(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """The wait before the attempt after ``attempt`` (1 for the first attempt)."""
        doublings = min(max(attempt, 1) - 1, 62)
        full = min(self.base.total_seconds() * 2.0**doublings, self.cap.total_seconds())
        fixed = full * (1.0 - self.jitter)
        spread = (rng or random).random() * full * self.jitter
        return timedelta(seconds=fixed + spread)


@dataclass(frozen=True)
class JobKind:
    """A registered job kind: its handler and how its attempts are retried and bounded.

    ``deskpool_register_job_kinds`` implementations add either a bare async handler or a
    :class:`JobKind` (``registry.add("clone_vm", JobKind(clone, timeout=timedelta(minutes=20)))``).
    """

    handler: JobHandler
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: timedelta = DEFAULT_JOB_TIMEOUT

    @classmethod
    def of(cls, registered: RegisteredJobKind) -> JobKind:
        """Normalize what a plugin registered (a handler or a :class:`JobKind`)."""
        if isinstance(registered, JobKind):
            return registered
        if callable(registered):
            return cls(handler=registered)
        raise TypeError(f"a job kind is an async handler or a JobKind, not {registered!r}")


#: What ``deskpool_register_job_kinds`` registers: a bare async handler or a :class:`JobKind`.
RegisteredJobKind: TypeAlias = JobKind | JobHandler


@dataclass(frozen=True, order=True)
class JobLease:
    """A worker's hold on a job: the job id and the fencing token of the claim."""

    job_id: int
    fence: int


@dataclass(frozen=True)
class ClaimedJob:
    """What a claim returns for one job: enough to run it."""

    id: int
    kind: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    fence: int
    resource_type: str | None
    resource_id: str | None
    waited: float

    @property
    def lease(self) -> JobLease:
        """The lease this claim holds."""
        return JobLease(self.id, self.fence)

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> ClaimedJob:
        """Build from a claim's returned row."""
        return cls(
            id=row["id"],
            kind=row["kind"],
            payload=json.loads(row["payload"]),
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            fence=row["fence"],
            resource_type=row["resource_type"],
            resource_id=row["resource_id"],
            waited=max(0.0, row["waited"]),
        )


@dataclass(frozen=True)
class Job:
    """A job as stored, for inspection (the API) and for enqueuers."""

    id: int
    kind: str
    state: JobState
    payload: dict[str, Any]
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    idempotency_key: str | None
    resource_type: str | None
    resource_id: str | None
    fence: int
    worker: str | None
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    reclaims: int
    last_error: str | None
    errors: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    #: The name of the resource (a desktop's, a pool's, a cluster's), if it has one and exists.
    resource_name: str | None = None

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> Job:
        """Build from a ``SELECT * FROM jobs`` row."""
        values = dict(row)
        values["state"] = JobState(values["state"])
        values["payload"] = json.loads(values["payload"])
        values["errors"] = json.loads(values["errors"])
        return cls(**values)


@dataclass(frozen=True)
class FailureDecision:
    """What a failed attempt leads to: a retry after ``delay``, or ``dead``."""

    dead: bool
    delay: timedelta = timedelta(0)


def decide_failure(
    attempt: int,
    max_attempts: int,
    policy: RetryPolicy,
    *,
    permanent: bool = False,
    rng: random.Random | None = None,
) -> FailureDecision:
    """Retry with backoff while attempts remain; otherwise (or for a permanent failure) dead."""
    if permanent or attempt >= max_attempts:
        return FailureDecision(dead=True)
    return FailureDecision(dead=False, delay=policy.delay(attempt, rng))
