"""What other areas ask of a pool: the pool itself, its cluster, a template checked on it.

Pool administration (:mod:`deskpool.pool_admin.service`), rollouts and schedules read a pool
and check a template through these, so none of them reaches up into another's service. A
template is looked up through the cluster's driver before any transaction (no driver call
holds a row lock); a driver that cannot be asked leaves the template ``not_verified``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskpool.clusters import repository as clusters
from deskpool.clusters.drivers import driver_manager_for
from deskpool.clusters.repository import ClusterRecord
from deskpool.db.rows import Db
from deskpool.drivers import DriverError, deadline_after
from deskpool.drivers import OsType as TemplateOsType
from deskpool.errors import DeskpoolError, LocatedFieldError, NotFound, ValidationFailed
from deskpool.pools import store as store_pools
from deskpool.pools.model import OsType
from deskpool.pools.store import PoolRecord

if TYPE_CHECKING:
    from deskpool.runtime import Runtime

log = logging.getLogger(__name__)

#: Seconds a pool change waits for the cluster's driver to list its templates.
TEMPLATE_CHECK_TIMEOUT = 10.0

#: How many templates a "no such template" error lists.
_TEMPLATES_LISTED = 10


def field_error(pointer: str, message: str) -> ValidationFailed:
    """A 422 with one message at ``pointer``."""
    return ValidationFailed([LocatedFieldError(pointer, message)])


@dataclass(frozen=True)
class TemplateCheck:
    """The outcome of checking a pool's template against its cluster."""

    template: str
    status: str
    detail: str | None = None

    def view(self) -> dict[str, Any]:
        """The ``template_check`` member of a write response."""
        return {"status": self.status, "detail": self.detail}


def _not_verified(template: str, why: str) -> TemplateCheck:
    return TemplateCheck(template, "not_verified", why)


async def check_template(
    runtime: Runtime,
    cluster: ClusterRecord,
    template: str,
    os_type: OsType,
    *,
    os_pointer: str = "/os_type",
) -> TemplateCheck:
    """Look ``template`` up on ``cluster``; return its id and whether it was verified.

    :param os_pointer: where a template of another OS than ``os_type`` is marked: the pool's
        ``/os_type`` when both are written together, ``/template`` when only the template is.
    :raises ValidationFailed: the driver lists the templates and none is ``template`` (or
        several are named so), or the template's OS is not ``os_type``.
    """
    manager = driver_manager_for(runtime)
    try:
        async with manager.open(cluster) as driver:
            templates = await driver.list_templates(deadline=deadline_after(TEMPLATE_CHECK_TIMEOUT))
    except DriverError as error:
        return _not_verified(template, f"{error.code}: {error.detail}")
    except DeskpoolError as error:  # the driver is not installed, or its credentials won't open
        return _not_verified(template, f"{error.code}: {error.detail}")
    except Exception as error:  # a driver outside its contract: not the caller's problem
        log.exception("the %s driver failed listing templates of %s", cluster.driver, cluster.id)
        return _not_verified(
            template,
            f"driver_unexpected_error: the {cluster.driver} driver raised {type(error).__name__}",
        )
    found = [item for item in templates if item.id == template]
    if not found:
        found = [item for item in templates if item.name == template]
        if len(found) > 1:
            raise field_error(
                "/template",
                f"{len(found)} templates of the cluster are named {template!r}; give the id "
                f"({', '.join(sorted(item.id for item in found))}).",
            )
    if not found:
        listed = ", ".join(
            f"{item.name} (id {item.id})"
            for item in sorted(templates, key=lambda t: t.name)[:_TEMPLATES_LISTED]
        )
        more = len(templates) - _TEMPLATES_LISTED
        suffix = f" and {more} more" if more > 0 else ""
        raise field_error(
            "/template",
            f"The cluster {cluster.name!r} has no template {template!r}; it has: "
            f"{listed or 'none'}{suffix}.",
        )
    chosen = found[0]
    if chosen.os_type in (TemplateOsType.LINUX, TemplateOsType.WINDOWS) and str(
        chosen.os_type
    ) != str(os_type):
        raise field_error(
            os_pointer,
            f"The template {chosen.name!r} is a {chosen.os_type} template, not {os_type}.",
        )
    return TemplateCheck(chosen.id, "verified")


async def cluster_of(runtime: Runtime, cluster_id: uuid.UUID) -> ClusterRecord:
    """The cluster ``cluster_id`` of a pool being written; 422 ``/cluster_id`` when missing."""
    return await cluster_or_422(runtime.db, cluster_id)


async def cluster_or_422(db: Db, cluster_id: uuid.UUID) -> ClusterRecord:
    """The cluster ``cluster_id``, read on ``db``; 422 ``/cluster_id`` when missing."""
    cluster = await clusters.get_cluster(db, cluster_id)
    if cluster is None:
        raise field_error("/cluster_id", f"No cluster has the id {cluster_id}.")
    return cluster


async def get_pool(runtime: Runtime, pool_id: uuid.UUID) -> PoolRecord:
    """The pool ``pool_id``; :class:`NotFound` when there is none."""
    record = await store_pools.get_pool_record(runtime.db, pool_id)
    if record is None:
        raise NotFound(f"No pool has the id {pool_id}.")
    return record


async def pool_names(runtime: Runtime, pool_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The names of the pools among ``pool_ids`` that exist, for a page to name its pools."""
    return await store_pools.pool_names(runtime.db, pool_ids) if pool_ids else {}
