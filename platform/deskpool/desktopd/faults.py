"""Faults of guacd 1.6.0 the desktop daemon simulator can be told to show (tests drive them).

- **A connection's process dies** (:meth:`DesktopDaemonSimulator.kill_connection`): guacd runs
  each connection in a child process that holds its users' sockets; when it dies (killed, or a
  crash past the first frame) every socket simply closes: no ``error``, no ``disconnect``. The
  remote desktop itself lives on (an RDP or VNC server keeps the user's session when its client
  goes away), so the next connection to the same desktop finds it as it was: the simulator keeps
  the dead connection's screen and the next connection to that host shows it again.
- **An RDP login refused** (:class:`LoginRefusal`): with a wrong or missing RDP password, guacd
  1.6.0 sends a ``sync`` about 0.05 s after ``ready``, before anything is drawn, and then draws
  nothing: the socket stays open and silent but for keep-alives (``hang``), or the connection's
  process ends and the socket closes without a word (``close``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["REFUSED_LOGIN_SYNC_DELAY", "LoginRefusal"]

#: When guacd 1.6.0 sends its lone ``sync`` after ``ready`` on a refused RDP login.
REFUSED_LOGIN_SYNC_DELAY = 0.05


@dataclass(frozen=True)
class LoginRefusal:
    """RDP logins the remote desktops refuse.

    :param hostnames: the desktops that refuse (``None``: every RDP connection).
    :param then: after the lone ``sync``: ``hang`` (nothing drawn, ever, the socket open) or
        ``close`` (the socket closes, without ``error`` or ``disconnect``).
    :param close_after: seconds after the ``sync`` before the socket closes (``close``).
    """

    hostnames: frozenset[str] | None = None
    then: Literal["hang", "close"] = "hang"
    close_after: float = 1.0

    def refuses(self, protocol: str, hostname: str) -> bool:
        """Whether a connection of ``protocol`` to ``hostname`` is refused."""
        return protocol == "rdp" and (self.hostnames is None or hostname in self.hostnames)
