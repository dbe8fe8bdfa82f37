"""VM events: a hypervisor tells deskpool at once when a desktop's VM stops or disappears.

A driver declaring ``capabilities.vm_events`` (contract 0.3.1; the libvirt driver does)
reports what its hypervisor tells it as :class:`~deskpool.drivers.VmEvent` values. Every
worker process watches every such cluster (:class:`~deskpool.vm_events.watcher.VmEventWatcher`,
refreshed every 5 s at most); an event that matters
(:func:`~deskpool.vm_events.model.wants_reconcile`: a VM stopped or removed) enqueues
``pool.reconcile`` for the pools whose desktops record that VM
(:mod:`~deskpool.vm_events.service`, the SQL in :mod:`~deskpool.vm_events.store`), so the
reconciler repairs the desktop now instead of at its next periodic pass. Events only hasten
reconciliation: a lost event (a worker restarting, a host reconnecting) is caught by the
periodic pass as before.
"""
