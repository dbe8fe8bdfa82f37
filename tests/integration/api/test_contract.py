"""Contract tests: schemathesis over the whole checked-in OpenAPI document.

Two instances are served on loopback by a process of their own (schemathesis calls them over
real HTTP, synchronously; :mod:`tests.support.served_apis`): one without OIDC configuration,
where protected operations answer 503 as SPEC §5.1.4 requires and public ones behave normally,
and one against the test identity provider, called with the token of a bootstrap administrator,
where no operation may answer a 5xx at all. Every response must conform to the document: status,
content type, headers and body schema; invalid requests must be refused with a 4xx; and **valid
requests must be accepted** (schemathesis's ``positive_data_acceptance`` check): data the
document allows may be refused only for reasons of state (401, 403, 404, 409, 429), never with a
400 or 422, so a generated client never sends a request the server must refuse. Examples per
operation are bounded so the run takes seconds.

Allowances, each narrow and each listed in docs/api.md ("What the document cannot say"):

- A request whose line or headers exceed aiohttp's HTTP limits (8190 bytes) is refused by the
  HTTP parser with a plain-text 400 before any route or middleware sees it; the fuzzer makes
  such URLs, and those examples are discarded.
- An opaque cursor: the document can only say what a cursor looks like, not which ones this
  server issued, so a schema-valid ``cursor`` the list did not issue is 400 ``invalid_cursor``.
- An ``Idempotency-Key`` is one request's: the fuzzer's keys are replaced by new ones (a key
  sent again with another body is 422 ``idempotency_key_reused``, as the document says).
- NUL characters: the API refuses them in every string (400 ``invalid_text``), which
  docs/api.md states once instead of a pattern on each string; the fuzzer does not send them.
- Rules JSON Schema cannot state, refused with 422 at a known pointer of a known operation
  (:data:`UNSTATABLE`): one field compared with another, a reference to another resource that
  does not exist, what only parsing or the driver can judge. A 422 passes only when every
  field error it lists is one of those.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, reject, settings
from tests.support.paths import REPO
from tests.support.served_apis import ServedApis, served_apis

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

#: What valid data may be answered: success, or a refusal for a reason of state.
POSITIVE_DATA_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "429"]

schema = schemathesis.openapi.from_path(
    DOCUMENT,
    config=schemathesis.Config.from_dict(
        {
            "checks": {"positive_data_acceptance": {"expected-statuses": POSITIVE_DATA_STATUSES}},
            # No string may hold NUL (400 invalid_text, for every string of every operation):
            # docs/api.md states it once rather than as a pattern on each string.
            "generation": {"allow-x00": False},
        }
    ),
)


def call(case: Any, base_url: str, **kwargs: Any) -> Any:
    """Send ``case``; discard it if the HTTP parser refused it for its size.

    An ``Idempotency-Key`` the fuzzer made is replaced by a new one: a key names one request
    (the document says so), and the fuzzer would send the same few keys with other bodies,
    which the API rightly refuses (422 ``idempotency_key_reused``).
    """
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = str(uuid.uuid4())
    response = case.call(base_url=base_url, **kwargs)
    if (
        response.status_code == 400
        and response.headers.get("content-type", [""])[0].startswith("text/plain")
        and response.text.startswith("Got more than")
    ):
        reject()
    return response


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
    with served_apis(environ, ADMIN_SUBJECT) as apis:
        yield apis


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
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    headers = {"Authorization": f"Bearer {served.admin_token}"}
    response = call(case, served.secured, headers=headers)
    case.validate_response(
        response,
        headers=headers,
        excluded_checks=[positive_data_acceptance],
        additional_checks=[valid_data_is_accepted_but_unstatable_rules],
    )


_SCHEDULE_RULES = frozenset({"/name", "/time_zone", "/phases/*", "/exceptions/*"})
_WEBHOOK_RULES = frozenset({"/name", "/url", "/event_types/*"})

#: Rules the document cannot state, by operation: the field pointers a 422 may name, and the
#: problem codes it may carry (docs/api.md, "What the document cannot say").
UNSTATABLE: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {
    # The certificate's content is X.509 (parsing says); the driver declares its credentials
    # and options (any member under them, "/*") and judges its own settings.
    ("POST", "/api/v1/clusters"): (
        frozenset({"/tls/ca_certificate", "/driver", "/credentials/*", "/options/*"}),
        frozenset({"driver_configuration_invalid"}),
    ),
    ("PATCH", "/api/v1/clusters/{cluster_id}"): (
        frozenset({"/tls/ca_certificate", "/credentials/*", "/options/*"}),
        frozenset({"driver_configuration_invalid"}),
    ),
    # Sizes compared with each other; the pattern rendered for the pool's size and OS; a domain
    # join for Windows pools only, its password required on create (the input schema is
    # shared with PATCH, where a left-out password keeps the stored one); the cluster and its
    # templates, nodes and storages; the watermark's template parsed (its fields, its braces).
    ("POST", "/api/v1/pools"): (
        frozenset(
            {
                "/min_size",
                "/spare",
                "/naming_pattern",
                "/domain_join",
                "/domain_join/password",
                "/cluster_id",
                "/template",
                "/schedule_id",
                "/session_policy/client/watermark/text",
            }
        ),
        frozenset(),
    ),
    ("PATCH", "/api/v1/pools/{pool_id}"): (
        frozenset(
            {
                "/min_size",
                "/spare",
                "/naming_pattern",
                "/domain_join",
                "/domain_join/password",
                "/cluster_id",
                "/template",
                "/schedule_id",
                "/session_policy/client/watermark/text",
            }
        ),
        frozenset(),
    ),
    # A rollout's template exists on the pool's cluster and is not the pool's own; canary,
    # min_ready and surge compared with the pool's max_size; recreate_assigned for persistent
    # pools only.
    ("POST", "/api/v1/pools/{pool_id}/rollouts"): (
        frozenset({"/template", "/canary", "/min_ready", "/surge", "/recreate_assigned"}),
        frozenset(),
    ),
    # A schedule's time zone (the system's IANA database), phases and exceptions compared
    # with each other, and periods of at most 31 days (docs/operators/schedules.md).
    ("POST", "/api/v1/schedules"): (_SCHEDULE_RULES, frozenset()),
    ("PUT", "/api/v1/schedules/{schedule_id}"): (_SCHEDULE_RULES, frozenset()),
    ("POST", "/api/v1/schedule-preview"): (_SCHEDULE_RULES | {"/to"}, frozenset()),
    ("GET", "/api/v1/pools/{pool_id}/capacity"): (frozenset({"/to"}), frozenset()),
    # A report's end compared with its start (after it, and not too many buckets away).
    ("GET", "/api/v1/reports/usage"): (frozenset({"/to", "/from"}), frozenset()),
    ("GET", "/api/v1/reports/logon-phases"): (frozenset({"/to", "/from"}), frozenset()),
    # A webhook's URL is parsed (an http(s) URL with a host, no credentials, no fragment), its
    # name is not blank, and its event types are named ones or audit.<action>
    # (docs/operators/webhooks.md).
    ("POST", "/api/v1/webhooks"): (_WEBHOOK_RULES, frozenset()),
    ("PUT", "/api/v1/webhooks/{webhook_id}"): (_WEBHOOK_RULES, frozenset()),
    # A signed document: only its signature says whether it is one.
    ("PUT", "/api/v1/license"): (
        frozenset(),
        frozenset(
            {
                "license_malformed",
                "license_modified",
                "license_other_product",
                "license_forged",
                "license_expired",
            }
        ),
    ),
}


def _allowed(pointer: Any, pointers: frozenset[str]) -> bool:
    """Whether ``pointer`` is one of ``pointers`` (``/a/*``: any member of ``/a``)."""
    if not isinstance(pointer, str):
        return False
    return pointer in pointers or any(
        allowed.endswith("/*") and pointer.startswith(allowed[:-1]) for allowed in pointers
    )


def valid_data_is_accepted_but_unstatable_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance``, with the allowances above (and no others)."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    if response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        problem = response.json()
        code = problem.get("code")
        if (
            response.status_code == 400
            and (case.query or {}).get("cursor")
            and code == "invalid_cursor"
        ):
            return None
        if response.status_code == 422:
            pointers, codes = UNSTATABLE.get(
                (case.operation.method.upper(), case.operation.path), (frozenset(), frozenset())
            )
            errors = problem.get("errors") or []
            if code in codes or (
                code == "validation_failed"
                and errors
                and all(_allowed(error.get("pointer"), pointers) for error in errors)
            ):
                return None
    result: bool | None = positive_data_acceptance(ctx, response, case)
    return result


def protected_while_unconfigured() -> list[Any]:
    """Checks that cannot hold while protected operations answer 503, as they must."""
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

    return [not_a_server_error, negative_data_rejection, positive_data_acceptance]
