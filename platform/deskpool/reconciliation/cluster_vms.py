"""What the clusters hold, as reconciliation sees it: deskpool's VMs, and those nobody owns.

:func:`list_clusters` lists each cluster's deskpool VMs once, all clusters at the same time, as
the pure planner's :class:`~deskpool.pools.model.ObservedVm`; a cluster that cannot be listed
(unreachable, driver not installed, credentials that do not open, a driver outside its
contract) maps to ``None``, never to "no VMs", so a pass never takes an unreachable cluster
for vanished VMs. :func:`unowned_vms` finds the VMs tagged as deskpool's whose tags name no
existing pool or desktop and that no desktop records, reading the owners both before and after
the listing, so a desktop created or deleted meanwhile is never taken for missing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from deskpool.clusters.repository import ClusterRecord, record_seen
from deskpool.db.rows import Db
from deskpool.drivers import VirtualMachine, deadline_after
from deskpool.errors import DeskpoolError
from deskpool.pools.model import ObservedVm
from deskpool.reconciliation.planner import find_unowned_vms
from deskpool.reconciliation.store import ClusterOwners, existing_owners

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: How long listing a cluster's VMs may take before the cluster counts as not listed.
LIST_TIMEOUT = 60.0
#: How often an unchanged outcome of a listing is written as the cluster's check.
CHECK_RECORDED_EVERY = timedelta(minutes=1)


def observed_vm(vm: VirtualMachine) -> ObservedVm:
    """A VM listed by a driver, as the pure reconciliation sees it."""
    desktop_id = None
    if vm.desktop_id is not None:
        try:
            desktop_id = uuid.UUID(vm.desktop_id)
        except ValueError:
            desktop_id = None
    return ObservedVm(
        vm_id=vm.id,
        name=vm.name,
        power_state=vm.power_state,
        desktop_id=desktop_id,
    )


async def unowned_vms(
    db: Db,
    cluster_id: uuid.UUID,
    vms: Sequence[ObservedVm],
    before: ClusterOwners,
    known: Collection[str],
) -> list[ObservedVm]:
    """The cluster's VMs no pool, desktop or desktop record owns, not reported yet.

    ``before`` was read before the listing (a desktop deleted since still owns its VM);
    what the candidates name is read again now (a desktop created since owns its VM too).
    """

    def candidates(owners: ClusterOwners) -> list[ObservedVm]:
        return [
            vm
            for vm in find_unowned_vms(
                vms, pool_ids=owners.pool_ids, desktop_ids=owners.desktop_ids
            )
            if vm.vm_id not in owners.vm_ids and vm.vm_id not in known
        ]

    found = candidates(before)
    if not found:
        return []
    owners = ClusterOwners()
    owners.update(before)
    owners.update(await existing_owners(db, cluster_id, found))
    return candidates(owners)


async def list_clusters(
    runtime: Runtime, clusters: Mapping[uuid.UUID, ClusterRecord | None]
) -> dict[uuid.UUID, list[ObservedVm] | None]:
    """List each cluster's deskpool VMs once, all clusters at the same time.

    A cluster that cannot be listed maps to ``None`` (and is logged), never to ``[]``.
    """
    ids = list(clusters)
    listings = await asyncio.gather(*(_list(runtime, clusters[cluster_id]) for cluster_id in ids))
    return dict(zip(ids, listings, strict=True))


async def _list(runtime: Runtime, cluster: ClusterRecord | None) -> list[ObservedVm] | None:
    if cluster is None:
        return None
    try:
        async with runtime.drivers.open(cluster) as driver:
            vms = await driver.list_owned_vms(deadline=deadline_after(LIST_TIMEOUT))
    except DeskpoolError as error:
        log.warning(
            "the VMs of cluster %s cannot be listed (%s); its pools are reconciled for "
            "timeouts only",
            cluster.name,
            error.detail,
        )
        await _seen(runtime, cluster, f"{error.code}: {error.detail}")
        return None
    except Exception as error:
        # A driver outside its contract: still never "every VM vanished".
        log.exception(
            "listing the VMs of cluster %s failed unexpectedly; its pools are reconciled "
            "for timeouts only",
            cluster.name,
        )
        await _seen(runtime, cluster, f"listing its VMs failed ({type(error).__name__})")
        return None
    await _seen(runtime, cluster, None)
    return [observed_vm(vm) for vm in vms]


async def _seen(runtime: Runtime, cluster: ClusterRecord, error: str | None) -> None:
    """Keep the listing's outcome as the cluster's check (its "Last check"), never failing."""
    try:
        await record_seen(
            runtime.db, cluster.id, ok=error is None, error=error, every=CHECK_RECORDED_EVERY
        )
    except Exception as failure:  # the pass goes on: a check not recorded is only stale
        log.warning("the check of cluster %s was not recorded (%s)", cluster.name, failure)
