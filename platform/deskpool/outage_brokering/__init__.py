"""Brokering through a PostgreSQL outage, from a snapshot kept in Redis (issue 34, item 4).

While the database answers, the worker keeps in Redis what opening a desktop needs
(:mod:`.snapshot`); when it does not, the api and the gateway hand desktops out from there,
each act claimed atomically and journaled in a Redis stream (:mod:`.claims`,
:mod:`.service`, :mod:`.broker`); when it returns, the journal is written into it in order
and exactly once (:mod:`.replay`). The pure rules and records are :mod:`.model`.
"""
