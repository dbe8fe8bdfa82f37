"""Which VM events make deskpool reconcile, and when a watcher's driver is rebuilt."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from deskpool.clusters.repository import ClusterRecord, ConnectionSettings
from deskpool.drivers import VmEvent, VmEventKind
from deskpool.secrets import SecretMetadata
from deskpool.vm_events.model import wants_reconcile, watch_key


def test_a_vm_that_stops_or_disappears_is_reconciled_one_that_starts_is_not() -> None:
    def event(kind: VmEventKind) -> VmEvent:
        return VmEvent(cluster_id=str(uuid.uuid4()), vm_id="v1", kind=kind, node="kvm1")

    assert wants_reconcile(event(VmEventKind.STOPPED))
    assert wants_reconcile(event(VmEventKind.REMOVED))
    assert not wants_reconcile(event(VmEventKind.STARTED))


def test_a_changed_record_or_new_credentials_change_the_watch_key() -> None:
    now = datetime.now(UTC)
    record = ClusterRecord(
        id=uuid.uuid4(),
        name="kvm",
        driver="libvirt",
        settings=ConnectionSettings(endpoint="qemu:///system"),
        credentials=SecretMetadata(is_set=True, changed_at=now),
        created_at=now,
        updated_at=now,
    )
    later = now + timedelta(seconds=1)
    assert watch_key(record) == watch_key(record)
    renamed = replace(record, updated_at=later)
    assert watch_key(renamed) != watch_key(record)
    rekeyed = replace(record, credentials=SecretMetadata(is_set=True, changed_at=later))
    assert watch_key(rekeyed) != watch_key(record)
