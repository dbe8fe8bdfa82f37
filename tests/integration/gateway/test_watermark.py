"""The watermark the gateway draws over a tunnel's desktop, from its pool's client policy.

A raw Guacamole client over the real gateway's WebSocket, the desktop daemon simulator behind
it: a pool whose policy has the watermark on shows it from the first frame, on a layer of its
own above the desktop, with the template filled; turned on while the tunnel is open it appears
within 2 s, turned off it goes, without a reconnect.
"""

from __future__ import annotations

import base64
import io
import time
import uuid
from dataclasses import replace

from PIL import Image
from tests.support.gateway import GatewayHarness

from deskpool.client_policy.model import DEFAULT_CLIENT_POLICY, ClientPolicy, Watermark
from deskpool.guacamole import Instruction
from deskpool.sessions.tunnel import DesktopTarget
from deskpool_gateway.watermark import WATERMARK_BUFFER, WATERMARK_LAYER, WATERMARK_Z

RDP = DesktopTarget("rdp", "demo-01", 3389, {"username": "ada", "password": "s3cret"})
MARKED = replace(
    DEFAULT_CLIENT_POLICY,
    watermark=Watermark(enabled=True, text="{name} {session_id}", opacity=0.4, angle=-30),
)


def tile_of(instructions: list[Instruction]) -> Image.Image:
    """The PNG drawn into the watermark's buffer."""
    (img,) = [i for i in instructions if i.opcode == "img" and i.args[2] == str(WATERMARK_BUFFER)]
    stream = img.args[0]
    data = b"".join(
        base64.b64decode(i.args[1])
        for i in instructions
        if i.opcode == "blob" and i.args[0] == stream
    )
    return Image.open(io.BytesIO(data))


async def test_a_pool_with_the_watermark_on_shows_it_over_the_desktop_from_the_start(
    gateway: GatewayHarness,
) -> None:
    client = await gateway.open(gateway.broker.issue(target=RDP, client_policy=MARKED))
    seen = await client.until("sync")  # the first frame: the watermark is drawn within it
    assert [i.opcode for i in seen].index("lfill") < len(seen) - 1
    layer = str(WATERMARK_LAYER)
    assert Instruction("move", (layer, "0", "0", "0", str(WATERMARK_Z))) in seen
    assert Instruction("shade", (layer, str(round(0.4 * 255)))) in seen
    assert Instruction("lfill", ("12", layer, str(WATERMARK_BUFFER))) in seen
    size = next(i for i in seen if i.opcode == "size" and i.args[0] == layer)
    assert size.args[1:] == ("1024", "768")  # the desktop's size
    tile = tile_of(seen)
    assert tile.mode == "RGBA"
    # The text is drawn (the template filled with the user's name and the session id: wider
    # than the name alone would be).
    assert tile.getchannel("A").getbbox() is not None
    assert tile.width > 200
    await client.ws.close()


async def test_turned_on_while_open_it_appears_within_two_seconds_and_goes_when_turned_off(
    gateway: GatewayHarness,
) -> None:
    pool_id = uuid.uuid4()
    policy: ClientPolicy = DEFAULT_CLIENT_POLICY
    gateway.broker.policies[pool_id] = policy
    client, _ = await gateway.synced(target=RDP, client_policy=policy, pool_id=pool_id)
    gateway.broker.policies[pool_id] = MARKED
    changed = time.monotonic()
    seen = await client.until("lfill", within=3.0)
    assert time.monotonic() - changed < 2.0
    assert any(i.opcode == "move" and i.args[0] == str(WATERMARK_LAYER) for i in seen)
    gateway.broker.policies[pool_id] = policy
    gone = await client.until("dispose", within=3.0)
    assert gone[-1] == Instruction("dispose", (str(WATERMARK_LAYER),))
    assert not client.ws.closed  # no reconnect
    await client.ws.close()
