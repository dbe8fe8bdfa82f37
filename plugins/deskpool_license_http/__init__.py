"""The ``http`` licensing reporter: posts activation reports to ``LICENSE_REPORT_URL``.

Chosen by ``LICENSE_REPORTER=http`` (the default). With ``LICENSE_REPORT_URL`` empty it is
disabled and sends nothing; the platform never asks it to report for the free edition. Each
report is one ``POST`` of the JSON payload documented in :mod:`deskpool.licensing.reporting`
(``Content-Type: application/json``, ``User-Agent: deskpool/<version>``); any 2xx answer is
success, anything else (another status, a refused connection, no answer within
:data:`SEND_TIMEOUT` seconds) a failure the worker retries with backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from deskpool import __version__
from deskpool.config import Config, SettingRegistry, parse_url
from deskpool.licensing.reporting import LicenseReporterFactory, ReportFailed
from deskpool.plugins import hookimpl
from deskpool.registry import Registry

#: How long one report may take.
SEND_TIMEOUT = 30.0


class HttpReporter:
    """Posts reports to ``LICENSE_REPORT_URL``.

    :param config: the process configuration.
    """

    def __init__(self, config: Config) -> None:
        self.url: str = config["LICENSE_REPORT_URL"]

    @property
    def enabled(self) -> bool:
        """Whether ``LICENSE_REPORT_URL`` is set."""
        return bool(self.url)

    async def send(self, report: Mapping[str, Any]) -> None:
        """``POST`` the report; raise :class:`ReportFailed` unless it is answered 2xx."""
        timeout = aiohttp.ClientTimeout(total=SEND_TIMEOUT)
        headers = {"User-Agent": f"deskpool/{__version__}"}
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, headers=headers) as session,
                session.post(self.url, json=dict(report), allow_redirects=False) as response,
            ):
                if not 200 <= response.status < 300:
                    raise ReportFailed(f"the report endpoint answered HTTP {response.status}")
        except (TimeoutError, aiohttp.ClientError) as error:
            raise ReportFailed(
                f"the report endpoint cannot be reached ({type(error).__name__})"
            ) from None


@hookimpl
def deskpool_register_license_reporters(registry: Registry[LicenseReporterFactory]) -> None:
    """Register the ``http`` reporter."""
    registry.add("http", HttpReporter)


@hookimpl
def deskpool_declare_settings(registry: SettingRegistry) -> None:
    """Declare ``LICENSE_REPORT_URL``."""
    registry.section("Licensing", owner="license_http").add(
        "LICENSE_REPORT_URL",
        parse_url("https", "http"),
        "",
        "Vendor activation-report endpoint. Empty disables activation reporting. The free "
        "edition never reports.",
        type_name="url",
    )
