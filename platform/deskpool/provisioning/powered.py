"""A desktop whose VM a power job turned off: its state follows the VM, its user is logged off.

``desktop.power_off`` shuts the VM down; what the desktop becomes then is the system's own
rules, the same as for a user's log-off and a schedule's power-off (issue 37: an
administrator's power-off left a desktop "in use" with its VM off, and its user's Open failing
for minutes):

- A desktop a user is logged on to (``in_use``) lost his session with the VM: he is logged off
  (:func:`deskpool.notices.service.force_logoff`), exactly as when he logs off himself: a
  non-persistent desktop is rebuilt (``refreshing``), a persistent one stays his (``ready``).
  His open tunnels, if any, are closed, and their end logs him off.
- A ``ready`` desktop that may rest powered off (free and clean, or a persistent desktop whose
  owner has no session) becomes ``powered_off``, as a schedule's power-off makes it: its owner's
  open starts it again (start on connect), and the pool's schedule, or the pool without one,
  decides when it is powered on.

Everything is written in one transaction fenced by the job's lease; the live events and the
gateways' disconnects are sent after it commits.
"""

from __future__ import annotations

import logging

from deskpool.desktops.states import IllegalTransition, PowerOff
from deskpool.desktops.store import apply_event_in_state, get_desktop
from deskpool.live.publishers import publish_desktop
from deskpool.notices.service import Delivery, deliver, force_logoff
from deskpool.pools.model import DesktopState
from deskpool.provisioning.recorder import DesktopRecorder, utc_now

log = logging.getLogger(__name__)

S = DesktopState

#: The reason recorded with the log-off.
POWERED_OFF_REASON = "its VM was powered off (desktop.power_off)"


async def follow_power_off(work: DesktopRecorder) -> None:
    """Record what the desktop of ``work`` is now that its VM is off (rules: module docstring).

    :raises LeaseLost: the job was reclaimed; nothing is written.
    """
    runtime = work.context.runtime
    delivery = Delivery()
    async with work.db.acquire() as connection, connection.transaction():
        await work.context.hold_lease(connection)
        desktop = await get_desktop(connection, work.desktop.id, for_update=True)
        if desktop is None:
            return
        before = desktop
        if desktop.state is S.IN_USE:
            delivery = await force_logoff(connection, desktop.id, POWERED_OFF_REASON)
            desktop = await get_desktop(connection, desktop.id) or desktop
        if desktop.state is S.READY and not desktop.in_session:
            now = utc_now()
            try:
                after = await apply_event_in_state(
                    connection, desktop.id, PowerOff(), now, states={S.READY}, pool=work.pool
                )
            except IllegalTransition as refused:  # used since its refresh: reconciliation's
                log.info("desktop %s stays ready: %s", desktop.name, refused.detail)
                after = None
            if after is not None:
                await work.audit(
                    connection, "desktop.powered_off", now, "success", user_id=after.assigned_user
                )
                desktop = after
    await deliver(runtime, delivery)
    if desktop != before:
        work.desktop = desktop
        await publish_desktop(runtime, desktop)
        log.info("desktop %s is %s now that its VM is off", desktop.name, desktop.state)
