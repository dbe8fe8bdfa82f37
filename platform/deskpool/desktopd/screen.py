"""The simulated desktop's picture: what the simulator draws, as PNG regions.

A plain desktop: a top bar with the VM's name and a clock, and a window that says who is signed
in, echoes what they type and where the pointer is, and marks mouse clicks. Drawing is plain
Pillow; every change names the rectangle it dirtied, so the daemon sends only those regions
(PNG crops), as guacd sends only what changed on the remote screen.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field

from PIL import Image, ImageDraw, ImageFont

__all__ = ["DesktopScreen", "Region", "keysym_text"]

BACKGROUND = (31, 78, 121)
BAR = (16, 42, 67)
WINDOW = (240, 244, 248)
INK = (16, 42, 67)
ACCENT = (217, 72, 15)
BAR_HEIGHT = 40
#: The most characters of typed text kept on screen.
TYPED_LIMIT = 400
#: Screen sizes whose static layout is kept (see :meth:`DesktopScreen._layout`).
LAYOUTS_KEPT = 8
_LAYOUTS: dict[tuple[int, int], Image.Image] = {}
_LAYOUT_PICTURES: dict[tuple[int, int], bytes] = {}
#: Pictures of the clock kept, by box and time (see :meth:`DesktopScreen.region`).
CLOCKS_KEPT = 32
_CLOCKS: dict[tuple[Box, str], bytes] = {}

Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class Region:
    """A PNG of one rectangle of the screen, placed at ``x``, ``y``."""

    x: int
    y: int
    png: bytes


def keysym_text(keysym: int) -> str | None:
    """The character an X11 keysym types (backspace and newline for BackSpace and Return)."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    if 0x01000100 <= keysym <= 0x0110FFFF:
        return chr(keysym - 0x01000000)
    return {0xFF08: "\b", 0xFF0D: "\n", 0xFF8D: "\n", 0xFF09: "    "}.get(keysym)


@dataclass
class DesktopScreen:
    """The desktop of one simulated connection.

    :param width: screen width in pixels.
    :param height: screen height in pixels.
    :param vm_name: shown in the top bar.
    :param user_name: shown in the window.
    :param protocol: ``vnc`` or ``rdp``.
    """

    width: int
    height: int
    vm_name: str
    user_name: str
    protocol: str
    typed: str = ""
    #: The desktop's clipboard (what the window shows of it).
    clipboard: str = ""
    pointer: tuple[int, int, int] = (0, 0, 0)
    clicks: list[tuple[int, int]] = field(default_factory=list)
    _left_down: bool = field(default=False, init=False, repr=False)
    _clock_stamp: str = field(default="", init=False, repr=False)
    _signed_in_box: Box = field(default=(0, 0, 1, 1), init=False, repr=False)
    _image: Image.Image = field(init=False, repr=False)
    _font: ImageFont.FreeTypeFont | ImageFont.ImageFont = field(init=False, repr=False)
    _small: ImageFont.FreeTypeFont | ImageFont.ImageFont = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._font = ImageFont.load_default(size=20)
        self._small = ImageFont.load_default(size=15)
        self.resize(self.width, self.height)

    # ------------------------------------------------------------------------------ layout
    @property
    def window_box(self) -> Box:
        """The window in the middle of the desktop."""
        w = min(self.width - 40, 720)
        h = min(self.height - BAR_HEIGHT - 40, 360)
        x = (self.width - w) // 2
        y = BAR_HEIGHT + max(20, (self.height - BAR_HEIGHT - h) // 2)
        return (x, y, x + max(w, 10), y + max(h, 10))

    @property
    def clock_box(self) -> Box:
        """The clock, right of the top bar."""
        return (max(self.width - 120, 0), 0, self.width, BAR_HEIGHT)

    @property
    def text_box(self) -> Box:
        """The echo of typed text inside the window."""
        x0, y0, x1, y1 = self.window_box
        return (x0 + 20, y0 + 110, x1 - 20, y1 - 40)

    @property
    def clipboard_box(self) -> Box:
        """The clipboard line, right of "Type here:"."""
        x0, y0, x1, _ = self.window_box
        return (x0 + 140, y0 + 74, max(x1 - 20, x0 + 141), y0 + 100)

    @property
    def pointer_box(self) -> Box:
        """The pointer status line at the bottom of the window."""
        x0, _, x1, y1 = self.window_box
        return (x0 + 20, y1 - 34, x1 - 20, y1 - 10)

    # ------------------------------------------------------------------------------ changes
    def _layout(self) -> Image.Image:
        """What every desktop of this size shows: background, bar, window and its labels.

        Drawn once per size and copied: a burst of new connections (9 a.m.) spent a third of
        the simulator's time drawing the same picture again for each.
        """
        size = (self.width, self.height)
        layout = _LAYOUTS.get(size)
        if layout is None:
            layout = Image.new("RGB", size, BACKGROUND)
            draw = ImageDraw.Draw(layout)
            draw.rectangle((0, 0, self.width, BAR_HEIGHT), fill=BAR)
            x0, y0, x1, y1 = self.window_box
            draw.rectangle((x0, y0, x1, y1), fill=WINDOW, outline=ACCENT, width=2)
            draw.text((x0 + 20, y0 + 16), "Simulated desktop", fill=ACCENT, font=self._font)
            draw.text((x0 + 20, y0 + 78), "Type here:", fill=INK, font=self._small)
            while len(_LAYOUTS) >= LAYOUTS_KEPT:
                oldest = next(iter(_LAYOUTS))
                del _LAYOUTS[oldest]
                _LAYOUT_PICTURES.pop(oldest, None)
            _LAYOUTS[size] = layout
        return layout

    def resize(self, width: int, height: int) -> Box:
        """Draw the whole desktop at a new size; the dirty box is the whole screen."""
        self.width, self.height = max(width, 64), max(height, 64)
        self._image = self._layout().copy()
        draw = ImageDraw.Draw(self._image)
        draw.text((14, 9), f"deskpool · {self.vm_name}", fill=(255, 255, 255), font=self._font)
        x0, y0, _, _ = self.window_box
        signed_in = f"Signed in as {self.user_name or 'unknown user'} · {self.protocol.upper()}"
        draw.text((x0 + 20, y0 + 48), signed_in, fill=INK, font=self._small)
        left, top, right, bottom = draw.textbbox((x0 + 20, y0 + 48), signed_in, font=self._small)
        self._signed_in_box = (int(left), int(top), int(right) + 1, int(bottom) + 1)
        self._draw_clock(time.time())
        self._draw_clipboard()
        self._draw_text()
        self._draw_pointer()
        for click in self.clicks:
            self._draw_click(*click)
        return (0, 0, self.width, self.height)

    def tick(self, now: float) -> Box:
        """Redraw the clock."""
        return self._draw_clock(now)

    def key(self, keysym: int, pressed: bool) -> Box | None:
        """Echo a pressed key; ``None`` when nothing changed."""
        text = keysym_text(keysym) if pressed else None
        if text is None:
            return None
        self.typed = self.typed[:-1] if text == "\b" else (self.typed + text)[-TYPED_LIMIT:]
        return self._draw_text()

    def show_clipboard(self, text: str) -> Box:
        """The desktop's clipboard is ``text`` now."""
        self.clipboard = text
        return self._draw_clipboard()

    def paste(self, text: str) -> Box:
        """Type ``text`` (the clipboard pasted)."""
        self.typed = (self.typed + text)[-TYPED_LIMIT:]
        return self._draw_text()

    def pdf(self) -> bytes:
        """The screen printed: a one-page PDF of it."""
        buffer = io.BytesIO()
        self._image.save(buffer, "PDF", resolution=96.0)
        return buffer.getvalue()

    def mouse(self, x: int, y: int, mask: int) -> list[Box]:
        """Show the pointer's position; a new left-button press leaves a mark."""
        changed = [self._set_pointer(x, y, mask)]
        pressed = bool(mask & 1) and not self._left_down
        self._left_down = bool(mask & 1)
        if pressed:
            self.clicks = [*self.clicks[-49:], (x, y)]
            changed.append(self._draw_click(x, y))
        return changed

    def whole(self) -> list[Region]:
        """The whole desktop for a user who just joined, as pictures drawn in order.

        The layout of its size (encoded once per size), then what this desktop draws on it:
        its name and clock, the signed-in line, the clipboard, the typed text, the pointer.
        A new connection's first frame costs a few small pictures instead of a whole screen
        (9 a.m. opens a thousand at once, issue 39). A desktop with marks of clicks on it (a
        resumed one) is sent as one picture.
        """
        if self.clicks:
            return [self.region((0, 0, self.width, self.height))]
        size = (self.width, self.height)
        layout = _LAYOUT_PICTURES.get(size)
        if layout is None:
            buffer = io.BytesIO()
            self._layout().save(buffer, "PNG", compress_level=1)
            layout = _LAYOUT_PICTURES[size] = buffer.getvalue()
        drawn = (
            (0, 0, self.width, BAR_HEIGHT),
            self._signed_in_box,
            self.clipboard_box,
            self.text_box,
            self.pointer_box,
        )
        # A filled box's right and bottom edges are drawn too (Pillow's boxes include them).
        return [Region(0, 0, layout), *(self.region((a, b, c + 1, d + 1)) for a, b, c, d in drawn)]

    def region(self, box: Box) -> Region:
        """The PNG of ``box`` (clipped to the screen)."""
        x0, y0 = max(box[0], 0), max(box[1], 0)
        x1, y1 = min(box[2], self.width), min(box[3], self.height)
        clipped = (x0, y0, max(x1, x0 + 1), max(y1, y0 + 1))
        # The clock shows only the time (its box is filled first): every desktop of one size
        # shows the same picture of it each second, encoded once.
        clock = (clipped, self._clock_stamp) if box == self.clock_box else None
        png = _CLOCKS.get(clock) if clock is not None else None
        if png is None:
            buffer = io.BytesIO()
            self._image.crop(clipped).save(buffer, "PNG", compress_level=1)
            png = buffer.getvalue()
            if clock is not None:
                while len(_CLOCKS) >= CLOCKS_KEPT:
                    del _CLOCKS[next(iter(_CLOCKS))]
                _CLOCKS[clock] = png
        return Region(x0, y0, png)

    # ------------------------------------------------------------------------------ drawing
    def _draw_clock(self, now: float) -> Box:
        box = self.clock_box
        draw = ImageDraw.Draw(self._image)
        draw.rectangle(box, fill=BAR)
        stamp = time.strftime("%H:%M:%S", time.localtime(now))
        draw.text((box[0] + 14, 9), stamp, fill=(255, 255, 255), font=self._font)
        self._clock_stamp = stamp
        return box

    def _draw_clipboard(self) -> Box:
        box = self.clipboard_box
        draw = ImageDraw.Draw(self._image)
        draw.rectangle(box, fill=WINDOW)
        shown = " ".join(self.clipboard.split())
        if len(shown) > 48:
            shown = shown[:47] + "…"
        draw.text((box[0], box[1] + 4), f"Clipboard: {shown}", fill=INK, font=self._small)
        return box

    def _draw_text(self) -> Box:
        box = self.text_box
        draw = ImageDraw.Draw(self._image)
        draw.rectangle(box, fill=(255, 255, 255), outline=(180, 190, 200))
        width = max((box[2] - box[0] - 16) // 11, 1)
        lines: list[str] = []
        for paragraph in self.typed.split("\n"):
            lines += [paragraph[i : i + width] for i in range(0, len(paragraph), width)] or [""]
        visible = max((box[3] - box[1] - 12) // 24, 1)
        y = box[1] + 6
        for line in lines[-visible:]:
            draw.text((box[0] + 8, y), line, fill=INK, font=self._font)
            y += 24
        return box

    def _set_pointer(self, x: int, y: int, mask: int) -> Box:
        self.pointer = (x, y, mask)
        return self._draw_pointer()

    def _draw_pointer(self) -> Box:
        box = self.pointer_box
        draw = ImageDraw.Draw(self._image)
        draw.rectangle(box, fill=WINDOW)
        x, y, mask = self.pointer
        draw.text(
            (box[0], box[1] + 2), f"pointer {x},{y} buttons {mask}", fill=INK, font=self._small
        )
        return box

    def _draw_click(self, x: int, y: int) -> Box:
        draw = ImageDraw.Draw(self._image)
        box = (x - 6, y - 6, x + 6, y + 6)
        draw.ellipse(box, fill=ACCENT)
        return (box[0], box[1], box[2] + 1, box[3] + 1)
