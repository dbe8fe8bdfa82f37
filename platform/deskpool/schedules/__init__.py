"""Capacity and power schedules of pools (issue 25).

A schedule (:mod:`deskpool.schedules.model`) has an IANA time zone, weekly *phases* and
*exception dates*; the phase in force at an instant is a pure function of the schedule and the
instant (:func:`deskpool.schedules.model.phase_at`). A pool that references a schedule is
reconciled to the targets of the phase in force (:func:`deskpool.schedules.model.targets_of`);
a pool without one behaves as its own ``min_size`` and ``spare`` say. The SQL is
:mod:`deskpool.schedules.store`, the use cases :mod:`deskpool.schedules.service`.
"""
