"""The simulated desktop's picture: what the simulator draws, as PNG regions.

A plain desktop: a top bar with the VM's name and a clock, and a window that says who is signed
in, echoes what they type and where the pointer is, and marks mouse clicks. Drawing is plain
Pillow; every change names the rectangle it dirtied, so the daemon sends only those regions
(PNG crops), as guacd sends only what changed on the remote screen.

A desktop is drawn as six elements on the static layout of its size, in this order: the VM's
name, the signed-in line, the clock, the clipboard line, the typed text and the pointer line.
While their pixels stay apart (each element's text inside its box, no two elements on the
same pixels, no click marks) the screen is only its state: a picture of any rectangle is the
layout's crop with the elements that reach into it drawn on it, the same pixels as a whole
screen drawn in that order. A thousand desktops opened at once (9 a.m.) then cost neither a
full-screen copy each (3 MB) nor the drawing and encoding of what every fresh desktop shows
alike. Anything else (clicks, text spilling out of its box) draws a whole screen as before.
"""

from __future__ import annotations

import functools
import io
import time
from dataclasses import dataclass, field
from itertools import combinations
from typing import TypeVar

from PIL import Image, ImageDraw, ImageFont

__all__ = ["DesktopScreen", "Region", "keysym_text"]

Box = tuple[int, int, int, int]
Colour = tuple[int, int, int]
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont

BACKGROUND = (31, 78, 121)
BAR = (16, 42, 67)
WINDOW = (240, 244, 248)
INK = (16, 42, 67)
ACCENT = (217, 72, 15)
WHITE = (255, 255, 255)
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
#: Pictures of the elements every fresh desktop shows alike (empty clipboard, no typed text,
#: the pointer at 0,0), by element, its box and the rectangle shown.
FRESH_KEPT = 48
_FRESH: dict[tuple[str, Box, Box], bytes] = {}
#: Where texts' pixels fall (:func:`_ink`), by font size, position and text.
INKS_KEPT = 512
_INKS: dict[tuple[int, tuple[int, int], str], Box] = {}

#: The elements, in the order a whole screen draws them (a later one covers an earlier one).
ELEMENTS = ("name", "signed_in", "clock", "clipboard", "text", "pointer")
#: The elements that fill their box before drawing their text: (fill, outline).
_FILLS: dict[str, tuple[Colour, Colour | None]] = {
    "clock": (BAR, None),
    "clipboard": (WINDOW, None),
    "text": (WHITE, (180, 190, 200)),
    "pointer": (WINDOW, None),
}
#: A text of an element: font size, position, text and colour.
_Text = tuple[int, tuple[int, int], str, Colour]
_K = TypeVar("_K")


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


@functools.cache
def _font(size: int) -> Font:
    # Shared by every desktop: loading it per desktop decoded the embedded font each time.
    return ImageFont.load_default(size=size)


@functools.cache
def _measure() -> ImageDraw.ImageDraw:
    return ImageDraw.Draw(Image.new("RGB", (1, 1)))


def _ink(size: int, xy: tuple[int, int], text: str) -> Box:
    """The box ``text`` drawn at ``xy`` can put pixels in (Pillow's text box)."""
    key = (size, xy, text)
    box = _INKS.get(key)
    if box is None:
        left, top, right, bottom = _measure().textbbox(xy, text, font=_font(size))
        box = (int(left), int(top), int(right), int(bottom))
        # Every desktop of a size measures the same clock, labels and fresh lines: kept.
        while len(_INKS) >= INKS_KEPT:
            del _INKS[next(iter(_INKS))]
        _INKS[key] = box
    return box


def _meet(a: Box, b: Box) -> bool:
    """Whether ``a`` and ``b`` share a pixel."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _within(inner: Box, outer: Box) -> bool:
    """Whether every pixel of ``inner`` (none when empty) is in ``outer``."""
    if inner[0] >= inner[2] or inner[1] >= inner[3]:
        return True
    return (
        outer[0] <= inner[0]
        and outer[1] <= inner[1]
        and inner[2] <= outer[2]
        and (inner[3] <= outer[3])
    )


def _painted(box: Box) -> Box:
    """The pixels a filled ``box`` covers (Pillow's boxes include their right and bottom)."""
    return (box[0], box[1], box[2] + 1, box[3] + 1)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", compress_level=1)
    return buffer.getvalue()


def _remember(cache: dict[_K, bytes], kept: int, key: _K, png: bytes) -> None:
    while len(cache) >= kept:
        del cache[next(iter(cache))]
    cache[key] = png


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
    #: The whole screen, once its elements no longer stay apart (see the module's docstring);
    #: ``None`` while the screen is its state.
    _image: Image.Image | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
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

    def _layout(self) -> Image.Image:
        """What every desktop of this size shows: background, bar, window and its labels.

        Drawn once per size: a burst of new connections (9 a.m.) spent a third of the
        simulator's time drawing the same picture again for each.
        """
        size = (self.width, self.height)
        layout = _LAYOUTS.get(size)
        if layout is None:
            layout = Image.new("RGB", size, BACKGROUND)
            draw = ImageDraw.Draw(layout)
            draw.rectangle((0, 0, self.width, BAR_HEIGHT), fill=BAR)
            x0, y0, x1, y1 = self.window_box
            draw.rectangle((x0, y0, x1, y1), fill=WINDOW, outline=ACCENT, width=2)
            draw.text((x0 + 20, y0 + 16), "Simulated desktop", fill=ACCENT, font=_font(20))
            draw.text((x0 + 20, y0 + 78), "Type here:", fill=INK, font=_font(15))
            while len(_LAYOUTS) >= LAYOUTS_KEPT:
                oldest = next(iter(_LAYOUTS))
                del _LAYOUTS[oldest]
                _LAYOUT_PICTURES.pop(oldest, None)
            _LAYOUTS[size] = layout
        return layout

    # ------------------------------------------------------------------------------ changes
    def resize(self, width: int, height: int) -> Box:
        """Show the desktop at a new size, from scratch; the dirty box is the whole screen."""
        self.width, self.height = max(width, 64), max(height, 64)
        self._clock_stamp = time.strftime("%H:%M:%S", time.localtime(time.time()))
        self._image = None
        left, top, right, bottom = self._footprint("signed_in")
        self._signed_in_box = (left, top, right + 1, bottom + 1)
        if self.clicks or not self._apart():
            self._materialize()
            for click in self.clicks:
                self._draw_click(*click)
        return (0, 0, self.width, self.height)

    def tick(self, now: float) -> Box:
        """Redraw the clock."""
        self._clock_stamp = time.strftime("%H:%M:%S", time.localtime(now))
        return self._redraw("clock")

    def key(self, keysym: int, pressed: bool) -> Box | None:
        """Echo a pressed key; ``None`` when nothing changed."""
        text = keysym_text(keysym) if pressed else None
        if text is None:
            return None
        self.typed = self.typed[:-1] if text == "\b" else (self.typed + text)[-TYPED_LIMIT:]
        return self._redraw("text")

    def show_clipboard(self, text: str) -> Box:
        """The desktop's clipboard is ``text`` now."""
        self.clipboard = text
        return self._redraw("clipboard")

    def paste(self, text: str) -> Box:
        """Type ``text`` (the clipboard pasted)."""
        self.typed = (self.typed + text)[-TYPED_LIMIT:]
        return self._redraw("text")

    def pdf(self) -> bytes:
        """The screen printed: a one-page PDF of it."""
        buffer = io.BytesIO()
        self.picture().save(buffer, "PDF", resolution=96.0)
        return buffer.getvalue()

    def mouse(self, x: int, y: int, mask: int) -> list[Box]:
        """Show the pointer's position; a new left-button press leaves a mark."""
        self.pointer = (x, y, mask)
        changed = [self._redraw("pointer")]
        pressed = bool(mask & 1) and not self._left_down
        self._left_down = bool(mask & 1)
        if pressed:
            self.clicks = [*self.clicks[-49:], (x, y)]
            changed.append(self._draw_click(x, y))
        return changed

    # ------------------------------------------------------------------------------ pictures
    def picture(self) -> Image.Image:
        """The whole screen as it is now (drawn for the occasion while it is only state)."""
        if self._image is not None:
            return self._image
        return self._crop((0, 0, self.width, self.height))

    def whole(self) -> list[Region]:
        """The whole desktop for a user who just joined, as pictures drawn in order.

        The layout of its size (encoded once per size), then what this desktop draws on it:
        its name and clock, the signed-in line, the clipboard, the typed text, the pointer.
        A new connection's first frame costs a few small pictures instead of a whole screen
        (9 a.m. opens a thousand at once, issue 39); of those, only the name and the
        signed-in line are this desktop's own while it is fresh. A desktop with marks of
        clicks on it (a resumed one) is sent as one picture.
        """
        full = (0, 0, self.width, self.height)
        if self.clicks:
            return [self.region(full)]
        size = (self.width, self.height)
        layout = _LAYOUT_PICTURES.get(size)
        if layout is None:
            layout = _LAYOUT_PICTURES[size] = _png(self._layout())
        drawn: list[Box]
        if self._image is not None:
            boxes = ((0, 0, self.width, BAR_HEIGHT), self._signed_in_box)
            # A filled box's right and bottom edges are drawn too (Pillow's boxes include them).
            drawn = [_painted(box) for box in boxes]
        else:
            # The name's own pixels, then the clock over them (as the screen draws them): the
            # clock's picture is the one every tick sends (its edge is the bar's colour).
            drawn = [self._footprint("name"), self.clock_box, self._footprint("signed_in")]
        drawn += [_painted(self.clipboard_box), _painted(self.text_box), _painted(self.pointer_box)]
        return [Region(0, 0, layout), *map(self.region, drawn)]

    def region(self, box: Box) -> Region:
        """The PNG of ``box`` (clipped to the screen)."""
        x0, y0 = max(box[0], 0), max(box[1], 0)
        x1, y1 = min(box[2], self.width), min(box[3], self.height)
        clipped = (x0, y0, max(x1, x0 + 1), max(y1, y0 + 1))
        # The clock shows only the time (its box is filled first): every desktop of one size
        # shows the same picture of it each second, encoded once.
        clock = (clipped, self._clock_stamp) if box == self.clock_box else None
        fresh = self._fresh(clipped) if clock is None else None
        if clock is not None:
            png = _CLOCKS.get(clock)
        else:
            png = _FRESH.get(fresh) if fresh is not None else None
        if png is None:
            png = _png(self._crop(clipped))
            if clock is not None:
                _remember(_CLOCKS, CLOCKS_KEPT, clock, png)
            elif fresh is not None:
                _remember(_FRESH, FRESH_KEPT, fresh, png)
        return Region(x0, y0, png)

    def _fresh(self, clipped: Box) -> tuple[str, Box, Box] | None:
        """The key of ``clipped``'s picture when every fresh desktop shows it alike."""
        if self._image is not None:
            return None  # clicks or spilt text may be on it
        unchanged = {"clipboard": not self.clipboard, "text": not self.typed}
        unchanged["pointer"] = self.pointer == (0, 0, 0)
        for element, alike in unchanged.items():
            box = self._box(element)
            # Inside an element's box there is only that element (its fill covers the box).
            if alike and _within(clipped, _painted(box)):
                return (element, box, clipped)
        return None

    def _crop(self, clipped: Box) -> Image.Image:
        """The pixels of ``clipped`` (a new image)."""
        if self._image is not None:
            return self._image.crop(clipped)
        image = self._layout().crop(clipped)
        draw = ImageDraw.Draw(image)
        for element in ELEMENTS:
            # Elements apart from the rectangle leave its pixels alone: not drawn.
            if _meet(self._footprint(element), clipped):
                self._paint(element, draw, clipped[0], clipped[1])
        return image

    # ------------------------------------------------------------------------------ elements
    def _box(self, element: str) -> Box:
        """The box a filled element fills."""
        if element == "clock":
            return self.clock_box
        if element == "clipboard":
            return self.clipboard_box
        if element == "text":
            return self.text_box
        return self.pointer_box

    def _texts(self, element: str) -> list[_Text]:
        """What ``element`` writes, where, in which size and colour."""
        x0, y0, _, _ = self.window_box
        if element == "name":
            return [(20, (14, 9), f"deskpool · {self.vm_name}", WHITE)]
        if element == "signed_in":
            who = self.user_name or "unknown user"
            return [(15, (x0 + 20, y0 + 48), f"Signed in as {who} · {self.protocol.upper()}", INK)]
        box = self._box(element)
        if element == "clock":
            return [(20, (box[0] + 14, 9), self._clock_stamp, WHITE)]
        if element == "clipboard":
            shown = " ".join(self.clipboard.split())
            if len(shown) > 48:
                shown = shown[:47] + "…"
            return [(15, (box[0], box[1] + 4), f"Clipboard: {shown}", INK)]
        if element == "pointer":
            x, y, mask = self.pointer
            return [(15, (box[0], box[1] + 2), f"pointer {x},{y} buttons {mask}", INK)]
        width = max((box[2] - box[0] - 16) // 11, 1)
        lines: list[str] = []
        for paragraph in self.typed.split("\n"):
            lines += [paragraph[i : i + width] for i in range(0, len(paragraph), width)] or [""]
        visible = max((box[3] - box[1] - 12) // 24, 1)
        top = box[1] + 6
        return [(20, (box[0] + 8, top + 24 * i), s, INK) for i, s in enumerate(lines[-visible:])]

    def _footprint(self, element: str) -> Box:
        """The pixels ``element`` may change: its filled box, or its text's box."""
        if element in _FILLS:
            return _painted(self._box(element))
        ((size, xy, text, _),) = self._texts(element)
        return _ink(size, xy, text)

    def _paint(self, element: str, draw: ImageDraw.ImageDraw, x: int, y: int) -> None:
        """Draw ``element`` with ``draw``, whose image starts at ``x``, ``y`` of the screen."""
        fill = _FILLS.get(element)
        if fill is not None:
            x0, y0, x1, y1 = self._box(element)
            draw.rectangle((x0 - x, y0 - y, x1 - x, y1 - y), fill=fill[0], outline=fill[1])
        for size, (left, top), text, colour in self._texts(element):
            draw.text((left - x, top - y), text, fill=colour, font=_font(size))

    def _fits(self, element: str) -> bool:
        """Whether a filled ``element``'s text stays in what the screen sends of it."""
        # The clock is sent as its box: its text must not reach the edge its fill covers too.
        bound = self.clock_box if element == "clock" else _painted(self._box(element))
        return all(_within(_ink(s, xy, text), bound) for s, xy, text, _ in self._texts(element))

    def _apart(self) -> bool:
        """Whether the elements' pixels stay apart (the name may run under the clock)."""
        for element in _FILLS:
            x0, y0, x1, y1 = self._box(element)
            if x1 < x0 or y1 < y0 or not self._fits(element):
                return False  # drawn as before (a box too small for Pillow fails as before)
        footprints = {element: self._footprint(element) for element in ELEMENTS}
        return not any(
            _meet(footprints[a], footprints[b])
            for a, b in combinations(ELEMENTS, 2)
            if (a, b) != ("name", "clock")
        )

    def _redraw(self, element: str) -> Box:
        """Show ``element``'s new state; its box is dirty."""
        if self._image is not None:
            self._paint(element, ImageDraw.Draw(self._image), 0, 0)
        elif not self._fits(element):
            # Its text spills out of its box and stays there, as on a real screen: from now
            # on the whole screen is drawn, the spilt text last (on whatever it covers).
            self._materialize(last=element)
        return self._box(element)

    def _materialize(self, last: str | None = None) -> None:
        """Draw the whole screen from its state, ``last`` drawn last."""
        image = self._layout().copy()
        draw = ImageDraw.Draw(image)
        for element in (*(e for e in ELEMENTS if e != last), *([last] if last else [])):
            self._paint(element, draw, 0, 0)
        self._image = image

    def _draw_click(self, x: int, y: int) -> Box:
        if self._image is None:
            self._materialize()  # marks of clicks stay under later text: a whole screen
        assert self._image is not None
        draw = ImageDraw.Draw(self._image)
        box = (x - 6, y - 6, x + 6, y + 6)
        draw.ellipse(box, fill=ACCENT)
        return (box[0], box[1], box[2] + 1, box[3] + 1)
