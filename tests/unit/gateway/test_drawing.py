"""What the gateway counts as the desktop's first frame, and as the daemon's orderly end."""

from __future__ import annotations

import pytest

from deskpool.guacamole import encode
from deskpool_gateway.drawing import FirstFrame, ends_with_disconnect

SYNC = encode("sync", 1_700_000_000_000, 1)


def test_a_lone_sync_is_not_a_first_frame() -> None:
    # guacd 1.6.0 on a refused RDP login: a sync 0.05 s after ready, nothing drawn.
    first = FirstFrame()
    assert not first.feed(SYNC)
    assert not first.feed(encode("nop") + SYNC)
    assert not first.feed(encode("size", 0, 1024, 768) + encode("name", "win-01") + SYNC)


@pytest.mark.parametrize(
    "drawing",
    [
        encode("img", 1, 14, 0, "image/png", 0, 0) + encode("blob", 1, "iVBO") + encode("end", 1),
        encode("png", 14, 0, 0, 0, "iVBO"),
        encode("jpeg", 14, 0, 0, 0, "/9j/"),
        encode("rect", 0, 0, 0, 64, 64) + encode("cfill", 14, 0, 0, 0, 0, 255),
        encode("copy", -1, 0, 0, 64, 64, 12, 0, 10, 10),
        encode("transfer", -2, 0, 0, 64, 64, 3, 1, 0, 0),
        encode("rect", 2, 0, 0, 8, 8) + encode("lfill", 14, 2, -1),
        encode("cstroke", 14, 0, 2, 0, 1, 255, 255, 255, 255),
    ],
)
def test_a_frame_that_draws_on_a_visible_layer_is_the_first_frame(drawing: str) -> None:
    first = FirstFrame()
    assert first.feed(drawing + SYNC)


def test_drawing_and_its_sync_may_arrive_apart() -> None:
    first = FirstFrame()
    assert not first.feed(SYNC)  # the lone sync first
    assert not first.feed(encode("img", 1, 14, 0, "image/png", 0, 0) + encode("blob", 1, "iVBO"))
    assert first.feed(encode("end", 1) + SYNC)


def test_drawing_off_screen_only_is_not_a_frame() -> None:
    first = FirstFrame()
    hidden = encode("img", 1, 14, -1, "image/png", 0, 0) + encode("end", 1)
    assert not first.feed(
        hidden + encode("rect", -2, 0, 0, 8, 8) + encode("cfill", 14, -2, 0, 0, 0, 255) + SYNC
    )
    assert not first.feed(encode("copy", 0, 0, 0, 8, 8, 12, -3, 0, 0) + SYNC)
    assert not first.feed(encode("cursor", 0, 0, -1, 0, 0, 16, 16) + SYNC)
    assert first.feed(encode("copy", -1, 0, 0, 8, 8, 12, 0, 0, 0) + SYNC)


def test_an_instruction_named_in_an_argument_is_not_drawing() -> None:
    first = FirstFrame()
    assert not first.feed(encode("name", "3.img,1.1,2.14,1.0;") + SYNC)
    assert not first.feed(encode("name", "4.sync,1.1;") + encode("nop"))


def test_the_daemons_disconnect_is_told_from_a_hang_up() -> None:
    assert ends_with_disconnect(SYNC + encode("disconnect"))
    assert ends_with_disconnect(encode("error", "Aborted.", 519) + encode("disconnect"))
    assert not ends_with_disconnect(SYNC)
    assert not ends_with_disconnect("")
    assert not ends_with_disconnect(encode("name", "x;10.disconnect"))
    assert not ends_with_disconnect(encode("disconnect") + SYNC)
