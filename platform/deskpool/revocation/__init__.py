"""Access that is taken away ends at once: desktops, shadows and tokens of users who lost it.

:mod:`~deskpool.revocation.model` says what a user keeps, :mod:`~deskpool.revocation.store`
holds the SQL, :mod:`~deskpool.revocation.service` ends what was lost in the transaction of the
change that took it away.
"""
