"""deskpool: a virtual desktop administration platform.

The package is the host runtime (the *platform*): configuration, the plugin host, the
database and key-value adapters, the REST API and the contracts that plugins implement.
Plugins import the platform; the platform never imports a plugin.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("deskpool")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
