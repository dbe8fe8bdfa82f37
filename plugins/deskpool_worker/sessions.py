"""The sessions work the worker runs: the periodic session check.

The platform holds the logic (:mod:`deskpool.sessions.maintenance`); this module registers it
and declares its interval:

``SESSION_CHECK_INTERVAL``
    How often the worker ends the sessions of lost gateways, asks gateways to close sessions
    past their pool's limits, and logs off desktops disconnected past their pool's delay.
"""

from __future__ import annotations

import logging

from deskpool.config import SettingRegistry, parse_duration
from deskpool.jobs.periodic import PeriodicContext, PeriodicTask
from deskpool.provisioning.starts import end_stale_starts
from deskpool.registry import Registry
from deskpool.sessions.maintenance import SESSION_CHECK_SETTING, SESSION_CHECK_TASK, check_sessions

log = logging.getLogger(__name__)


def declare_settings(registry: SettingRegistry) -> None:
    """Declare ``SESSION_CHECK_INTERVAL``."""
    registry.section("Worker and reconciliation", owner="worker").add(
        SESSION_CHECK_SETTING,
        parse_duration,
        "10s",
        "How often the worker ends the sessions of gateways whose lease expired, closes "
        "sessions past their pool's idle timeout or maximum length, and logs off desktops "
        "disconnected past their pool's logoff delay.",
        type_name="duration",
    )


async def session_check(context: PeriodicContext) -> None:
    """One run of :func:`deskpool.sessions.maintenance.check_sessions`."""
    done = await check_sessions(context.runtime, sweep_starts=end_stale_starts)
    if done.lost_sessions or done.disconnects_requested or done.logged_off:
        log.info(
            "session check: %d session(s) of lost gateways ended, %d disconnect(s) requested, "
            "%d desktop(s) logged off",
            done.lost_sessions,
            done.disconnects_requested,
            done.logged_off,
        )


def register_periodic_tasks(registry: Registry[PeriodicTask]) -> None:
    """The session check."""
    registry.add(
        SESSION_CHECK_TASK,
        PeriodicTask(
            session_check,
            every=SESSION_CHECK_SETTING,
            description="End sessions of lost gateways, enforce session limits and logoffs.",
        ),
    )
