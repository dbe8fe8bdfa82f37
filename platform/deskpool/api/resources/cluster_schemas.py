"""Request and response schemas of the cluster resources and the console's setup state.

The handlers are in :mod:`deskpool.api.resources.clusters`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from deskpool.api.pagination import PageQuery
from deskpool.api.problems import PROBLEM_CONTENT_TYPE, ProblemSchema
from deskpool.api.routes import ResponseSpec
from deskpool.api.secret_fields import SecretInput, SecretStatusSchema
from deskpool.api.validation import FullMatch
from deskpool.clusters.commands import ChangeCluster, CreateCluster, TlsChange
from deskpool.clusters.drivers import INSTALLED, NOT_INSTALLED
from deskpool.clusters.tls import (
    FINGERPRINT_TEXT,
    MAX_CA_CERTIFICATE_LENGTH,
    PEM_CERTIFICATES,
    check_ca_certificate,
    normalize_fingerprint,
)
from deskpool.drivers import OsType
from deskpool.names import NAME_PATTERN
from deskpool.secrets import SecretValue
from deskpool.unset import UNSET

_NAME = FullMatch(NAME_PATTERN, error="Printable text without leading or trailing spaces.")
_CREDENTIAL_KEY = validate.Regexp(
    r"^[A-Za-z0-9_.-]{1,100}$", error="Letters, digits, '.', '_' and '-' (1 to 100)."
)


# ---------------------------------------------------------------------------------- fields


def is_storable(value: Any) -> bool:
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
        return is_storable(value.reveal())
    if isinstance(value, Mapping):
        return all(is_storable(key) and is_storable(item) for key, item in value.items())
    if isinstance(value, list):
        return all(is_storable(item) for item in value)
    return True


def _check_storable(value: Any) -> None:
    if not is_storable(value):
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
                "Secret values the driver connects with, by name: the fields its entry of "
                "`GET /api/v1/drivers` marks `secret` (for Proxmox VE: `token_id` and "
                "`token_secret`). Write-only: sealed at rest and never returned."
            ),
        },
        **kwargs,
    )


def _options_field(**kwargs: Any) -> fields.Dict:
    return fields.Dict(
        keys=fields.String(validate=validate.Length(min=1, max=100)),
        validate=_check_storable,
        metadata={
            "description": (
                "Driver-specific settings: the fields its entry of `GET /api/v1/drivers` "
                "does not mark `secret`. The values of the options it marks `sealed`, and of "
                "the `sealed_keys` of a `json` option, are write-only: sealed at rest like "
                "credentials and never returned. A change that gives the options again keeps "
                "a stored secret value it leaves out; give it as `null` to remove it."
            ),
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
    options = fields.Dict(
        required=True,
        metadata={
            "description": (
                "The driver's options, without the values it declares secret (its fields' "
                "`sealed` and `sealed_keys` in `GET /api/v1/drivers`): those are write-only."
            )
        },
    )
    credentials = fields.Nested(SecretStatusSchema, required=True)
    secret_options = fields.Nested(
        SecretStatusSchema,
        required=True,
        metadata={
            "description": (
                "Whether values of options the driver declares secret are stored (sealed, "
                "never shown back), and when they last changed."
            )
        },
    )
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)
    last_check_at = fields.AwareDateTime(
        required=True,
        allow_none=True,
        metadata={
            "description": "When it was last checked: by `POST .../check`, or by the "
            "reconciliation's listing of its VMs (kept once a minute while the outcome stays "
            "the same, at once when it changes)."
        },
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
            "description": "An installed hypervisor driver (`GET /api/v1/drivers` lists them)."
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
            "description": "The hypervisor drivers a cluster can be connected with (their "
            "connection fields: `GET /api/v1/drivers`); only for callers who may connect one "
            "(`clusters:manage`)."
        },
    )


#: The problems of an operation that reads from the cluster through its driver.
DRIVER_PROBLEMS = {
    502: ResponseSpec(
        "The cluster answered with an error (credentials refused...).",
        ProblemSchema,
        content_type=PROBLEM_CONTENT_TYPE,
    ),
    504: ResponseSpec(
        "The cluster did not answer in time.", ProblemSchema, content_type=PROBLEM_CONTENT_TYPE
    ),
}


# ---------------------------------------------------------------------------------- commands


def _tls_change(document: Mapping[str, Any]) -> TlsChange:
    return TlsChange(
        verify=document.get("verify", UNSET),
        ca_certificate=document.get("ca_certificate", UNSET),
        fingerprint=document.get("fingerprint", UNSET),
    )


def create_cluster_command(body: Mapping[str, Any]) -> CreateCluster:
    """A loaded ``ClusterCreate`` document as a command."""
    return CreateCluster(
        name=body["name"],
        driver=body["driver"],
        endpoint=body["endpoint"],
        tls=_tls_change(body.get("tls") or {}),
        options=body.get("options") or {},
        credentials=body.get("credentials") or {},
    )


def change_cluster_command(body: Mapping[str, Any]) -> ChangeCluster:
    """A loaded ``ClusterChange`` document as a command (absent members :data:`UNSET`)."""
    return ChangeCluster(
        name=body.get("name", UNSET),
        endpoint=body.get("endpoint", UNSET),
        tls=_tls_change(body["tls"]) if "tls" in body else UNSET,
        options=body.get("options", UNSET),
        credentials=body.get("credentials", UNSET),
    )
