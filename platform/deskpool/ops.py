"""The ops listener at ``METRICS_ADDR``: ``/healthz``, ``/readyz`` and ``/metrics``.

One listener per process, whatever components run in it. All three routes are unauthenticated:
operators bind the listener to an internal address (see the operator guide). It bounds its
connections like every HTTP listener (:mod:`deskpool.listener`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from deskpool.listener import ConnectionLimits, bound_address, start_listener
from deskpool.per_registry import once_per_registry
from deskpool.runtime import Runtime

if TYPE_CHECKING:
    from deskpool.config import HostPort
    from deskpool.runtime import ReadinessCheck

log = logging.getLogger(__name__)

RUNTIME_KEY = web.AppKey("runtime", Runtime)

#: How long one readiness check may take before it counts as failed.
READINESS_CHECK_TIMEOUT = 3.0


async def healthz(request: web.Request) -> web.Response:
    """The process is alive and its event loop answers."""
    return web.json_response({"status": "ok"})


@once_per_registry
def readiness_gauge(registry: CollectorRegistry) -> Gauge:
    """``deskpool_readiness_check_ok`` on ``registry``."""
    return Gauge(
        "deskpool_readiness_check_ok",
        "1 when the readiness check (database, kvstore, schema, a component's) passed at "
        "the last scrape or /readyz, 0 when it failed: the shipped 'dependency down' alert.",
        ["check"],
        registry=registry,
    )


async def run_readiness_checks(runtime: Runtime) -> dict[str, dict[str, object]]:
    """Every readiness check's result by name, each bounded; recorded in the gauge too."""

    async def run(check: ReadinessCheck) -> tuple[str, dict[str, object]]:
        started = time.perf_counter()
        try:
            details = await asyncio.wait_for(check.probe(), READINESS_CHECK_TIMEOUT)
        except Exception as error:  # a failing check is reported, never raised
            detail = str(error) or type(error).__name__
            return check.name, {"ok": False, "error": detail}
        seconds = round(time.perf_counter() - started, 4)
        return check.name, {"ok": True, "seconds": seconds, **(details or {})}

    results = dict(await asyncio.gather(*(run(check) for check in runtime.readiness_checks())))
    gauge = readiness_gauge(runtime.metrics)
    for name, result in results.items():
        gauge.labels(name).set(1 if result["ok"] else 0)
    return results


async def readyz(request: web.Request) -> web.Response:
    """Every readiness check passes: 200; otherwise 503 naming each failing check."""
    results = await run_readiness_checks(request.app[RUNTIME_KEY])
    failing = sorted(name for name, result in results.items() if not result["ok"])
    body = {
        "status": "ready" if not failing else "not_ready",
        "failing": failing,
        "checks": results,
    }
    return web.json_response(body, status=200 if not failing else 503)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of the process's registry.

    The readiness checks run first, so that ``deskpool_readiness_check_ok`` is as of this
    scrape: a dependency that went away is seen by the next scrape, not by the next probe.
    """
    runtime = request.app[RUNTIME_KEY]
    await run_readiness_checks(runtime)
    payload = generate_latest(runtime.metrics)
    response = web.Response(body=payload)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


def create_ops_app(runtime: Runtime) -> web.Application:
    """The ops application (used by :class:`OpsListener` and by tests)."""
    app = web.Application()
    app[RUNTIME_KEY] = runtime
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


class OpsListener:
    """Serves the ops application on ``METRICS_ADDR`` (disabled when it is set empty)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.address: HostPort | None = runtime.config["METRICS_ADDR"]
        self._runner: web.AppRunner | None = None

    @property
    def runner(self) -> web.AppRunner | None:
        """The runner serving the ops application while started."""
        return self._runner

    @property
    def bound(self) -> HostPort | None:
        """The address bound while started (the port picked for 0); ``None`` otherwise."""
        return bound_address(self._runner) if self._runner is not None else None

    async def start(self) -> None:
        """Bind the listener, unless disabled."""
        if self.address is None:
            log.info("ops listener disabled (METRICS_ADDR is empty)")
            return
        self._runner = await start_listener(
            create_ops_app(self.runtime),
            self.address,
            name="ops",
            limits=ConnectionLimits.from_config(self.runtime.config),
            shutdown_timeout=2,
        )
        log.info("ops listener on http://%s (/healthz /readyz /metrics)", self.bound)

    async def stop(self) -> None:
        """Close the listener."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
