"""The watermark the gateway draws over a desktop: Guacamole instructions, no guest CPU.

The text (its template already filled: user, session, address, time) is drawn with Pillow,
rotated by the policy's angle, into one PNG tile with the policy's spacing around it. The tile
goes to an off-screen buffer of its own (:data:`WATERMARK_BUFFER`, a negative index as Guacamole
buffers have), and a visible layer of its own (:data:`WATERMARK_LAYER`, a child of the default
layer 0 placed above everything at z :data:`WATERMARK_Z`, with the policy's opacity as its
``shade``) is filled with the tile as a repeating pattern (``rect`` then ``lfill``, the SRC
channel mask so a redraw replaces what was there). So the browser tiles the text itself: one
small PNG per text, whatever the size of the screen.

The watermark follows what the gateway sends the browser: :meth:`Watermark.apply` is given each
message of complete instructions on their way to the browser and returns it with the watermark
inserted right after guacd sizes the default layer (``size,0,W,H``): the whole watermark the
first time, the layer's new size and fill at each resize, before the rest of that frame and its
``sync`` (guacamole-common-js draws only at a ``sync``). :meth:`Watermark.set_text`
and :meth:`Watermark.set_style` redraw it when the text (the time in it) or the policy changes
and return nothing when nothing did; :meth:`Watermark.show` and :meth:`Watermark.remove` turn
it on and off mid-session. Since recordings keep what the browser is sent, they carry the
watermark too.

It is pure (no I/O, no clock): the tunnel calls it with the outgoing stream and decides when the
text changes.

Layer indexes: guacd allocates its own visible layers from 1 upward and buffers from -1 downward
(``guac_client_alloc_layer``, ``guac_client_alloc_buffer``), a handful per connection; the
watermark's are far from both.
"""

from __future__ import annotations

import base64
import io
import math
import re
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from deskpool.guacamole import encode

__all__ = [
    "WATERMARK_BUFFER",
    "WATERMARK_LAYER",
    "WATERMARK_Z",
    "Watermark",
    "WatermarkStyle",
    "render_tile",
]

#: The visible layer the watermark is drawn on.
WATERMARK_LAYER = 32000
#: The off-screen buffer holding one tile.
WATERMARK_BUFFER = -32000
#: Its place above the desktop's layers (guacd's own layers sit at z 0).
WATERMARK_Z = 1000
#: Stream indexes the tile's ``img`` uses: even ones guacd's users never reach (guacd's
#: user-level streams are below 128, its connection-level ones odd).
_STREAM = 4000
#: ``GUAC_COMP_SRC``: replace the destination's pixels, alpha included.
_SRC = 12
#: The most bytes of one ``blob`` (guacd's ``GUAC_PROTOCOL_BLOB_MAX_LENGTH``).
_BLOB = 6048
#: Point size of the text.
FONT_SIZE = 18
#: ``size,0,W,H``: guacd sizing the default layer (encoded as the wire has it).
_DEFAULT_LAYER_SIZE = re.compile(r"4\.size,1\.0,\d+\.(\d+),\d+\.(\d+)[,;]")


@dataclass(frozen=True, slots=True)
class WatermarkStyle:
    """How the text is drawn.

    :param opacity: from just above 0 (invisible) to 1.
    :param angle: degrees from -90 to 90; negative rises to the right (as CSS ``rotate``).
    :param spacing: pixels between two copies of the text.
    :raises ValueError: a value is out of its range.
    """

    opacity: float
    angle: float
    spacing: int

    def __post_init__(self) -> None:
        if not 0 < self.opacity <= 1:
            raise ValueError("opacity must be above 0 and at most 1")
        if not -90 <= self.angle <= 90:
            raise ValueError("angle must be between -90 and 90 degrees")
        if self.spacing < 0:
            raise ValueError("spacing must not be negative")

    @property
    def shade(self) -> int:
        """The layer's opacity as Guacamole's ``shade`` takes it (0-255)."""
        return max(1, min(255, round(self.opacity * 255)))


def render_tile(text: str, style: WatermarkStyle) -> Image.Image:
    """One tile: ``text`` in white with a dark outline, rotated, with ``spacing`` around it.

    Opaque where the text is and transparent elsewhere; the layer's ``shade`` gives the opacity.
    """
    font = ImageFont.load_default(size=FONT_SIZE)
    probe = ImageDraw.Draw(Image.new("RGBA", (1, 1)))
    left, top, right, bottom = probe.textbbox((0, 0), text or " ", font=font, stroke_width=1)
    width, height = max(math.ceil(right - left), 1), max(math.ceil(bottom - top), 1)
    label = Image.new("RGBA", (width + 4, height + 4), (0, 0, 0, 0))
    ImageDraw.Draw(label).text(
        (2 - left, 2 - top),
        text,
        font=font,
        fill=(255, 255, 255, 255),
        stroke_width=1,
        stroke_fill=(32, 32, 32, 255),
    )
    # Pillow turns counter-clockwise for a positive angle; the policy's negative angle rises.
    rotated = label.rotate(-style.angle, resample=Image.Resampling.BICUBIC, expand=True)
    box = rotated.getchannel("A").getbbox() or (0, 0, 1, 1)
    rotated = rotated.crop(box)
    margin = max(style.spacing // 2, 1)
    tile = Image.new("RGBA", (rotated.width + 2 * margin, rotated.height + 2 * margin))
    tile.paste(rotated, (margin, margin))
    return tile


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


class Watermark:
    """The watermark of one tunnel: what to add to the instructions the browser is sent.

    It follows the display's size whether it is shown or not, so one turned on mid-session
    (:meth:`show`) is drawn at once at the right size.

    :param text: the text, its template filled.
    :param style: opacity, angle and spacing.
    :param enabled: whether it is shown (from the display's first size on).
    """

    __slots__ = ("_drawn", "_size", "_tile", "enabled", "style", "text")

    def __init__(self, text: str, style: WatermarkStyle, *, enabled: bool = True) -> None:
        self.text = text
        self.style = style
        self.enabled = enabled
        #: The default layer's size, once guacd said it.
        self._size: tuple[int, int] | None = None
        #: The instructions that draw the tile into its buffer (made once per text and style).
        self._tile: str | None = None
        #: Whether the watermark is on the browser's display now.
        self._drawn = False

    @property
    def drawn(self) -> bool:
        """Whether the watermark is on the browser's display."""
        return self._drawn

    def apply(self, text: str) -> str:
        """``text`` (complete instructions on their way to the browser) with the watermark in it.

        The whole watermark right after the first ``size`` of the default layer, the layer
        resized and refilled right after each later one: before the rest of guacd's frame and
        its ``sync``, so the browser draws it with that frame (guacamole-common-js draws what
        it received only at a ``sync``). Otherwise (or when not shown) ``text`` unchanged.
        """
        if "4.size,1.0," not in text:
            return text
        matches = list(_DEFAULT_LAYER_SIZE.finditer(text))
        if not matches:
            return text
        found = matches[-1]
        width, height = int(found.group(1)), int(found.group(2))
        resized = self._size != (width, height)
        self._size = (width, height)
        if not self.enabled:
            return text
        if not self._drawn:
            extra = self._everything()
        elif resized:
            extra = self._fill()
        else:
            return text
        end = text.index(";", found.start()) + 1
        return text[:end] + extra + text[end:]

    def set_text(self, text: str) -> str:
        """The text is now ``text``: what redraws it (nothing when unchanged or not shown)."""
        if text == self.text:
            return ""
        self.text = text
        return self._redraw()

    def set_style(self, style: WatermarkStyle) -> str:
        """The style is now ``style``: what redraws it (nothing when unchanged or not shown)."""
        if style == self.style:
            return ""
        self.style = style
        if not self._drawn:
            self._tile = None
            return ""
        return self._redraw() + encode("shade", WATERMARK_LAYER, style.shade)

    def show(self) -> str:
        """Turn it on: what draws it now (nothing before the display has a size)."""
        self.enabled = True
        if self._drawn or self._size is None:
            return ""
        return self._everything()

    def remove(self) -> str:
        """Turn it off: what takes it off the display (nothing when it is not there)."""
        self.enabled = False
        if not self._drawn:
            return ""
        self._drawn = False
        return encode("dispose", WATERMARK_LAYER) + encode("dispose", WATERMARK_BUFFER)

    def _redraw(self) -> str:
        self._tile = None
        if not self._drawn:
            return ""
        return self._tile_instructions() + self._fill()

    # ------------------------------------------------------------------------------ drawing
    def _everything(self) -> str:
        self._drawn = True
        return (
            self._tile_instructions()
            + encode("move", WATERMARK_LAYER, 0, 0, 0, WATERMARK_Z)
            + encode("shade", WATERMARK_LAYER, self.style.shade)
            + self._fill()
        )

    def _tile_instructions(self) -> str:
        if self._tile is None:
            tile = render_tile(self.text, self.style)
            png = _png(tile)
            parts = [
                encode("size", WATERMARK_BUFFER, tile.width, tile.height),
                encode("img", _STREAM, _SRC, WATERMARK_BUFFER, "image/png", 0, 0),
            ]
            for start in range(0, len(png), _BLOB):
                chunk = base64.b64encode(png[start : start + _BLOB]).decode()
                parts.append(encode("blob", _STREAM, chunk))
            parts.append(encode("end", _STREAM))
            self._tile = "".join(parts)
        return self._tile

    def _fill(self) -> str:
        assert self._size is not None
        width, height = self._size
        return (
            encode("size", WATERMARK_LAYER, width, height)
            + encode("rect", WATERMARK_LAYER, 0, 0, width, height)
            + encode("lfill", _SRC, WATERMARK_LAYER, WATERMARK_BUFFER)
        )
