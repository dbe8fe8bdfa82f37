"""Contract tests: schemathesis over the whole checked-in OpenAPI document.

Two instances are served on loopback from a thread of their own (schemathesis calls them over
real HTTP, synchronously): one without OIDC configuration, where protected operations answer
503 as SPEC §5.1.4 requires and public ones behave normally, and one against the test identity
provider, called with the token of a bootstrap administrator, where no operation may answer a
5xx at all. Every response must conform to the document: status, content type, headers and
body schema; invalid requests must be refused with a 4xx. Examples per operation are bounded so
the run takes seconds.

Two allowances, both narrow:

- A request whose line or headers exceed aiohttp's HTTP limits (8190 bytes) is refused by the
  HTTP parser with a plain-text 400 before any route or middleware sees it; the fuzzer makes
  such URLs, and those examples are discarded.
- Schema-valid data may still be refused with a documented 400 or 422 where the schema cannot
  say what is valid: an opaque cursor this server did not issue, rules across fields.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, reject, settings
from tests.conftest import REPO

from deskpool.testing.idp import TestIdentityProvider
from deskpool.testing.services import ServiceAddresses

DOCUMENT = REPO / "api" / "openapi" / "openapi.yaml"
ADMIN_SUBJECT = "contract-admin"
EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)

POSITIVE_DATA_STATUSES = ["2xx", "3xx", "400", "401", "403", "404", "409", "422", "429"]

schema = schemathesis.openapi.from_path(
    DOCUMENT,
    config=schemathesis.Config.from_dict(
        {"checks": {"positive_data_acceptance": {"expected-statuses": POSITIVE_DATA_STATUSES}}}
    ),
)


def call(case: Any, base_url: str, **kwargs: Any) -> Any:
    """Send ``case``; discard it if the HTTP parser refused it for its size."""
    response = case.call(base_url=base_url, **kwargs)
    if (
        response.status_code == 400
        and response.headers.get("content-type", [""])[0].startswith("text/plain")
        and response.text.startswith("Got more than")
    ):
        reject()
    return response


@dataclass(frozen=True)
class ServedApis:
    """Base URLs of the two instances and the administrator's bearer token."""

    unconfigured: str
    secured: str
    admin_token: str


class ApiThread:
    """Serves API applications from an event loop in a thread, for synchronous clients."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._cleanups: list[Any] = []

    def __enter__(self) -> ApiThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()

    def run(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the thread's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    async def serve(self, environ: dict[str, str]) -> str:
        """Open a runtime for ``environ`` and serve its API on loopback; the base URL."""
        from deskpool.api.app import create_app
        from deskpool.host import bootstrap
        from deskpool.runtime import Runtime

        process = bootstrap(environ, ["api"], log_setup=False)
        runtime = Runtime(process.config, process.plugins)
        await runtime.open()
        self._cleanups.append(runtime.close)
        runner = web.AppRunner(create_app(runtime))
        await runner.setup()
        self._cleanups.append(runner.cleanup)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    async def start_identity_provider(self) -> TestIdentityProvider:
        """A test issuer running on this thread's loop."""
        idp = TestIdentityProvider()
        await idp.start()
        self._cleanups.append(idp.stop)
        return idp

    async def _close(self) -> None:
        for cleanup in reversed(self._cleanups):
            await cleanup()


@pytest.fixture(scope="module")
def served(migrated_database_url: str, test_servers: ServiceAddresses) -> Iterator[ServedApis]:
    environ = {
        "DATABASE_URL": migrated_database_url,
        "KVSTORE_ADDR": test_servers.kv_addr,
        "KVSTORE_KEY_PREFIX": f"deskpool-test-{secrets.token_hex(4)}:",
        "METRICS_ADDR": "",
        "APP_ENV": "test",
        "LOG_LEVEL": "warn",
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", ""),
        # The fuzzer sends far more than a person would; the limiter is tested elsewhere.
        "API_RATE_LIMIT_PER_MINUTE": "1000000",
    }
    with ApiThread() as thread:
        unconfigured = thread.run(thread.serve(environ))
        idp = thread.run(thread.start_identity_provider())
        secured = thread.run(
            thread.serve(
                environ
                | {
                    "AUTH_OIDC_ISSUER_URL": idp.issuer_url,
                    "AUTH_OIDC_AUDIENCE": idp.audience,
                    "AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN_SUBJECT,
                }
            )
        )
        token = idp.issue_token(ADMIN_SUBJECT, expires_in=3600)
        yield ServedApis(unconfigured=unconfigured, secured=secured, admin_token=token)


@schema.parametrize()
@EXAMPLES
def test_without_oidc_every_response_conforms(case: Any, served: ServedApis) -> None:
    response = call(case, served.unconfigured)
    if not case.operation.definition.raw.get("security"):
        case.validate_response(response)
        return
    if response.status_code >= 500:
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "auth_not_configured"
    case.validate_response(response, excluded_checks=protected_while_unconfigured())


@schema.parametrize()
@EXAMPLES
def test_signed_in_every_response_conforms_and_nothing_fails(case: Any, served: ServedApis) -> None:
    headers = {"Authorization": f"Bearer {served.admin_token}"}
    response = call(case, served.secured, headers=headers)
    case.validate_response(response, headers=headers)


def protected_while_unconfigured() -> list[Any]:
    """Checks that cannot hold while protected operations answer 503, as they must."""
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

    return [not_a_server_error, negative_data_rejection, positive_data_acceptance]
