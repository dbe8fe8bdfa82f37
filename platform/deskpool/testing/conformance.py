"""The hypervisor driver conformance kit, as the platform re-exports it.

The kit lives in the driver contract, :mod:`deskpool_driver_api.conformance`, so that a driver
runs it without the platform installed; this module keeps the old import path working.
"""

from deskpool_driver_api.conformance import *  # noqa: F403
from deskpool_driver_api.conformance import __all__ as __all__
