"""The simulated desktop's screen: what a connection draws is the same, however it is drawn.

The static layout (background, top bar, window, labels) is drawn once per screen size, a fresh
desktop is only its state until something needs the whole screen, and pictures every fresh
desktop shows alike are encoded once: every picture sent must stay the one cut from a screen
drawn from scratch, step by step, as the simulator drew it before (:class:`Reference`).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import pytest
from PIL import Image, ImageChops, ImageDraw, ImageFont

from deskpool.desktopd import screen as screen_module
from deskpool.desktopd.screen import BACKGROUND, BAR, DesktopScreen, Region

Box = tuple[int, int, int, int]
NOW = 1_800_000_000.0
BIG = ImageFont.load_default(size=20)
SMALL = ImageFont.load_default(size=15)
WINDOW = (240, 244, 248)
INK = (16, 42, 67)
ACCENT = (217, 72, 15)


class Reference:
    """The desktop drawn on one whole image, every change drawn on it.

    As the simulator drew it before it drew desktops in pieces; with what it sent then for a
    whole desktop (:meth:`sent_whole`).
    """

    def __init__(self, width: int, height: int, name: str, user: str, protocol: str) -> None:
        self.name, self.user, self.protocol = name, user, protocol
        self.typed, self.clipboard, self.pointer = "", "", (0, 0, 0)
        self.clicks: list[tuple[int, int]] = []
        self.left_down = False
        self.signed_in: Box = (0, 0, 1, 1)
        self.image = self.layout = Image.new("RGB", (1, 1))
        self.resize(width, height)

    def boxes(self) -> dict[str, Box]:
        w, h = self.width, self.height
        ww, wh = min(w - 40, 720), min(h - 80, 360)
        x0, y0 = (w - ww) // 2, 40 + max(20, (h - 40 - wh) // 2)
        x1, y1 = x0 + max(ww, 10), y0 + max(wh, 10)
        return {
            "window": (x0, y0, x1, y1),
            "clock": (max(w - 120, 0), 0, w, 40),
            "text": (x0 + 20, y0 + 110, x1 - 20, y1 - 40),
            "clipboard": (x0 + 140, y0 + 74, max(x1 - 20, x0 + 141), y0 + 100),
            "pointer": (x0 + 20, y1 - 34, x1 - 20, y1 - 10),
        }

    def resize(self, width: int, height: int) -> Box:
        self.width, self.height = max(width, 64), max(height, 64)
        x0, y0, x1, y1 = self.boxes()["window"]
        self.layout = Image.new("RGB", (self.width, self.height), BACKGROUND)
        draw = ImageDraw.Draw(self.layout)
        draw.rectangle((0, 0, self.width, 40), fill=BAR)
        draw.rectangle((x0, y0, x1, y1), fill=WINDOW, outline=ACCENT, width=2)
        draw.text((x0 + 20, y0 + 16), "Simulated desktop", fill=ACCENT, font=BIG)
        draw.text((x0 + 20, y0 + 78), "Type here:", fill=INK, font=SMALL)
        self.image = self.layout.copy()
        draw = ImageDraw.Draw(self.image)
        draw.text((14, 9), f"deskpool · {self.name}", fill=(255, 255, 255), font=BIG)
        line = f"Signed in as {self.user or 'unknown user'} · {self.protocol.upper()}"
        draw.text((x0 + 20, y0 + 48), line, fill=INK, font=SMALL)
        left, top, right, bottom = draw.textbbox((x0 + 20, y0 + 48), line, font=SMALL)
        self.signed_in = (int(left), int(top), int(right) + 1, int(bottom) + 1)
        self.tick(time.time())
        self.draw_clipboard()
        self.draw_text()
        self.draw_pointer()
        for x, y in self.clicks:
            self.draw_click(x, y)
        return (0, 0, self.width, self.height)

    def tick(self, now: float) -> Box:
        box = self.boxes()["clock"]
        draw = ImageDraw.Draw(self.image)
        draw.rectangle(box, fill=BAR)
        stamp = time.strftime("%H:%M:%S", time.localtime(now))
        draw.text((box[0] + 14, 9), stamp, fill=(255, 255, 255), font=BIG)
        return box

    def key(self, keysym: int, pressed: bool) -> Box:
        text = screen_module.keysym_text(keysym)
        assert pressed
        assert text is not None
        self.typed = self.typed[:-1] if text == "\b" else (self.typed + text)[-400:]
        return self.draw_text()

    def show_clipboard(self, text: str) -> Box:
        self.clipboard = text
        return self.draw_clipboard()

    def paste(self, text: str) -> Box:
        self.typed = (self.typed + text)[-400:]
        return self.draw_text()

    def mouse(self, x: int, y: int, mask: int) -> list[Box]:
        self.pointer = (x, y, mask)
        changed = [self.draw_pointer()]
        pressed = bool(mask & 1) and not self.left_down
        self.left_down = bool(mask & 1)
        if pressed:
            self.clicks = [*self.clicks[-49:], (x, y)]
            changed.append(self.draw_click(x, y))
        return changed

    def draw_clipboard(self) -> Box:
        box = self.boxes()["clipboard"]
        draw = ImageDraw.Draw(self.image)
        draw.rectangle(box, fill=WINDOW)
        shown = " ".join(self.clipboard.split())
        shown = shown[:47] + "…" if len(shown) > 48 else shown
        draw.text((box[0], box[1] + 4), f"Clipboard: {shown}", fill=INK, font=SMALL)
        return box

    def draw_text(self) -> Box:
        box = self.boxes()["text"]
        draw = ImageDraw.Draw(self.image)
        draw.rectangle(box, fill=(255, 255, 255), outline=(180, 190, 200))
        width = max((box[2] - box[0] - 16) // 11, 1)
        lines: list[str] = []
        for paragraph in self.typed.split("\n"):
            lines += [paragraph[i : i + width] for i in range(0, len(paragraph), width)] or [""]
        y = box[1] + 6
        for line in lines[-max((box[3] - box[1] - 12) // 24, 1) :]:
            draw.text((box[0] + 8, y), line, fill=INK, font=BIG)
            y += 24
        return box

    def draw_pointer(self) -> Box:
        box = self.boxes()["pointer"]
        draw = ImageDraw.Draw(self.image)
        draw.rectangle(box, fill=WINDOW)
        x, y, mask = self.pointer
        draw.text((box[0], box[1] + 2), f"pointer {x},{y} buttons {mask}", fill=INK, font=SMALL)
        return box

    def draw_click(self, x: int, y: int) -> Box:
        ImageDraw.Draw(self.image).ellipse((x - 6, y - 6, x + 6, y + 6), fill=ACCENT)
        return (x - 6, y - 6, x + 7, y + 7)

    def sent_whole(self) -> Image.Image:
        """What a user who joined saw: the screen, or the layout and the boxes drawn on it."""
        if self.clicks:
            return self.image
        shown = self.layout.copy()
        b = self.boxes()
        for x0, y0, x1, y1 in (
            (0, 0, self.width, 40),
            self.signed_in,
            b["clipboard"],
            b["text"],
            b["pointer"],
        ):
            box = (x0, y0, min(x1 + 1, self.width), min(y1 + 1, self.height))
            shown.paste(self.image.crop(box), box[:2])
        return shown


def composed(width: int, height: int, regions: list[Region]) -> Image.Image:
    """What a client shows after drawing ``regions`` in order on an empty display."""
    shown = Image.new("RGB", (width, height))
    for region in regions:
        shown.paste(Image.open(io.BytesIO(region.png)), (region.x, region.y))
    return shown


def same(a: Image.Image, b: Image.Image) -> bool:
    return a.size == b.size and ImageChops.difference(a, b).getbbox() is None


def sends_the_reference(
    screen: DesktopScreen, drawn: Reference, boxes: list[Box], *, whole: bool = True
) -> None:
    """Each box's picture is the reference's pixels there, and so is the whole desktop."""
    for box in boxes:
        region = screen.region(box)
        x1, y1 = min(box[2], drawn.width), min(box[3], drawn.height)
        clipped = (region.x, region.y, max(x1, region.x + 1), max(y1, region.y + 1))
        assert (region.x, region.y) == (max(box[0], 0), max(box[1], 0))
        assert same(Image.open(io.BytesIO(region.png)), drawn.image.crop(clipped)), box
    assert (screen.width, screen.height) == (drawn.width, drawn.height)
    if not whole:
        return
    whole_drawn = composed(screen.width, screen.height, screen.whole())
    assert same(whole_drawn, drawn.sent_whole())
    assert same(screen.picture(), drawn.image)


Step = Callable[[DesktopScreen | Reference], Box | list[Box] | None]


def pressing(keysym: int) -> Step:
    return lambda s: s.key(keysym, True)


def typing(text: str) -> list[Step]:
    keys = {"\n": 0xFF0D, "\b": 0xFF08}
    return [pressing(keys.get(c, ord(c))) for c in text]


def resizing(width: int, height: int) -> list[Step]:
    # The clock at a fixed time at once: a resize draws the time it is, which may differ.
    return [lambda s: (s.resize(width, height), s.tick(NOW))[0]]


STATES: dict[str, list[Step]] = {
    "fresh": [],
    "keys": typing("hello\nworld\b\bld, again\n" + "a long line of text " * 4),
    "clipboard": [
        lambda s: s.show_clipboard("copied  text\nand more " * 4),
        lambda s: s.paste("pasted"),
        lambda s: s.show_clipboard(""),
    ],
    "mouse": [
        lambda s: s.mouse(300, 200, 0),
        lambda s: s.mouse(512, 500, 1),
        lambda s: s.mouse(520, 505, 0),
        lambda s: s.mouse(5, 5, 1),
        lambda s: s.mouse(6, 6, 0),
        *typing("over the click"),
    ],
    "resize": [*typing("before"), *resizing(800, 600), *typing(" after"), *resizing(1280, 720)],
    "resize with clicks": [lambda s: s.mouse(420, 300, 1), *resizing(640, 480), *typing("x")],
    "text spilling out": [*typing("W" * 62), *typing("\b" * 62), lambda s: s.tick(NOW + 1)],
    "back to fresh": [*typing("ab\b\b"), lambda s: s.mouse(9, 9, 0), lambda s: s.mouse(0, 0, 0)],
}
SCREENS = {
    "ada": (1024, 768, "storm-0001", "ada"),
    "long names": (1024, 768, "storm-" + "x" * 150, "a user with a very long name " * 4),
    "small": (320, 240, "storm-0003", ""),
    # Names on several lines run over the window's lines: drawn as a whole screen.
    "names on lines": (800, 600, "storm\n0004\nrack\nb", "ada\nlovelace\nbyron\nking"),
}


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("size", SCREENS)
def test_every_picture_sent_is_the_screen_drawn_from_scratch(size: str, state: str) -> None:
    width, height, name, user = SCREENS[size]
    screen = DesktopScreen(width, height, name, user, "vnc")
    drawn = Reference(width, height, name, user, "vnc")
    sends_the_reference(screen, drawn, [screen.tick(NOW), drawn.tick(NOW)])
    for step in STATES[state]:
        was_state = screen._image is None
        changed, expected = step(screen), step(drawn)
        assert changed == expected
        boxes = changed if isinstance(changed, list) else [] if changed is None else [changed]
        # What the daemon sends for the change; a whole desktop for a user who joins when the
        # screen stops being only its state (and at the end).
        sends_the_reference(screen, drawn, boxes, whole=was_state and screen._image is not None)
    others = [screen.clock_box, screen.text_box, screen.pointer_box, (0, 0, 2000, 2000)]
    sends_the_reference(screen, drawn, [*others, (250, 100, 700, 300), (-5, -5, 40, 40)])


def test_a_resumed_screen_is_the_screen_it_was() -> None:
    """A dead connection's screen shown again, at another size (as the daemon resumes it)."""
    for clicks in ([], [(300, 250)]):
        screen = DesktopScreen(1024, 768, "storm-0001", "ada", "rdp")
        drawn = Reference(1024, 768, "storm-0001", "ada", "rdp")
        for target in (screen, drawn):
            for step in typing("work in progress"):
                step(target)
            target.show_clipboard("kept")
            for x, y in clicks:
                target.mouse(x, y, 1)
            target.resize(1280, 800)
            target.tick(NOW)
        sends_the_reference(screen, drawn, [screen.clock_box])


def test_a_fresh_screen_holds_no_whole_picture_until_it_needs_one() -> None:
    screen = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    screen.whole()
    screen.region(screen.tick(NOW))
    screen.region(screen.key(ord("a"), True) or (0, 0, 1, 1))
    assert screen._image is None
    assert screen.pdf().startswith(b"%PDF")
    assert screen._image is None
    screen.mouse(10, 10, 1)
    assert screen._image is not None  # marks of clicks stay: drawn on a whole screen


def test_pictures_every_fresh_screen_shows_are_encoded_once_and_kept_bounded() -> None:
    screen_module._FRESH.clear()
    first = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc").whole()
    assert len(screen_module._FRESH) == 3  # the clipboard, typed text and pointer lines
    second = DesktopScreen(1024, 768, "storm-0002", "grace", "rdp").whole()
    assert first[-3:] == second[-3:]
    assert first[1:3] != second[1:3]  # the name and the signed-in line are each one's own
    for width in range(400, 1400, 50):
        DesktopScreen(width, 600, "storm-0003", "ada", "vnc").whole()
    assert len(screen_module._FRESH) <= screen_module.FRESH_KEPT
    assert len(screen_module._LAYOUTS) <= screen_module.LAYOUTS_KEPT
    assert len(screen_module._INKS) <= screen_module.INKS_KEPT


def test_a_resized_screen_gets_the_layout_of_its_size() -> None:
    shown = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    shown.resize(800, 600)
    assert shown.picture().size == (800, 600)
    assert shown.picture().getpixel((5, 5)) == BAR
    assert shown.picture().getpixel((5, 599)) == BACKGROUND
    assert (800, 600) in screen_module._LAYOUTS


def test_the_clock_s_picture_is_the_one_encoded_from_the_screen() -> None:
    first = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    second = DesktopScreen(1024, 768, "storm-0002", "grace", "rdp")
    drawn = [screen.region(screen.tick(NOW)) for screen in (first, second)]
    assert drawn[0] == drawn[1]
    screen_module._CLOCKS.clear()
    assert first.region(first.tick(NOW)) == drawn[0]
    assert first.region(first.tick(NOW + 1)).png != drawn[0].png


def test_the_whole_desktop_in_pieces_is_the_desktop() -> None:
    screen_module._LAYOUTS.clear()
    screen_module._LAYOUT_PICTURES.clear()
    for shown in (
        DesktopScreen(1024, 768, "storm-0001", "ada", "vnc"),
        DesktopScreen(1024, 768, "storm-0002", "a user with a very long name " * 4, "rdp"),
        DesktopScreen(640, 480, "storm-0003", "grace", "rdp", typed="typed", clipboard="copied"),
    ):
        shown.mouse(300, 200, 0)
        regions = shown.whole()
        assert len(regions) > 1
        drawn = composed(shown.width, shown.height, regions)
        assert same(drawn, shown.picture())


def test_a_desktop_with_clicks_on_it_is_one_picture() -> None:
    shown = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    shown.mouse(300, 200, 1)
    (whole,) = shown.whole()
    assert same(composed(shown.width, shown.height, [whole]), shown.picture())
