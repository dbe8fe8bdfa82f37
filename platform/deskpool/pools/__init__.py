"""Desktop pools: the domain model and its rules, with no I/O.

A *pool* is a set of desktops cloned from one template on one cluster and kept at a desired
size. This package holds the pure logic of pools, in the style of *Architecture Patterns with
Python* (cosmicpython): plain frozen dataclasses and functions that take the current state and
return a decision, tested without a database, a driver or an event loop. The adapters at the
edge (the repository, the worker's jobs, the API) load the state, call these functions, and
apply what they return.

- :mod:`deskpool.pools.model`: pools, desktops and observed VMs, and the validation of a pool.
- :mod:`deskpool.pools.states`: the desktop state machine and the provisioning steps.
- :mod:`deskpool.pools.naming`: naming patterns such as ``lab-{n:03}`` and free names.
- :mod:`deskpool.pools.planner`: what to do to converge a pool to its desired size and to
  repair drift, and why the pool is degraded.
- :mod:`deskpool.pools.allocation`: which desktop a user gets when they open a pool.
"""
