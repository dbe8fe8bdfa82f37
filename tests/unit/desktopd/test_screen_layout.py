"""The simulated desktop's screen: what a connection draws is the same, however it is drawn.

The static layout (background, top bar, window, labels) is drawn once per screen size and
copied for every new connection (the storm draws a thousand first frames); the picture must
stay the one drawn from scratch.
"""

from __future__ import annotations

import io

from PIL import Image, ImageChops

from deskpool.desktopd import screen as screen_module
from deskpool.desktopd.screen import BACKGROUND, BAR, DesktopScreen, Region


def test_a_screen_drawn_on_the_cached_layout_is_the_one_drawn_from_scratch() -> None:
    screen_module._LAYOUTS.clear()
    fresh = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    assert (1024, 768) in screen_module._LAYOUTS
    other = DesktopScreen(1024, 768, "storm-0002", "grace", "rdp")
    cached = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    # The clock may have ticked between the two.
    box = fresh.clock_box
    cached._image.paste(fresh._image.crop(box), box[:2])
    assert ImageChops.difference(fresh._image, cached._image).getbbox() is None
    assert ImageChops.difference(fresh._image, other._image).getbbox() is not None
    assert cached._image is not screen_module._LAYOUTS[1024, 768]


def test_a_resized_screen_gets_the_layout_of_its_size() -> None:
    shown = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    shown.resize(800, 600)
    assert shown._image.size == (800, 600)
    assert shown._image.getpixel((5, 5)) == BAR
    assert shown._image.getpixel((5, 599)) == BACKGROUND
    assert (800, 600) in screen_module._LAYOUTS


def test_the_clock_s_picture_is_the_one_encoded_from_the_screen() -> None:
    first = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    second = DesktopScreen(1024, 768, "storm-0002", "grace", "rdp")
    now = 1_800_000_000.0
    drawn = [screen.region(screen.tick(now)) for screen in (first, second)]
    assert drawn[0] == drawn[1]
    screen_module._CLOCKS.clear()
    assert first.region(first.tick(now)) == drawn[0]
    assert first.region(first.tick(now + 1)).png != drawn[0].png


def composed(width: int, height: int, regions: list[Region]) -> Image.Image:
    """What a client shows after drawing ``regions`` in order on an empty display."""
    shown = Image.new("RGB", (width, height))
    for region in regions:
        shown.paste(Image.open(io.BytesIO(region.png)), (region.x, region.y))
    return shown


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
        assert ImageChops.difference(drawn, shown._image).getbbox() is None


def test_a_desktop_with_clicks_on_it_is_one_picture() -> None:
    shown = DesktopScreen(1024, 768, "storm-0001", "ada", "vnc")
    shown.mouse(300, 200, 1)
    (whole,) = shown.whole()
    drawn = composed(shown.width, shown.height, [whole])
    assert ImageChops.difference(drawn, shown._image).getbbox() is None
