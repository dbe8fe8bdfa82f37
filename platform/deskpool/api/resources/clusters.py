"""Cluster connections (``clusters:read`` / ``clusters:manage``), and the console's setup state.

A cluster connection names the hypervisor driver that reaches the cluster, its endpoint, TLS
settings (verification, a CA certificate, or a pinned SHA-256 fingerprint), driver options and
credentials. Credentials are write-only: they are sealed by the secret store and a response says
only whether they are set and when they last changed. The driver validates settings and
credentials before anything is stored (a refusal is 422 ``driver_configuration_invalid``); an
unknown driver is 422 with the installed ones listed in ``installed``.

``POST /api/v1/clusters/{cluster_id}/check`` connects with the driver and reports what it found,
or the driver's error, as a result (never as a failed request); the outcome is kept on the
record. Nodes and templates are read from the cluster when asked. A cluster whose driver is no
longer installed still lists (``driver_status: not_installed``); what needs the driver answers
503 ``driver_not_installed``.

Every change is recorded in the audit trail in the same transaction; credentials never appear
in it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from marshmallow import Schema, ValidationError, fields, validate

from deskpool.api.context import Call
from deskpool.api.pagination import Page, PageQuery, decode_cursor, page_schema, paginate
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.routes import Reply, ResponseSpec, RouteTable
from deskpool.api.secret_fields import SecretInput, SecretStatusSchema
from deskpool.api.validation import FullMatch, LocatedFieldError
from deskpool.clusters import repository
from deskpool.clusters.drivers import INSTALLED, NOT_INSTALLED, DriverManager, driver_manager_for
from deskpool.clusters.repository import ClusterRecord, ConnectionSettings
from deskpool.clusters.tls import (
    FINGERPRINT_TEXT,
    MAX_CA_CERTIFICATE_LENGTH,
    PEM_CERTIFICATES,
    check_ca_certificate,
    normalize_fingerprint,
)
from deskpool.drivers import DriverError, OsType, deadline_after
from deskpool.errors import Conflict, DeskpoolError, InvalidCursor, NotFound, ValidationFailed
from deskpool.ids import parse_id
from deskpool.names import NAME_PATTERN
from deskpool.secrets import SecretValue

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds an API request waits for the cluster (a check, a list of nodes or templates).
DRIVER_CALL_TIMEOUT = 30.0

_NAME = FullMatch(NAME_PATTERN, error="Printable text without leading or trailing spaces.")
_CREDENTIAL_KEY = validate.Regexp(
    r"^[A-Za-z0-9_.-]{1,100}$", error="Letters, digits, '.', '_' and '-' (1 to 100)."
)


# ---------------------------------------------------------------------------------- fields


def _storable(value: Any) -> bool:
    """Whether every string in ``value`` (a JSON value) is text PostgreSQL and UTF-8 can hold.

    JSON may carry NUL characters and lone surrogates; neither can be stored or sealed.
    """
    if isinstance(value, str):
        if "\x00" in value:
            return False
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, SecretValue):
        return _storable(value.reveal())
    if isinstance(value, Mapping):
        return all(_storable(key) and _storable(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    return True


def _check_storable(value: Any) -> None:
    if not _storable(value):
        raise ValidationError("Must not contain NUL characters or unpaired surrogates.")


class FingerprintField(fields.String):
    """A SHA-256 certificate fingerprint, normalized to ``AB:CD:...`` (upper case, colons)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        try:
            return normalize_fingerprint(text)
        except ValueError as error:
            raise ValidationError(str(error)) from None


class CaCertificateField(fields.String):
    """PEM text of one or more X.509 CA certificates."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        try:
            return check_ca_certificate(text)
        except ValueError as error:
            raise ValidationError(str(error)) from None


#: The most credentials a cluster may hold (a token id and secret, a user and password...).
MAX_CREDENTIALS = 32


def _at_most_32_credentials(value: Mapping[str, Any]) -> None:
    if len(value) > MAX_CREDENTIALS:
        raise ValidationError(f"At most {MAX_CREDENTIALS} credentials.")


def _credentials_field(**kwargs: Any) -> fields.Dict:
    return fields.Dict(
        keys=fields.String(validate=_CREDENTIAL_KEY),
        values=SecretInput(validate=_check_storable),
        validate=_at_most_32_credentials,
        load_only=True,
        metadata={
            "maxProperties": MAX_CREDENTIALS,
            "propertyNames": {"pattern": _CREDENTIAL_KEY.regex.pattern},
            "description": (
                "Secret values the driver connects with, by name (for Proxmox VE: `token_id` "
                "and `token_secret`; see the driver's documentation). Write-only: sealed at "
                "rest and never returned."
            ),
        },
        **kwargs,
    )


def _options_field(**kwargs: Any) -> fields.Dict:
    return fields.Dict(
        keys=fields.String(validate=validate.Length(min=1, max=100)),
        validate=_check_storable,
        metadata={
            "description": "Driver-specific settings (see the driver's documentation).",
            "propertyNames": {"minLength": 1, "maxLength": 100},
        },
        **kwargs,
    )


# ---------------------------------------------------------------------------------- schemas


class TlsSchema(Schema):
    """How the cluster's certificate is verified."""

    verify = fields.Boolean(
        required=True, metadata={"description": "Verify the server certificate."}
    )
    ca_certificate = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "PEM of the CA trusted instead of the system's, if any."},
    )
    fingerprint = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": (
                "Pinned SHA-256 fingerprint of the server certificate (`AB:CD:...`); when set, "
                "only the pin is checked, not the chain."
            )
        },
    )


class TlsInputSchema(Schema):
    """TLS settings of a cluster; on a change, the ones given replace the stored ones."""

    verify = fields.Boolean(metadata={"description": "Verify the server certificate (default)."})
    ca_certificate = CaCertificateField(
        allow_none=True,
        validate=[
            validate.Length(max=MAX_CA_CERTIFICATE_LENGTH),
            validate.Regexp(
                PEM_CERTIFICATES,
                error="Must be PEM text of certificates (-----BEGIN CERTIFICATE----- blocks).",
            ),
        ],
        metadata={
            "description": "PEM of a CA to trust instead of the system's; null for none.",
        },
    )
    fingerprint = FingerprintField(
        allow_none=True,
        validate=validate.Regexp(
            FINGERPRINT_TEXT, error="Must be 64 hex digits (colons and spaces allowed)."
        ),
        metadata={
            "description": (
                "SHA-256 fingerprint of the server certificate to pin (64 hex digits, colons "
                "allowed); null for none."
            )
        },
    )


class ClusterSchema(Schema):
    """A cluster connection (credentials are described, never shown)."""

    id = fields.String(required=True)
    name = fields.String(required=True)
    driver = fields.String(required=True, metadata={"description": "The hypervisor driver."})
    driver_status = fields.String(
        required=True,
        validate=validate.OneOf([INSTALLED, NOT_INSTALLED]),
        metadata={
            "description": (
                "`not_installed` when the driver's package is not installed here: the cluster "
                "cannot be reached until it is."
            )
        },
    )
    endpoint = fields.String(required=True)
    tls = fields.Nested(TlsSchema, required=True)
    options = fields.Dict(required=True)
    credentials = fields.Nested(SecretStatusSchema, required=True)
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)
    last_check_at = fields.AwareDateTime(
        required=True, allow_none=True, metadata={"description": "When it was last checked."}
    )
    last_check_ok = fields.Boolean(
        required=True, allow_none=True, metadata={"description": "Whether that check passed."}
    )
    last_check_error = fields.String(
        required=True,
        allow_none=True,
        metadata={"description": "Why it failed (`<code>: <detail>`), if it did."},
    )


class ClusterCreateSchema(Schema):
    """A new cluster connection."""

    name = fields.String(
        required=True, validate=[validate.Length(min=1, max=100), _NAME, _check_storable]
    )
    driver = fields.String(
        required=True,
        validate=[validate.Length(min=1, max=100), _check_storable],
        metadata={
            "description": "An installed hypervisor driver (`GET /api/v1/setup` lists them)."
        },
    )
    endpoint = fields.String(
        required=True,
        validate=[validate.Length(min=1, max=2048), _check_storable],
        metadata={"description": "The cluster's API address, as the driver documents it."},
    )
    credentials = _credentials_field(load_default=dict)
    tls = fields.Nested(TlsInputSchema, load_default=dict)
    options = _options_field(load_default=dict)


class ClusterChangeSchema(Schema):
    """Changes to a cluster connection; what is absent stays as it is.

    The driver cannot change (create another cluster instead).
    """

    name = fields.String(validate=[validate.Length(min=1, max=100), _NAME, _check_storable])
    endpoint = fields.String(validate=[validate.Length(min=1, max=2048), _check_storable])
    credentials = _credentials_field(allow_none=True)
    tls = fields.Nested(TlsInputSchema)
    options = _options_field()


class ClusterQuery(PageQuery):
    """Filters of the cluster list."""

    driver = fields.String(
        validate=[validate.Length(min=1, max=100), _check_storable],
        metadata={"description": "Only clusters of this driver."},
    )


class DriverErrorSchema(Schema):
    """An error the driver reported."""

    code = fields.String(required=True, metadata={"description": "Stable machine-readable code."})
    title = fields.String(required=True)
    detail = fields.String(required=True)
    retryable = fields.Boolean(
        required=True, metadata={"description": "Whether trying again later may succeed."}
    )


class CheckResultSchema(Schema):
    """The outcome of a connection check."""

    ok = fields.Boolean(required=True)
    checked_at = fields.AwareDateTime(required=True)
    duration_seconds = fields.Float(required=True)
    product = fields.String(
        required=True, allow_none=True, metadata={"description": "The hypervisor product."}
    )
    version = fields.String(required=True, allow_none=True)
    cluster_name = fields.String(required=True, allow_none=True)
    details = fields.Dict(
        keys=fields.String(), values=fields.String(), required=True, allow_none=True
    )
    error = fields.Nested(DriverErrorSchema, required=True, allow_none=True)


class NodeSchema(Schema):
    """A hypervisor node of the cluster."""

    name = fields.String(required=True)
    online = fields.Boolean(required=True)
    cpu_count = fields.Integer(required=True, allow_none=True)
    memory_bytes = fields.Integer(required=True, allow_none=True)


class TemplateSchema(Schema):
    """A template desktops can be cloned from."""

    id = fields.String(required=True, metadata={"description": "The hypervisor's template id."})
    name = fields.String(required=True)
    node = fields.String(required=True)
    os_type = fields.String(required=True, validate=validate.OneOf([t.value for t in OsType]))
    description = fields.String(required=True)


class SetupSchema(Schema):
    """What the console needs to know on first sign-in, and no more than the caller may see."""

    cluster_connected = fields.Boolean(
        required=True,
        metadata={"description": "Whether a cluster is connected (with an installed driver)."},
    )
    cluster_count = fields.Integer(
        validate=validate.Range(min=0),
        metadata={
            "description": "How many cluster connections exist; only for holders of "
            "`clusters:read`."
        },
    )
    can_connect_cluster = fields.Boolean(
        required=True,
        metadata={"description": "Whether the caller may connect one (`clusters:manage`)."},
    )
    is_platform_admin = fields.Boolean(required=True)
    installed_drivers = fields.List(
        fields.String(),
        metadata={
            "description": "The hypervisor drivers a cluster can be connected with; only for "
            "callers who may connect one (`clusters:manage`)."
        },
    )


_DRIVER_PROBLEMS = {
    502: ResponseSpec(
        "The cluster answered with an error (credentials refused...).",
        ProblemSchema,
        content_type=PROBLEM_CONTENT_TYPE,
    ),
    504: ResponseSpec(
        "The cluster did not answer in time.", ProblemSchema, content_type=PROBLEM_CONTENT_TYPE
    ),
}


# ---------------------------------------------------------------------------------- helpers


def _view(record: ClusterRecord, manager: DriverManager) -> dict[str, Any]:
    settings = record.settings
    return {
        "id": str(record.id),
        "name": record.name,
        "driver": record.driver,
        "driver_status": manager.status_of(record.driver),
        "endpoint": settings.endpoint,
        "tls": {
            "verify": settings.tls_verify,
            "ca_certificate": settings.ca_certificate,
            "fingerprint": settings.fingerprint,
        },
        "options": dict(settings.options),
        "credentials": record.credentials,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "last_check_at": record.last_check_at,
        "last_check_ok": record.last_check_ok,
        "last_check_error": record.last_check_error,
    }


def _plain(credentials: Mapping[str, SecretValue] | None) -> dict[str, str]:
    return {key: value.reveal() for key, value in (credentials or {}).items()}


def _settings(body: Mapping[str, Any], current: ConnectionSettings) -> ConnectionSettings:
    """``current`` with what ``body`` changes (tls members one by one)."""
    tls = body.get("tls") or {}
    return replace(
        current,
        endpoint=body.get("endpoint", current.endpoint),
        tls_verify=tls.get("verify", current.tls_verify),
        ca_certificate=tls.get("ca_certificate", current.ca_certificate),
        fingerprint=tls.get("fingerprint", current.fingerprint),
        options=body.get("options", current.options),
    )


def _cluster_id(call: Call) -> uuid.UUID:
    return parse_id(call.path_param("cluster_id"), "cluster")


async def _existing(call: Call) -> ClusterRecord:
    cluster_id = _cluster_id(call)
    record = await repository.get_cluster(call.runtime.db, cluster_id)
    if record is None:
        raise NotFound(f"No cluster has the id {cluster_id}.")
    return record


async def _audit(call: Call, connection: Any, action: str, cluster_id: str, **details: Any) -> None:
    await call.record_audit(connection, action, "clusters", cluster_id, details)


def _page_in_memory(call: Call, items: list[T], key: Callable[[T], Any]) -> Page:
    """A page of ``items`` (sorted by ``key``) after the cursor, for lists read from a cluster."""
    after = decode_cursor(call.query.get("cursor"))
    ordered = sorted(items, key=key)
    if after is not None:
        try:
            ordered = [item for item in ordered if key(item) > after]
        except TypeError:
            raise InvalidCursor() from None
    limit = int(call.query["limit"])
    return paginate(ordered[: limit + 1], limit, key)


def _storable_text(failure: Mapping[str, Any]) -> str:
    """``<code>: <detail>`` of a failed check, as text PostgreSQL stores (the hypervisor's)."""
    text = f"{failure['code']}: {failure['detail']}".replace("\x00", "")
    return text.encode("utf-8", "replace").decode()


def _problem_of(error: DriverError) -> dict[str, Any]:
    return {
        "code": error.code,
        "title": error.title,
        "detail": error.detail,
        "retryable": error.retryable,
    }


# ----------------------------------------------------------------------------------- routes


def register(routes: RouteTable) -> None:
    """Add the cluster operations and ``GET /api/v1/setup``."""

    @routes.route(
        "GET",
        "/api/v1/setup",
        summary="Whether a cluster is connected, and whether the caller may connect one",
        description=(
            "The console asks this after sign-in: with no cluster connected, a caller who may "
            "connect one is led to do so, others are told to ask an administrator. Every "
            "signed-in caller learns whether a cluster is connected and what they may do; the "
            "number of clusters only with `clusters:read`, the installed drivers only with "
            "`clusters:manage`."
        ),
        tags=("setup",),
        permission=None,
        authenticated=True,
        responses={200: ResponseSpec("The setup state.", SetupSchema)},
    )
    async def get_setup(call: Call) -> dict[str, Any]:
        principal = call.caller
        manager = driver_manager_for(call.runtime)
        counts = await repository.clusters_by_driver(call.runtime.db)
        may_connect = principal.may("clusters:manage")
        setup: dict[str, Any] = {
            "cluster_connected": any(manager.is_installed(driver) for driver in counts),
            "can_connect_cluster": may_connect,
            "is_platform_admin": principal.effective.is_platform_admin,
        }
        # What only administrators act on stays with them: drivers and counts.
        if principal.may("clusters:read"):
            setup["cluster_count"] = sum(counts.values())
        if may_connect:
            setup["installed_drivers"] = manager.installed()
        return setup

    @routes.route(
        "GET",
        "/api/v1/clusters",
        summary="List cluster connections",
        description="In name order; filter by driver.",
        tags=("clusters",),
        permission="clusters:read",
        query=ClusterQuery,
        paginated=True,
        responses={200: ResponseSpec("A page of clusters.", page_schema(ClusterSchema))},
    )
    async def list_clusters(call: Call) -> Page:
        manager = driver_manager_for(call.runtime)
        limit = int(call.query["limit"])
        after = decode_cursor(call.query.get("cursor"))
        if after is not None and not (isinstance(after, str) and _storable(after)):
            raise InvalidCursor()
        records = await repository.list_clusters(
            call.runtime.db, limit=limit + 1, after_name=after, driver=call.query.get("driver")
        )
        return paginate([_view(r, manager) for r in records], limit, lambda item: item["name"])

    @routes.route(
        "POST",
        "/api/v1/clusters",
        summary="Connect a cluster",
        description=(
            "The driver checks the settings and credentials without connecting (a refusal is "
            "422 `driver_configuration_invalid`); `POST .../check` then connects. An unknown "
            "driver is 422 with the installed drivers in `installed`; a name in use, 409 "
            "`cluster_name_taken`; credentials without a configured master key, 503 "
            "`secrets_key_missing`."
        ),
        tags=("clusters",),
        permission="clusters:manage",
        body=ClusterCreateSchema,
        responses={201: ResponseSpec("The new cluster.", ClusterSchema)},
    )
    async def create_cluster(call: Call) -> Reply:
        manager = driver_manager_for(call.runtime)
        body = call.body
        driver = body["driver"]
        if not manager.is_installed(driver):
            installed = manager.installed()
            error = ValidationFailed(
                [
                    LocatedFieldError(
                        "/driver",
                        f"No hypervisor driver named {driver!r} is installed; installed: "
                        f"{', '.join(installed) or 'none'}.",
                    )
                ]
            )
            error.extra["installed"] = installed
            raise error
        cluster_id = uuid.uuid4()
        settings = _settings(body, ConnectionSettings(endpoint=body["endpoint"]))
        credentials = body["credentials"]
        await manager.check_settings(driver, cluster_id, settings, _plain(credentials))
        async with call.runtime.db.acquire() as connection, connection.transaction():
            await repository.insert_cluster(
                connection,
                cluster_id=cluster_id,
                name=body["name"],
                driver=driver,
                settings=settings,
            )
            if credentials:
                await repository.store_credentials(
                    connection, manager.secret_store, cluster_id, credentials
                )
            await _audit(
                call,
                connection,
                "cluster.create",
                str(cluster_id),
                name=body["name"],
                driver=driver,
                endpoint=settings.endpoint,
                credentials_set=bool(credentials),
            )
            record = await repository.get_cluster(connection, cluster_id)
        assert record is not None
        return Reply(_view(record, manager), 201)

    @routes.route(
        "GET",
        "/api/v1/clusters/{cluster_id}",
        summary="Get a cluster connection",
        tags=("clusters",),
        permission="clusters:read",
        responses={200: ResponseSpec("The cluster.", ClusterSchema)},
    )
    async def get_cluster(call: Call) -> dict[str, Any]:
        return _view(await _existing(call), driver_manager_for(call.runtime))

    @routes.route(
        "PATCH",
        "/api/v1/clusters/{cluster_id}",
        summary="Change a cluster connection",
        description=(
            "Members given replace the stored ones (`tls` member by member; `options` and "
            "`credentials` whole; `credentials: null` removes them). A change to how the "
            "cluster is reached is checked by its driver first, as on creation (when the "
            "driver is installed)."
        ),
        tags=("clusters",),
        permission="clusters:manage",
        body=ClusterChangeSchema,
        responses={200: ResponseSpec("The cluster.", ClusterSchema)},
    )
    async def update_cluster(call: Call) -> dict[str, Any]:
        manager = driver_manager_for(call.runtime)
        cluster_id = _cluster_id(call)
        body = call.body
        replaces_credentials = "credentials" in body
        async with call.runtime.db.acquire() as connection, connection.transaction():
            record = await repository.get_cluster(connection, cluster_id, for_update=True)
            if record is None:
                raise NotFound(f"No cluster has the id {cluster_id}.")
            settings = _settings(body, record.settings)
            reach_changed = replaces_credentials or settings != record.settings
            if reach_changed and manager.is_installed(record.driver):
                if replaces_credentials:
                    credentials = _plain(body["credentials"])
                elif record.credentials.is_set:
                    credentials = await repository.load_credentials(
                        connection, manager.secret_store, cluster_id
                    )
                else:
                    credentials = {}
                await manager.check_settings(record.driver, cluster_id, settings, credentials)
            await repository.update_cluster(
                connection, cluster_id, name=body.get("name", record.name), settings=settings
            )
            if replaces_credentials:
                if body["credentials"]:
                    await repository.store_credentials(
                        connection, manager.secret_store, cluster_id, body["credentials"]
                    )
                else:
                    await repository.delete_credentials(connection, cluster_id)
            await _audit(
                call,
                connection,
                "cluster.update",
                str(cluster_id),
                fields=sorted(body),
                credentials=(
                    ("replaced" if body["credentials"] else "removed")
                    if replaces_credentials
                    else "unchanged"
                ),
            )
            updated = await repository.get_cluster(connection, cluster_id)
        assert updated is not None
        return _view(updated, manager)

    @routes.route(
        "DELETE",
        "/api/v1/clusters/{cluster_id}",
        summary="Delete a cluster connection",
        description=(
            "Its credentials are deleted with it. 409 `cluster_in_use` while pools provision "
            "on it. Virtual machines on the cluster are not touched."
        ),
        tags=("clusters",),
        permission="clusters:manage",
        responses={204: ResponseSpec("Deleted.")},
    )
    async def delete_cluster(call: Call) -> Reply:
        manager = driver_manager_for(call.runtime)
        cluster_id = _cluster_id(call)
        async with call.runtime.db.acquire() as connection, connection.transaction():
            record = await repository.get_cluster(connection, cluster_id, for_update=True)
            if record is None:
                raise NotFound(f"No cluster has the id {cluster_id}.")
            in_use = await repository.pools_using_cluster(connection, cluster_id)
            if in_use:
                raise Conflict(
                    f"{in_use} pool(s) provision on the cluster {record.name!r}; delete them or "
                    "move them to another cluster first.",
                    code="cluster_in_use",
                    extra={"pools": in_use},
                )
            await repository.delete_cluster(connection, cluster_id)
            await _audit(call, connection, "cluster.delete", str(cluster_id), name=record.name)
        await manager.forget_shared_state(cluster_id)
        return Reply(None, 204)

    @routes.route(
        "POST",
        "/api/v1/clusters/{cluster_id}/check",
        summary="Check a cluster connection",
        description=(
            "Connects with the cluster's driver and credentials and reports the product and "
            "version found, or the driver's error (`ok: false`, with the error's code), as a "
            "200 result; the outcome is kept as the cluster's `last_check_*`. 503 "
            "`driver_not_installed` when the cluster's driver is not installed."
        ),
        tags=("clusters",),
        permission="clusters:manage",
        responses={200: ResponseSpec("The outcome of the check.", CheckResultSchema)},
    )
    async def check_cluster(call: Call) -> dict[str, Any]:
        manager = driver_manager_for(call.runtime)
        record = await _existing(call)
        manager.driver_class(record.driver)
        started = time.monotonic()
        result: dict[str, Any] = {
            "ok": False,
            "product": None,
            "version": None,
            "cluster_name": None,
            "details": None,
            "error": None,
        }
        try:
            async with manager.open(record) as driver:
                info = await driver.check_connection(deadline=deadline_after(DRIVER_CALL_TIMEOUT))
        except DriverError as error:
            result["error"] = _problem_of(error)
        except DeskpoolError:
            raise  # the platform's own problems (secrets), not the cluster's
        except Exception as error:  # a driver outside its contract: report, never a 500
            log.exception("the %s driver failed checking cluster %s", record.driver, record.id)
            result["error"] = {
                "code": "driver_unexpected_error",
                "title": "The hypervisor driver failed unexpectedly",
                "detail": f"The {record.driver} driver raised {type(error).__name__}; see the log.",
                "retryable": False,
            }
        else:
            result |= {
                "ok": True,
                "product": info.product,
                "version": info.version,
                "cluster_name": info.cluster_name,
                "details": dict(info.details),
            }
        result["duration_seconds"] = round(time.monotonic() - started, 6)
        failure = result["error"]
        async with call.runtime.db.acquire() as connection, connection.transaction():
            checked_at = await repository.record_check(
                connection,
                record.id,
                ok=result["ok"],
                error=None if failure is None else _storable_text(failure),
            )
            if checked_at is None:
                raise NotFound(f"No cluster has the id {record.id}.")
            details: dict[str, Any] = (
                {"product": result["product"], "version": result["version"]}
                if failure is None
                else {"error": failure["code"]}
            )
            await call.record_audit(
                connection,
                "cluster.check",
                "clusters",
                str(record.id),
                details,
                outcome="success" if failure is None else "failure",
            )
        result["checked_at"] = checked_at
        return result

    @routes.route(
        "GET",
        "/api/v1/clusters/{cluster_id}/nodes",
        summary="List the nodes of a cluster",
        description="Read from the cluster now, in name order.",
        tags=("clusters",),
        permission="clusters:read",
        query=PageQuery,
        paginated=True,
        responses={
            200: ResponseSpec("A page of nodes.", page_schema(NodeSchema)),
            **_DRIVER_PROBLEMS,
        },
    )
    async def list_cluster_nodes(call: Call) -> Page:
        record = await _existing(call)
        async with driver_manager_for(call.runtime).open(record) as driver:
            nodes = await driver.list_nodes(deadline=deadline_after(DRIVER_CALL_TIMEOUT))
        return _page_in_memory(call, nodes, lambda node: node.name)

    @routes.route(
        "GET",
        "/api/v1/clusters/{cluster_id}/templates",
        summary="List the templates of a cluster",
        description="Read from the cluster now, in name order.",
        tags=("clusters",),
        permission="clusters:read",
        query=PageQuery,
        paginated=True,
        responses={
            200: ResponseSpec("A page of templates.", page_schema(TemplateSchema)),
            **_DRIVER_PROBLEMS,
        },
    )
    async def list_cluster_templates(call: Call) -> Page:
        record = await _existing(call)
        async with driver_manager_for(call.runtime).open(record) as driver:
            templates = await driver.list_templates(deadline=deadline_after(DRIVER_CALL_TIMEOUT))
        return _page_in_memory(call, templates, lambda template: [template.name, template.id])
