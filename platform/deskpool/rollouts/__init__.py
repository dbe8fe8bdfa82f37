"""Image rollouts: a pool's desktops moved to another template, canary first, safely.

- :mod:`~deskpool.rollouts.model`: rollouts, their strategy, states and per-desktop entries
  (pure).
- :mod:`~deskpool.rollouts.plan` and :mod:`~deskpool.rollouts.planner`: the pure planner the
  pool planner (:mod:`deskpool.reconciliation.planner`) calls for a pool with an active rollout.
- :mod:`~deskpool.rollouts.store`: the SQL (rollouts, their desktops, the pools' image
  history).
- :mod:`~deskpool.rollouts.service`: the use cases (start, list, show, pause, resume, cancel,
  image history) and :mod:`~deskpool.reconciliation.rollout_apply`, which applies a plan's rollout
  actions
  inside the reconciliation's fenced transaction.
"""
