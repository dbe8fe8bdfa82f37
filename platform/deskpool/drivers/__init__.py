"""The hypervisor driver contract, as the platform re-exports it.

The contract is its own distribution, ``deskpool-driver-api`` (package
:mod:`deskpool_driver_api`), which the platform and every driver depend on; this module
re-exports all of it so that ``from deskpool.drivers import HypervisorDriver`` keeps working.
Drivers import :mod:`deskpool_driver_api` itself, which loads nothing of the platform. The
Redis implementation of the shared-state protocol is the platform's:
:mod:`deskpool.clusters.shared_state`.
"""

from deskpool_driver_api import *  # noqa: F403
from deskpool_driver_api import __all__ as __all__
