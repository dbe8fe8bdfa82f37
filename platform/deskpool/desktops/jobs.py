"""The desktop job kinds, and how a change enqueues them.

Every slow operation on a desktop is a job of the worker (:mod:`deskpool.jobs`), with the
payload ``{"desktop_id": ...}``:

==========================  =================================================================
kind                        what it does
==========================  =================================================================
``desktop.provision``       clone -> start -> wait for the guest agent
                            (``GUEST_AGENT_WAIT_TIMEOUT``) -> wait for Windows Sysprep/OOBE
                            (``WINDOWS_READY_WAIT_TIMEOUT``, Windows pools only) -> ``ready``
``desktop.rebuild``         delete the VM and provision a new one under the same name
``desktop.delete``          delete the VM, then the desktop's record
``desktop.power_on``        power the VM on
``desktop.power_off``       shut the guest down (powered off if it does not comply)
``desktop.restart``         shut the guest down, then power it on again
``vm.delete_orphan``        delete a VM tagged by deskpool that belongs to no desktop
                            (payload ``{"cluster_id", "vm_id"}``)
==========================  =================================================================

A service enqueues them with :func:`enqueue_desktop_job` (many desktops' at once:
:func:`enqueue_desktop_jobs`) in the transaction of the change that needs them: it keys
provisioning, rebuild and deletion jobs by the desktop and the moment it entered its current
state (its *attempt generation*), so a reconciliation pass that sees the same desktop twice
never enqueues a second job for it. The steps the jobs take are
:mod:`deskpool.provisioning.steps`; their handlers, registered with the worker, are
:mod:`deskpool.provisioning.handlers`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from deskpool.jobs.model import Job
from deskpool.jobs.queue import enqueue, unfinished_job
from deskpool.jobs.queue_keyed import KeyedJob, enqueue_keyed_many
from deskpool.pools.model import Desktop, DesktopState

S = DesktopState

PROVISION = "desktop.provision"
REBUILD = "desktop.rebuild"
DELETE = "desktop.delete"
POWER_ON = "desktop.power_on"
POWER_OFF = "desktop.power_off"
RESTART = "desktop.restart"
DELETE_ORPHAN_VM = "vm.delete_orphan"

#: Kinds keyed by the desktop's attempt generation (one job per entry into a state).
GENERATIONAL_KINDS = frozenset({PROVISION, REBUILD, DELETE})
#: Kinds that only act on the VM's power; one unfinished job per desktop is enough.
POWER_KINDS = frozenset({POWER_ON, POWER_OFF, RESTART})

#: The resource type of desktop jobs (the jobs API lists a desktop's jobs by it).
DESKTOPS = "desktops"
#: The resource type of cluster-level jobs (orphan VMs).
CLUSTERS = "clusters"
#: Who jobs act as in the audit trail.
WORKER_ACTOR = "system:worker"

#: Power jobs are what a waiting user asked for: they go before provisioning work.
POWER_PRIORITY = 10

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: The job that carries a desktop on from each state.
_JOB_OF_STATE: Mapping[DesktopState, str] = {
    S.PROVISIONING: PROVISION,
    S.STARTING: PROVISION,
    S.WAITING_FOR_AGENT: PROVISION,
    S.WAITING_FOR_WINDOWS: PROVISION,
    S.REFRESHING: REBUILD,
    S.DELETING: DELETE,
    S.POWERED_OFF: POWER_OFF,
}


def attempt_generation(desktop: Desktop) -> int:
    """When the desktop entered its current state, in microseconds: one per entry."""
    return (desktop.state_changed_at - _EPOCH) // timedelta(microseconds=1)


def job_for_state(desktop: Desktop) -> str | None:
    """The job kind that carries the desktop on from its state; ``None`` when none does."""
    return _JOB_OF_STATE.get(desktop.state)


def idempotency_key(kind: str, desktop: Desktop) -> str | None:
    """``desktop.provision:<id>:<attempt generation>`` for generational kinds, else ``None``."""
    return _generation_key(kind, desktop) if kind in GENERATIONAL_KINDS else None


def _generation_key(kind: str, desktop: Desktop) -> str:
    """The idempotency key of a generational kind's job of ``desktop``."""
    return f"{kind}:{desktop.id}:{attempt_generation(desktop)}"


async def enqueue_desktop_job(connection: asyncpg.Connection, kind: str, desktop: Desktop) -> Job:
    """Enqueue the ``kind`` job of ``desktop`` unless it is already there; return the job.

    Provisioning, rebuild and deletion jobs are keyed by the attempt generation, so enqueueing
    twice for the same entry into a state gives the same job. A power job is not enqueued
    while another of its kind is queued or running for the desktop. Call it in the
    transaction that changed the desktop, so the job exists exactly when the change does.
    """
    resource_id = str(desktop.id)
    payload = _payload(desktop)
    if kind in POWER_KINDS:
        return await _enqueue_unless_unfinished(
            connection, kind, payload, DESKTOPS, resource_id, priority=POWER_PRIORITY
        )
    return await enqueue(
        connection,
        kind,
        payload,
        idempotency_key=idempotency_key(kind, desktop),
        resource_type=DESKTOPS,
        resource_id=resource_id,
    )


async def enqueue_desktop_jobs(
    connection: asyncpg.Connection, kind: str, desktops: Sequence[Desktop]
) -> list[Job]:
    """:func:`enqueue_desktop_job` of each of ``desktops``; their jobs, in order.

    Jobs keyed by the attempt generation (provisioning, rebuild, deletion) are enqueued in one
    statement (:func:`~deskpool.jobs.queue_keyed.enqueue_keyed_many`), so a reconciliation
    creating a pool's desktops does not send one per desktop while it holds the license's
    growth lock; the others, one after the other.
    """
    if kind not in GENERATIONAL_KINDS:
        return [await enqueue_desktop_job(connection, kind, desktop) for desktop in desktops]
    keyed = [
        KeyedJob(_generation_key(kind, desktop), _payload(desktop), DESKTOPS, str(desktop.id))
        for desktop in desktops
    ]
    return await enqueue_keyed_many(connection, kind, keyed)


def _payload(desktop: Desktop) -> dict[str, Any]:
    """What a desktop job's handler receives."""
    return {"desktop_id": str(desktop.id)}


async def enqueue_orphan_deletion(
    connection: asyncpg.Connection, cluster_id: uuid.UUID, vm_id: str
) -> Job:
    """Enqueue the deletion of an orphan VM unless one is queued or running for it."""
    payload = {"cluster_id": str(cluster_id), "vm_id": vm_id}
    return await _enqueue_unless_unfinished(
        connection, DELETE_ORPHAN_VM, payload, CLUSTERS, f"{cluster_id}/{vm_id}"
    )


async def _enqueue_unless_unfinished(
    connection: asyncpg.Connection,
    kind: str,
    payload: Mapping[str, Any],
    resource_type: str,
    resource_id: str,
    *,
    priority: int = 0,
) -> Job:
    """Enqueue a job for work without a natural generation, unless one is queued or running."""
    existing = await unfinished_job(connection, kind, resource_type, resource_id)
    if existing is not None:
        return existing
    return await enqueue(
        connection,
        kind,
        payload,
        priority=priority,
        resource_type=resource_type,
        resource_id=resource_id,
    )
