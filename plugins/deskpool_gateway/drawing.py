"""What the daemon's output means for the tunnel: a first frame drawn, an orderly end.

**A first frame is something drawn.** A ``sync`` ends a frame, but guacd 1.6.0 sends one
before it drew anything: on a refused RDP login it sends ``sync`` 0.05 s after ``ready`` and
then draws nothing, ever. So the desktop is up once a ``sync`` ends a frame in which something
was drawn on a visible layer (layer index 0 or above; negative indexes are off-screen buffers):
an image (``img`` stream, or the older ``png`` and ``jpeg``), a fill or stroke (``cfill``,
``lfill``, ``cstroke``, ``lstroke``, which draw the path ``rect``, ``arc``... traced) or a copy
onto it (``copy``, ``transfer``). ``cursor``, ``size``, ``name`` and ``nop`` draw nothing.

**An orderly end says so.** guacd ends a connection with its ``disconnect`` instruction, then
closes the socket; a connection whose process died (killed, crashed) closes the socket without
it: :func:`ends_with_disconnect` tells the two apart from the daemon's last output.
"""

from __future__ import annotations

from deskpool.guacamole import InstructionParser

__all__ = ["DRAWING", "FirstFrame", "ends_with_disconnect"]

#: The instructions that draw, with the index of the argument naming the layer drawn on.
DRAWING: dict[str, int] = {
    "img": 2,
    "png": 1,
    "jpeg": 1,
    "cfill": 1,
    "lfill": 1,
    "cstroke": 1,
    "lstroke": 1,
    "copy": 6,
    "transfer": 6,
}

_DISCONNECT = "10.disconnect;"


def _visible(layer: str) -> bool:
    return layer.isascii() and layer.isdigit()


class FirstFrame:
    """Fed the daemon's output (complete instructions) until it says the first frame ended."""

    __slots__ = ("drawn",)

    def __init__(self) -> None:
        #: Whether something was drawn on a visible layer since the daemon's first output.
        self.drawn = False

    def feed(self, text: str) -> bool:
        """Whether ``text`` ends the first frame that drew something (after what came before)."""
        up = False
        for opcode, args in InstructionParser().feed_instructions(text):
            if opcode == "sync":
                up = up or self.drawn
            elif not self.drawn and opcode in DRAWING:
                index = DRAWING[opcode]
                self.drawn = len(args) > index and _visible(args[index])
        return up


def ends_with_disconnect(text: str) -> bool:
    """Whether the last instruction of ``text`` (complete instructions) is ``disconnect``."""
    if not text.endswith(_DISCONNECT):
        return False
    instructions = InstructionParser().feed_instructions(text)
    return bool(instructions) and instructions[-1].opcode == "disconnect"
