"""Pools for the console's browser tests: a simulated cluster, a pool entitled to the user.

:func:`entitled_pool` makes both through the API of a :class:`~tests.e2e.console_instance.
Instance`; :func:`always_night` a schedule that powers idle desktops off all week;
:func:`pool_desktops` lists a pool's desktops and :func:`until_states` waits for their
states; :func:`chromium` starts the browser and :func:`signed_in_page` opens a page signed in.
:func:`callers` are the administrator and the user as API callers, and
:func:`ready_persistent_pool` a pool of theirs with a ready desktop.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from tests.e2e.console_instance import ADMIN, CHROMIUM, USER, Instance, api_call, sign_in
from tests.e2e.deployment_api import Api

from deskpool.testing.processes import until

#: The days of a phase that holds every day.
EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
#: A schedule's phase in force all week that keeps nothing ready and powers idle desktops off.
ALWAYS_NIGHT = {
    "name": "night",
    "days": EVERY_DAY,
    "start": "00:00",
    "min_ready": 0,
    "spare": 0,
    "idle": "power_off",
}


async def always_night(instance: Instance) -> dict[str, Any]:
    """A schedule whose one phase is :data:`ALWAYS_NIGHT`, in UTC."""
    schedule: dict[str, Any] = await api_call(
        instance,
        "POST",
        "/schedules",
        json={"name": "always night", "time_zone": "UTC", "phases": [ALWAYS_NIGHT]},
    )
    return schedule


def simulated_cluster(name: str, **options: Any) -> dict[str, Any]:
    """The body of a simulated cluster ``name`` with quick VMs (``options`` override)."""
    return {
        "name": name,
        "driver": "simulator",
        "endpoint": f"simulator://{name}",
        "options": {
            "clone_seconds": 0.2,
            "boot_seconds": 0.05,
            "agent_seconds": 0.05,
            "shutdown_seconds": 0.05,
            "templates": [{"name": "ubuntu-22.04"}],
            **options,
        },
    }


async def entitled_pool(
    instance: Instance,
    cluster: str,
    name: str,
    simulator: dict[str, Any] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """A non-persistent Linux pool ``name`` on a new simulated cluster, entitled to the user.

    :param simulator: the cluster's options beyond :func:`simulated_cluster`'s.
    """
    body = simulated_cluster(cluster, **(simulator or {}))
    made = await api_call(instance, "POST", "/clusters", json=body)
    pool: dict[str, Any] = await api_call(
        instance,
        "POST",
        "/pools",
        json={
            "name": name,
            "cluster_id": made["id"],
            "template": "ubuntu-22.04",
            "kind": "non_persistent",
            "os_type": "linux",
            "naming_pattern": f"{name[:4]}-{{n:02}}",
            **settings,
        },
    )
    me = await api_call(instance, "GET", "/me", USER)
    await api_call(
        instance,
        "POST",
        f"/pools/{pool['id']}/entitlements",
        json={"subject_type": "user", "subject_id": me["id"]},
    )
    return pool


async def pool_desktops(instance: Instance, pool_id: str) -> list[dict[str, Any]]:
    """The pool's desktops as the API lists them (name order)."""
    listed = await api_call(instance, "GET", f"/desktops?pool_id={pool_id}&limit=100")
    return list(listed["items"])


async def until_states(instance: Instance, pool_id: str, *states: str) -> None:
    """Wait (up to 90 s) until the pool's desktops are in ``states``, in name order."""

    async def reached() -> bool:
        return [d["state"] for d in await pool_desktops(instance, pool_id)] == list(states)

    await until(reached, f"the pool's desktops are {', '.join(states)}", seconds=90, every=0.5)


async def chromium(playwright: Any) -> Any:
    """Chromium, headless."""
    return await playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
    )


async def signed_in_page(
    instance: Instance, browser: Any, who: tuple[str, str], path: str = ""
) -> Any:
    """A page of a new browser context (1280 by 900), ``who`` signed in, opened at ``path``."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await sign_in(instance, page, who)
    if path:
        await page.goto(f"{instance.console}{path}")
    return page


def callers(http: aiohttp.ClientSession, instance: Instance) -> tuple[Api, Api]:
    """The administrator (:data:`ADMIN`) and the user (:data:`USER`) calling the API."""
    admin_token = instance.idp.issue_token(
        ADMIN[0], email="admin@deskpool.test", email_verified=True, name=ADMIN[1]
    )
    user_token = instance.idp.issue_token(USER[0], email="user@deskpool.test", name=USER[1])
    return Api(http, instance.api, admin_token), Api(http, instance.api, user_token)


async def ready_persistent_pool(admin: Api, user: Api, name: str, max_size: int) -> dict[str, Any]:
    """A persistent Linux pool ``name-pool`` entitled to ``user``, once a desktop is ready.

    On a new simulated cluster ``name``; one desktop kept spare, its desktops named after the
    first three letters of ``name``.
    """
    cluster = await admin.simulated_cluster(name)
    pool: dict[str, Any] = await admin(
        "POST",
        "/pools",
        json={
            "name": f"{name}-pool",
            "cluster_id": cluster["id"],
            "template": "ubuntu-22.04",
            "kind": "persistent",
            "os_type": "linux",
            "min_size": 1,
            "spare": 1,
            "max_size": max_size,
            "naming_pattern": f"{name[:3]}-{{n:02}}",
        },
    )
    me = await user("GET", "/me")
    await admin(
        "POST",
        f"/pools/{pool['id']}/entitlements",
        json={"subject_type": "user", "subject_id": me["id"]},
    )

    async def ready() -> bool:
        shown = await admin("GET", f"/pools/{pool['id']}")
        return bool(shown["counts"]["by_state"].get("ready", 0) >= 1)

    await until(ready, "the pool has a ready desktop", seconds=90, every=0.5)
    return pool
