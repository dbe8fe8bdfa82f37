"""A tunnel's watermark under its pool's client policy: made when it opens, kept current.

:class:`~deskpool_gateway.watermark.Watermark` draws; this fills the policy's template (the
user's name and email, the session id, the browser's address, the time to the minute in UTC:
:func:`deskpool.client_policy.model.render_watermark`) and follows the policy as the supervisor
reads it every second: turned on, it appears; turned off, it goes; a new text, opacity, angle
or spacing, or the next minute, redraws it. The instructions go to the browser through
:meth:`deskpool_gateway.relay.Tunnel.draw`, so the recording has them too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from deskpool.client_policy.model import ClientPolicy, render_watermark
from deskpool.client_policy.model import Watermark as WatermarkPolicy
from deskpool_gateway.watermark import Watermark, WatermarkStyle

if TYPE_CHECKING:
    from deskpool.sessions.tunnel import TunnelGrant
    from deskpool_gateway.relay import Tunnel

__all__ = ["follow_watermark", "open_watermark", "watermark_values"]

#: How the time reads in the watermark's text.
TIME_FORMAT = "%Y-%m-%d %H:%M UTC"


def watermark_values(grant: TunnelGrant, client_address: str) -> dict[str, str]:
    """What a template may name, but the time."""
    return {
        "name": grant.user_display_name,
        "email": grant.user_email,
        "session_id": str(grant.session_id),
        "client_address": client_address,
    }


def _text(mark: WatermarkPolicy, values: dict[str, str], now: datetime) -> str:
    stamp = now.astimezone(UTC).strftime(TIME_FORMAT)
    return render_watermark(mark.text, {**values, "time": stamp})


def _style(mark: WatermarkPolicy) -> WatermarkStyle:
    return WatermarkStyle(opacity=mark.opacity, angle=float(mark.angle), spacing=mark.spacing)


def open_watermark(policy: ClientPolicy, values: dict[str, str], now: datetime) -> Watermark:
    """The watermark of a tunnel opening under ``policy`` (shown when the policy says so)."""
    mark = policy.watermark
    return Watermark(_text(mark, values, now), _style(mark), enabled=mark.enabled)


async def follow_watermark(tunnel: Tunnel, policy: ClientPolicy, now: datetime) -> None:
    """Bring ``tunnel``'s watermark to ``policy`` at ``now``: draw what changed."""
    watermark = tunnel.watermark
    if watermark is None:
        return
    mark = policy.watermark
    if not mark.enabled:
        await tunnel.draw(watermark.remove())
        return
    update = (
        watermark.set_style(_style(mark))
        + watermark.set_text(_text(mark, tunnel.watermark_values, now))
        + watermark.show()
    )
    await tunnel.draw(update)
