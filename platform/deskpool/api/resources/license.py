"""The license (``license:read`` / ``license:manage``): see the state, install or remove a license.

``GET /api/v1/license`` shows the edition and limits in force, usage against them, the installed
license (expiry, grace), the watermark, the build's integrity and the last activation report.
``PUT /api/v1/license`` installs a license document (replacing any), ``DELETE`` removes it; a
refused document is 422 with a code saying why (``license_malformed``, ``license_modified``,
``license_other_product``, ``license_forged``, ``license_expired``). Each handler calls one
service function of :mod:`deskpool.licensing.service`.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate

from deskpool.api.context import Call
from deskpool.api.routes import ResponseSpec, RouteTable
from deskpool.licensing import service
from deskpool.licensing.document import MAX_DOCUMENT_BYTES
from deskpool.licensing.model import (
    BuildIntegrity,
    Edition,
    LicenseStatus,
    WatermarkIntegrity,
    format_instant,
)

#: The license operations.
ROUTES = RouteTable()


def _counts(description: str, *, nullable: bool) -> fields.Dict:
    return fields.Dict(
        keys=fields.String(validate=validate.OneOf(["desktops", "pools", "sessions"])),
        values=fields.Integer(allow_none=nullable),
        required=True,
        metadata={"description": description},
    )


class InstalledLicenseSchema(Schema):
    """The installed license, as verified."""

    id = fields.String(required=True)
    licensee = fields.String(required=True)
    edition = fields.String(required=True)
    limits = _counts("The license's limits (null: unlimited).", nullable=True)
    issued_at = fields.String(required=True)
    expires_at = fields.String(required=True)
    grace_ends_at = fields.String(
        required=True, metadata={"description": "When the free edition's limits apply."}
    )
    key_id = fields.String(required=True, metadata={"description": "The vendor key's id."})
    installed_at = fields.AwareDateTime(required=True)
    installed_by = fields.String(required=True)


class WatermarkSchema(Schema):
    """The monotonic expiry watermark."""

    instant = fields.String(required=True, allow_none=True)
    integrity = fields.String(
        required=True, validate=validate.OneOf([i.value for i in WatermarkIntegrity])
    )
    detail = fields.String(required=True)


class BuildSchema(Schema):
    """The signed build manifest's verdict."""

    state = fields.String(required=True, validate=validate.OneOf([b.value for b in BuildIntegrity]))
    manifest_path = fields.String(required=True)
    detail = fields.String(required=True)
    files = fields.List(
        fields.String(), required=True, metadata={"description": "Files that differ."}
    )


class ClockSchema(Schema):
    """This process's clock against the database server's and the watermark."""

    process_time = fields.String(required=True)
    database_time = fields.String(required=True)
    offset_from_database_seconds = fields.Float(
        required=True,
        metadata={"description": "How far this process's clock is ahead (negative: behind)."},
    )
    offset_from_watermark_seconds = fields.Float(
        required=True,
        allow_none=True,
        metadata={"description": "How far it is ahead of the watermark (negative: behind)."},
    )
    within_tolerance = fields.Boolean(
        required=True,
        metadata={"description": "Within 15 minutes of the database server's clock."},
    )


class ReportingSchema(Schema):
    """The activation reports (never sent by the free edition)."""

    last_attempt_at = fields.AwareDateTime(required=True, allow_none=True)
    last_success_at = fields.AwareDateTime(required=True, allow_none=True)
    last_outcome = fields.String(required=True, allow_none=True)
    last_error = fields.String(required=True, allow_none=True)
    consecutive_failures = fields.Integer(required=True)
    next_due_at = fields.AwareDateTime(required=True, allow_none=True)
    sent = fields.Integer(required=True)


class LicenseStateSchema(Schema):
    """The license state of the deployment."""

    status = fields.String(required=True, validate=validate.OneOf([s.value for s in LicenseStatus]))
    edition = fields.String(
        required=True,
        validate=validate.OneOf([e.value for e in Edition]),
        metadata={"description": "The edition whose limits are in force."},
    )
    licensed = fields.Boolean(required=True)
    limits = _counts("The limits in force (null: unlimited).", nullable=True)
    usage = _counts("How much of each exists.", nullable=False)
    reasons = fields.List(fields.String(), required=True)
    judged_at = fields.String(
        required=True, metadata={"description": "The time expiry is judged at."}
    )
    license = fields.Nested(InstalledLicenseSchema, required=True, allow_none=True)
    watermark = fields.Nested(WatermarkSchema, required=True)
    build = fields.Nested(BuildSchema, required=True)
    reporting = fields.Nested(ReportingSchema, required=True)
    clock = fields.Nested(ClockSchema, required=True)
    instance_id = fields.String(required=True)


class LicenseInstallSchema(Schema):
    """A license document to install."""

    document = fields.String(
        required=True,
        metadata={
            "description": "The license file's content, exactly as the vendor sent it. A "
            f"document that is not a license, or is over {MAX_DOCUMENT_BYTES} bytes, is "
            "refused with `license_malformed`."
        },
    )


def state_view(state: service.LicenseState) -> dict[str, Any]:
    """The body of :class:`LicenseStateSchema`."""
    judgement = state.judgement
    license = judgement.license
    installed = None
    if license is not None and state.installation is not None:
        installed = {
            "id": license.id,
            "licensee": license.licensee,
            "edition": license.edition.value,
            "limits": license.limits.as_dict(),
            "issued_at": format_instant(license.issued_at),
            "expires_at": format_instant(license.expires_at),
            "grace_ends_at": format_instant(judgement.grace_ends_at or license.expires_at),
            "key_id": license.key_id,
            "installed_at": state.installation.installed_at,
            "installed_by": state.installation.installed_by,
        }
    reports = state.reports
    return {
        "status": judgement.status.value,
        "edition": judgement.edition.value,
        "licensed": judgement.licensed,
        "limits": judgement.limits.as_dict(),
        "usage": state.usage.as_dict(),
        "reasons": list(judgement.reasons),
        "judged_at": format_instant(judgement.judged_at),
        "license": installed,
        "watermark": {
            "instant": format_instant(state.watermark.instant) if state.watermark.instant else None,
            "integrity": state.watermark.integrity.value,
            "detail": state.watermark.detail,
        },
        "build": {
            "state": state.build.state.value,
            "manifest_path": state.build.path,
            "detail": state.build.detail,
            "files": list(state.build.files),
        },
        "reporting": {
            "last_attempt_at": reports.last_attempt_at,
            "last_success_at": reports.last_success_at,
            "last_outcome": reports.last_outcome,
            "last_error": reports.last_error,
            "consecutive_failures": reports.consecutive_failures,
            "next_due_at": reports.next_due_at,
            "sent": reports.sent,
        },
        "clock": state.clock.as_details(),
        "instance_id": state.instance_id,
    }


#: What every license operation answers.
_STATE = {200: ResponseSpec("The license state.", LicenseStateSchema)}


@ROUTES.route(
    "GET",
    "/api/v1/license",
    summary="Show the license state",
    description=(
        "The edition and limits in force, usage against them, the installed license with "
        "its expiry and grace period, the expiry watermark, the build's integrity and the "
        "last activation report. Without a license the free edition's limits apply."
    ),
    tags=("license",),
    permission="license:read",
    responses=_STATE,
)
async def get_license(call: Call) -> dict[str, Any]:
    """``GET /api/v1/license``."""
    return state_view(await service.state_of(call.runtime))


@ROUTES.route(
    "PUT",
    "/api/v1/license",
    summary="Install a license",
    description=(
        "Installs the vendor's signed license document, replacing any installed one. A "
        "refused document is 422 with its own code: `license_malformed`, "
        "`license_modified` (changed after signing), `license_other_product`, "
        "`license_forged` (not signed by a vendor key of this build) or `license_expired`."
    ),
    tags=("license",),
    permission="license:manage",
    body=LicenseInstallSchema,
    responses=_STATE,
)
async def install_license(call: Call) -> dict[str, Any]:
    """``PUT /api/v1/license``."""
    return state_view(await service.install(call.runtime, call.body["document"], call.actor))


@ROUTES.route(
    "DELETE",
    "/api/v1/license",
    summary="Remove the license",
    description=(
        "The free edition's limits apply from now on; nothing that exists is deleted, "
        "powered off or disconnected. Without an installed license it changes nothing."
    ),
    tags=("license",),
    permission="license:manage",
    responses=_STATE,
)
async def remove_license(call: Call) -> dict[str, Any]:
    """``DELETE /api/v1/license``."""
    return state_view(await service.remove(call.runtime, call.actor))
