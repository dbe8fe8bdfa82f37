"""The desktop daemon simulator: a stand-in for guacd that draws a desktop of its own.

guacd is not packaged by Debian, so a fresh machine has no desktop daemon. The simulator speaks
the guacd side of the Guacamole protocol faithfully (:mod:`deskpool.desktopd.daemon`) and draws
a simple desktop (:mod:`deskpool.desktopd.screen`): ``deskpool dev`` runs it when nothing
listens at ``DESKTOPD_ADDRESS``, and the test suite uses it as its guacd fake. Run it alone with
``python -m deskpool.desktopd [HOST:PORT]``.

Told which networks hold real VNC servers, it bridges them instead of drawing
(:mod:`deskpool.desktopd.vnc`, over the RFB client :mod:`deskpool.desktopd.rfb`): a
development and test bridge, so a real VM's console reaches the browser without guacd.
Production runs guacd.
"""

from deskpool.desktopd.daemon import DesktopDaemonSimulator

__all__ = ["DesktopDaemonSimulator"]
