"""Usage reports: concurrency, sessions, users, connected hours, failures and logon times.

:mod:`~deskpool.reports.model` computes a report from recorded facts (pure),
:mod:`~deskpool.reports.store` reads the facts of a period, :mod:`~deskpool.reports.service`
validates the request and puts the two together.
"""
