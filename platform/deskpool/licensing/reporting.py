"""Activation reports: the reporter contract, the payload, and when the next report is due.

A *licensing reporter* is a plugin (entry-point group ``deskpool.license_reporters``, chosen
by ``LICENSE_REPORTER``; the first-party one is ``http``). It registers a factory through
``deskpool_register_license_reporters``: ``registry.add("http", factory)``, where
``factory(config)`` returns a :class:`LicenseReporter`. The worker calls it; the platform
decides *whether* a report is sent (never by the free edition) and *when*.

The payload (:func:`activation_report`) is the whole of what is sent, documented in
``docs/operators/licensing.md``: no personal data, no host names, no addresses::

    {"schema": "deskpool-activation/1", "instance_id": "<uuid made at installation>",
     "version": "0.1.0", "edition": "standard", "license_id": "LIC-0001",
     "license_status": "valid", "build": "verified",
     "usage": {"desktops": 12, "pools": 2, "sessions": 3}, "sent_at": "<RFC 3339>"}

Reports go out every ``LICENSE_REPORT_INTERVAL`` with a jitter of +/-:data:`REPORT_JITTER` of
it (so a fleet started together does not report in step); the first is due within
:data:`REPORT_JITTER` of an interval after a licensed edition is first seen. A failed report is
retried after :func:`retry_delay`, doubling from a twentieth of the interval (at most a minute)
up to the interval.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from deskpool.errors import PluginNotFound
from deskpool.licensing.model import BuildIntegrity, Judgement, Usage, format_instant

if TYPE_CHECKING:
    from deskpool.config import Config
    from deskpool.plugins import PluginHost

REPORT_SCHEMA = "deskpool-activation/1"
#: The fraction of ``LICENSE_REPORT_INTERVAL`` a report may come early or late.
REPORT_JITTER = 0.1
#: The longest first retry delay after a failed report.
MAX_FIRST_RETRY = timedelta(minutes=1)


class ReportFailed(Exception):
    """A report was not accepted; the message says why (no secrets, no payload)."""


@runtime_checkable
class LicenseReporter(Protocol):
    """Sends activation reports somewhere."""

    @property
    def enabled(self) -> bool:
        """Whether it sends at all (the ``http`` reporter: ``LICENSE_REPORT_URL`` is set)."""

    async def send(self, report: Mapping[str, Any]) -> None:
        """Send one report.

        :raises ReportFailed: it was not accepted (the worker retries with backoff).
        """


#: What ``deskpool_register_license_reporters`` registers: builds the reporter from the
#: configuration.
LicenseReporterFactory: TypeAlias = Callable[["Config"], LicenseReporter]


def build_reporter(plugins: PluginHost, config: Config) -> LicenseReporter:
    """The reporter ``LICENSE_REPORTER`` chooses."""
    name = config["LICENSE_REPORTER"]
    registry = plugins.license_reporters()
    if name not in registry:
        raise PluginNotFound(f"no licensing reporter named {name!r} is registered")
    reporter = registry.get(name)(config)
    if not isinstance(reporter, LicenseReporter):
        raise TypeError(f"licensing reporter {name!r} does not implement LicenseReporter")
    return reporter


def activation_report(
    *,
    instance_id: str,
    version: str,
    judgement: Judgement,
    build: BuildIntegrity,
    usage: Usage,
    sent_at: datetime,
) -> dict[str, Any]:
    """The payload of one report: everything that is sent, nothing else."""
    return {
        "schema": REPORT_SCHEMA,
        "instance_id": instance_id,
        "version": version,
        "edition": judgement.edition.value,
        "license_id": judgement.license.id if judgement.license else None,
        "license_status": judgement.status.value,
        "build": build.value,
        "usage": usage.as_dict(),
        "sent_at": format_instant(sent_at),
    }


def first_due(now: datetime, interval: timedelta, rng: random.Random) -> datetime:
    """When the first report is due: within the jitter of an interval from now."""
    return now + interval * rng.uniform(0, REPORT_JITTER)


def next_due(sent_at: datetime, interval: timedelta, rng: random.Random) -> datetime:
    """When the report after one sent at ``sent_at`` is due: an interval, +/- the jitter."""
    return sent_at + interval * rng.uniform(1 - REPORT_JITTER, 1 + REPORT_JITTER)


def retry_delay(failures: int, interval: timedelta) -> timedelta:
    """The wait after ``failures`` consecutive failures (from 1)."""
    first = min(interval / 20, MAX_FIRST_RETRY)
    return min(first * (1 << min(30, max(0, failures - 1))), interval)


def check_interval(config: Config) -> float:
    """How often the worker looks whether a report is due (seconds)."""
    return max(0.05, min(60.0, config.duration("LICENSE_REPORT_INTERVAL") / 20))
