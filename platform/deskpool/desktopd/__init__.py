"""The desktop daemon simulator: a stand-in for guacd that draws a desktop of its own.

guacd is not packaged by Debian, so a fresh machine has no desktop daemon. The simulator speaks
the guacd side of the Guacamole protocol faithfully (:mod:`deskpool.desktopd.daemon`) and draws
a simple desktop (:mod:`deskpool.desktopd.screen`): ``deskpool dev`` runs it when nothing
listens at ``DESKTOPD_ADDRESS``, and the test suite uses it as its guacd fake. Run it alone with
``python -m deskpool.desktopd [HOST:PORT]``.
"""

from deskpool.desktopd.daemon import DesktopDaemonSimulator

__all__ = ["DesktopDaemonSimulator"]
