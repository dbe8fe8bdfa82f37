"""Desktop pools: the domain model and its rules, the stores, the services and the jobs.

A *pool* is a set of desktops cloned from one template on one cluster and kept at a desired
size. The pure logic of pools is written in the style of *Architecture Patterns with Python*
(cosmicpython): plain frozen dataclasses and functions that take the current state and return
a decision, tested without a database, a driver or an event loop. The adapters at the edge
(the stores, the worker's jobs, the services the API calls) load the state, call these
functions, and apply what they return.

Models and rules (no I/O):

- :mod:`~deskpool.pools.model`: pools, desktops and observed VMs, and the validation of a pool.
- :mod:`~deskpool.desktops.states`: the desktop state machine and the provisioning steps.
- :mod:`~deskpool.pools.naming`: naming patterns such as ``lab-{n:03}`` and free names.
- :mod:`~deskpool.reconciliation.planner`: the pure planner: what to do to converge a pool to its
  desired size and to repair drift, and why the pool is degraded;
  :mod:`~deskpool.reconciliation.plan`
  holds what a plan is made of (policy, actions, health, counts).
- :mod:`~deskpool.desktops.allocation`: which desktop a user gets when they open a pool.

Stores (SQL, one aggregate each): :mod:`~deskpool.pools.store`,
:mod:`~deskpool.desktops.store`, :mod:`~deskpool.desktops.store_allocation`,
:mod:`~deskpool.pools.store_entitlements`, :mod:`~deskpool.reconciliation.store_orphans`,
:mod:`~deskpool.reconciliation.store`, :mod:`~deskpool.provisioning.store`; their
errors are :mod:`~deskpool.pools.errors`.

Services: :mod:`~deskpool.pool_admin.service` (pool administration, a package of its own) and
:mod:`~deskpool.desktops.service` (desktops). Reconciliation:
:mod:`~deskpool.reconciliation.reconciler` (the service that plans and applies a batch),
:mod:`~deskpool.reconciliation.cluster_vms`, :mod:`~deskpool.reconciliation.events`,
:mod:`~deskpool.reconciliation.jobs`. Desktop jobs: :mod:`~deskpool.desktops.jobs` (kinds
and enqueueing), :mod:`~deskpool.provisioning.handlers`, :mod:`~deskpool.provisioning.steps` (the
steps) and :mod:`~deskpool.provisioning.recorder` (an attempt's fenced writes).
"""
