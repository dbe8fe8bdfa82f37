"""What of a browser's input reaches the desktop daemon, and when.

**Held until the desktop is drawn.** guacd 1.6.0 runs the handlers of a user's instructions
(``size``, ``key``, ``mouse``, ``touch``, ``clipboard``, the file and stream instructions
``file``, ``pipe``, ``blob``, ``end``, ``ack``, ``get``, ``put``, ``audio``, ``argv`` and the
``usb*`` ones: the user handler table of libguac's ``user-handlers.c``) as soon as they arrive,
even while its VNC or RDP client is still connecting; a ``size`` or a ``mouse`` then crashes
the connection's process (libvncclient has no client yet), and guacd's parent keeps the socket
open, silent. So until the daemon shows the connection is up, with its first frame that drew
something (:mod:`deskpool_gateway.drawing`), the gateway holds everything the browser sends
except keep-alives (``nop``), ``disconnect`` and the answers to the daemon's ``required`` (the
``argv`` streams that carry credentials the remote desktop asks for while it connects: their
``argv``, ``blob`` and ``end``), then forwards what it held in the order it came. What it holds
is bounded (``GATEWAY_HELD_INPUT_LIMIT`` bytes): more ends the tunnel with ``CLIENT_OVERRUN``.
This holds for any client, not only the console.

**Read-only tunnels send no input.** A tunnel opened read-only (an administrator watching a
session) forwards only frame acknowledgements (``sync``), keep-alives (``nop``), stream
acknowledgements (``ack``: the browser's flow control of what the daemon sends) and
``disconnect``; every other instruction is dropped here, so read-only does not rest on the
daemon.
"""

from __future__ import annotations

from deskpool.guacamole import Instruction, InstructionParser

__all__ = ["PASS_EARLY", "READ_ONLY_ALLOWED", "BrowserInput", "HeldInputOverflow"]

#: What passes at once even before the daemon drew its first frame.
PASS_EARLY = frozenset({"nop", "disconnect"})
#: Everything a read-only tunnel forwards.
READ_ONLY_ALLOWED = frozenset({"sync", "nop", "ack", "disconnect"})


class HeldInputOverflow(Exception):
    """The browser sent more than the gateway holds while the daemon connects."""


class BrowserInput:
    """Decides, instruction by instruction, what of a browser's input is forwarded now.

    :param read_only: the tunnel is read-only: only :data:`READ_ONLY_ALLOWED` passes.
    :param limit: the most characters held until the daemon is up.
    """

    __slots__ = ("_argv_streams", "_held", "_held_size", "limit", "read_only", "up")

    def __init__(self, *, read_only: bool, limit: int) -> None:
        self.read_only = read_only
        self.limit = limit
        #: Whether the daemon has drawn its first frame.
        self.up = False
        self._held: list[str] = []
        self._held_size = 0
        #: Indexes of the browser's ``argv`` streams (answers to ``required``) while not up.
        self._argv_streams: set[str] = set()

    @property
    def held(self) -> int:
        """Characters held so far."""
        return self._held_size

    def admit(self, text: str) -> str:
        """What of ``text`` (complete instructions, none internal) to forward now.

        The rest is held (until :meth:`release`) or, on a read-only tunnel, dropped.

        :raises HeldInputOverflow: holding it would exceed :attr:`limit`.
        """
        if self.up and not self.read_only:
            return text
        now: list[str] = []
        for instruction in InstructionParser().feed_instructions(text):
            opcode = instruction.opcode
            if self.read_only and opcode not in READ_ONLY_ALLOWED:
                continue
            encoded = instruction.encode()
            if self.up or opcode in PASS_EARLY or self._answers_required(instruction):
                now.append(encoded)
                continue
            self._held_size += len(encoded)
            if self._held_size > self.limit:
                raise HeldInputOverflow(f"more than {self.limit} characters of input held")
            self._held.append(encoded)
        return "".join(now)

    def _answers_required(self, instruction: Instruction) -> bool:
        """Whether ``instruction`` belongs to an ``argv`` stream (guacd takes them early)."""
        opcode, args = instruction
        if not args:
            return False
        if opcode == "argv":
            self._argv_streams.add(args[0])
            return True
        if opcode == "end" and args[0] in self._argv_streams:
            self._argv_streams.discard(args[0])
            return True
        return opcode == "blob" and args[0] in self._argv_streams

    def release(self) -> str:
        """The daemon is up: everything held, in order; nothing is held from now on."""
        self.up = True
        held = "".join(self._held)
        self._held = []
        self._held_size = 0
        return held
