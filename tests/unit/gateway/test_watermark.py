"""The watermark the gateway draws: Guacamole instructions that tile a text over the desktop.

A small interpreter of the instructions involved (``size``, ``move``, ``shade``, ``img`` +
``blob`` + ``end``, ``rect``, ``lfill``, ``dispose``) composes the layers as
guacamole-common-js does (a child layer over layer 0 at its z-order and opacity), so the tests
read pixels, not instruction strings.
"""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from deskpool.guacamole import Instruction, InstructionParser, encode
from deskpool_gateway.watermark import (
    WATERMARK_BUFFER,
    WATERMARK_LAYER,
    Watermark,
    WatermarkStyle,
    render_tile,
)

STYLE = WatermarkStyle(opacity=0.5, angle=30.0, spacing=40)


class Display:
    """Layers and buffers as the browser holds them."""

    def __init__(self) -> None:
        self.layers: dict[str, Image.Image] = {"0": Image.new("RGBA", (1, 1), (0, 0, 0, 255))}
        self.shade: dict[str, int] = {}
        self.z: dict[str, int] = {}
        self.parent: dict[str, str] = {}
        self.paths: dict[str, tuple[int, int, int, int]] = {}
        self.streams: dict[str, tuple[str, int, int, int, bytearray]] = {}

    def run(self, text: str) -> None:
        for instruction in InstructionParser().feed_instructions(text):
            self.apply(instruction)

    def apply(self, instruction: Instruction) -> None:
        opcode, args = instruction
        if opcode == "size":
            old = self.layers.get(args[0], Image.new("RGBA", (1, 1), (0, 0, 0, 0)))
            new = Image.new("RGBA", (int(args[1]), int(args[2])), (0, 0, 0, 0))
            new.paste(old, (0, 0))
            self.layers[args[0]] = new
        elif opcode == "move":
            self.parent[args[0]] = args[1]
            self.z[args[0]] = int(args[4])
        elif opcode == "shade":
            self.shade[args[0]] = int(args[1])
        elif opcode == "img":
            self.streams[args[0]] = (args[2], int(args[1]), int(args[4]), int(args[5]), bytearray())
        elif opcode == "blob" and args[0] in self.streams:
            self.streams[args[0]][4].extend(base64.b64decode(args[1]))
        elif opcode == "end" and args[0] in self.streams:
            layer, mask, x, y, data = self.streams.pop(args[0])
            picture = Image.open(io.BytesIO(bytes(data))).convert("RGBA")
            target = self.layers[layer]
            if mask == 12:  # SRC: replace
                target.paste(picture, (x, y))
            else:
                target.alpha_composite(picture, (x, y))
        elif opcode == "rect":
            x, y, w, h = (int(a) for a in args[1:5])
            self.paths[args[0]] = (x, y, w, h)
        elif opcode == "lfill":
            mask, layer, source = int(args[0]), args[1], args[2]
            x, y, w, h = self.paths.pop(layer)
            tile = self.layers[source]
            filled = Image.new("RGBA", (w, h), (0, 0, 0, 0))
            for ty in range(0, h, tile.height):
                for tx in range(0, w, tile.width):
                    filled.paste(tile, (tx, ty))
            assert mask == 12  # the watermark replaces its layer's pixels
            self.layers[layer].paste(filled, (x, y))
        elif opcode == "dispose":
            self.layers.pop(args[0], None)

    def composed(self) -> Image.Image:
        """Layer 0 with its visible children over it, by z-order and opacity."""
        screen = self.layers["0"].copy()
        children = [name for name in self.layers if name.isdigit() and name != "0"]
        for name in sorted(children, key=lambda n: self.z.get(n, 0)):
            layer = self.layers[name].copy()
            shade = self.shade.get(name, 255)
            alpha = layer.getchannel("A").point(lambda a, s=shade: a * s // 255)
            layer.putalpha(alpha)
            screen.alpha_composite(layer.crop((0, 0, *screen.size)))
        return screen.convert("RGB")


def desktop(width: int, height: int) -> str:
    """What guacd sends for a plain desktop: its size and a black picture."""
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (0, 0, 0)).save(buffer, "PNG")
    data = base64.b64encode(buffer.getvalue()).decode()
    return (
        encode("size", 0, width, height)
        + encode("img", 1, 14, 0, "image/png", 0, 0)
        + encode("blob", 1, data)
        + encode("end", 1)
        + encode("sync", 1, 1)
    )


def lit(picture: Image.Image) -> int:
    """How many pixels are not black."""
    histogram = picture.convert("L").histogram()
    return sum(histogram[1:])


def test_the_watermark_is_tiled_over_the_whole_desktop_on_a_layer_of_its_own() -> None:
    display = Display()
    watermark = Watermark("ada@example.com 2026-11-29 07:00", STYLE)
    text = desktop(800, 600)
    display.run(watermark.apply(text))
    screen = display.composed()
    assert screen.size == (800, 600)
    assert display.z[str(WATERMARK_LAYER)] > 0
    assert display.parent[str(WATERMARK_LAYER)] == "0"
    assert display.shade[str(WATERMARK_LAYER)] == 128
    # Text in every quarter of the screen: tiled, not drawn once.
    for box in [(0, 0, 400, 300), (400, 0, 800, 300), (0, 300, 400, 600), (400, 300, 800, 600)]:
        assert lit(screen.crop(box)) > 200, box
    # Half opacity: the brightest pixel is about half white, the desktop still shows.
    assert 100 <= max(screen.convert("L").getdata()) <= 160
    assert lit(screen) < 800 * 600 // 2


def test_it_is_drawn_once_the_desktop_has_a_size_and_follows_each_resize() -> None:
    watermark = Watermark("ada", STYLE)
    quiet = encode("name", "demo") + encode("nop")
    assert watermark.apply(quiet) == quiet
    display = Display()
    first = desktop(640, 480)
    display.run(watermark.apply(first))
    assert display.layers[str(WATERMARK_LAYER)].size == (640, 480)
    resize = desktop(1280, 720)
    display.run(watermark.apply(resize))
    assert display.layers[str(WATERMARK_LAYER)].size == (1280, 720)
    screen = display.composed()
    assert lit(screen.crop((900, 400, 1280, 720))) > 200
    unrelated = encode("size", 3, 10, 10) + encode("sync", 2, 1)
    assert watermark.apply(unrelated) == unrelated


def test_it_is_drawn_within_guacds_frame_before_its_sync() -> None:
    watermark = Watermark("ada", STYLE)
    text = desktop(320, 240)
    applied = watermark.apply(text)
    assert applied.endswith(encode("sync", 1, 1))  # guacd's sync still ends the frame
    assert applied.index("4.move,") < applied.index("4.sync,")
    assert applied.startswith(encode("size", 0, 320, 240))


def test_a_new_text_redraws_the_tile_and_an_unchanged_one_sends_nothing() -> None:
    display = Display()
    watermark = Watermark("ada 07:00", STYLE)
    first = desktop(400, 300)
    display.run(watermark.apply(first))
    before = display.composed()
    assert watermark.set_text("ada 07:00") == ""
    update = watermark.set_text("ada 07:01 with a much longer line of text")
    assert update
    display.run(update)
    after = display.composed()
    assert after.tobytes() != before.tobytes()
    assert display.layers[str(WATERMARK_BUFFER)].width > 200  # the longer text's tile
    assert lit(after) > 100


def test_text_set_before_the_desktop_has_a_size_waits_for_it() -> None:
    watermark = Watermark("ada", STYLE)
    assert watermark.set_text("grace") == ""
    display = Display()
    text = desktop(320, 240)
    display.run(watermark.apply(text))
    assert lit(display.composed()) > 100


def test_turned_off_and_on_mid_session_it_goes_and_comes_back_at_the_current_size() -> None:
    display = Display()
    watermark = Watermark("ada", STYLE)
    text = desktop(320, 240)
    display.run(watermark.apply(text))
    display.run(watermark.remove())
    assert str(WATERMARK_LAYER) not in display.layers
    assert lit(display.composed()) == 0
    assert watermark.remove() == ""
    resized = desktop(500, 400)
    display.run(resized)
    assert watermark.apply(resized) == resized  # off: only the size is followed
    display.run(watermark.show())
    assert display.layers[str(WATERMARK_LAYER)].size == (500, 400)
    assert lit(display.composed()) > 100
    assert watermark.show() == ""


def test_off_from_the_start_it_draws_only_once_shown() -> None:
    watermark = Watermark("ada", STYLE, enabled=False)
    assert watermark.show() == ""  # no size yet
    display = Display()
    text = desktop(320, 240)
    display.run(watermark.apply(text))
    assert lit(display.composed()) > 100
    restyled = watermark.set_style(WatermarkStyle(opacity=1.0, angle=0.0, spacing=40))
    display.run(restyled)
    assert display.shade[str(WATERMARK_LAYER)] == 255
    assert max(display.composed().convert("L").getdata()) > 200


@pytest.mark.parametrize("angle", [0.0, 45.0, -30.0, 90.0])
def test_the_tile_is_the_rotated_text_with_spacing_around_it(angle: float) -> None:
    style = WatermarkStyle(opacity=1.0, angle=angle, spacing=50)
    tile = render_tile("confidential", style)
    assert tile.mode == "RGBA"
    assert tile.width >= 50
    assert tile.height >= 50
    box = tile.getchannel("A").getbbox()
    assert box is not None
    assert box[0] >= 20  # spacing around the text on every side
    assert box[1] >= 20
    assert tile.width - box[2] >= 20
    assert tile.height - box[3] >= 20


def test_style_values_are_checked() -> None:
    with pytest.raises(ValueError, match="opacity"):
        WatermarkStyle(opacity=1.5, angle=0.0, spacing=10)
    with pytest.raises(ValueError, match="angle"):
        WatermarkStyle(opacity=0.5, angle=91.0, spacing=10)
    with pytest.raises(ValueError, match="spacing"):
        WatermarkStyle(opacity=0.5, angle=0.0, spacing=-1)
    assert WATERMARK_BUFFER < 0 < WATERMARK_LAYER
