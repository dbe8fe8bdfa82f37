"""Schemas of a pool's client policy: what may cross between its desktops and the browser.

Read and written inside the pool's session policy (``session_policy.client``); a change names
only the members it sets, at any depth. The rules are :mod:`deskpool.client_policy.model`'s;
what the gateway does with each member is in docs/operators/client-policy.md.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from deskpool.client_policy.model import (
    MAX_CLIPBOARD_BYTES,
    MAX_FILE_BYTES,
    MAX_WATERMARK_TEXT,
    WATERMARK_FIELDS,
    ClipboardMode,
    Direction,
    TransferKind,
    watermark_text_problem,
)

__all__ = ["ClientPolicyInputSchema", "ClientPolicySchema", "TransferListSchema"]

_MODES = [mode.value for mode in ClipboardMode]


def _watermark_text(text: str) -> None:
    problem = watermark_text_problem(text)
    if problem is not None:
        raise ValidationError(problem)


def _schemas(required: bool, suffix: str) -> type[Schema]:
    """The client policy's schema: every member ``required`` (shown) or none (a change)."""

    def clipboard(name: str, direction: str) -> type[Schema]:
        return Schema.from_dict(
            {
                "mode": fields.String(
                    required=required,
                    validate=validate.OneOf(_MODES),
                    metadata={
                        "description": (
                            f"What the clipboard carries {direction}: `off` (nothing) or `text`."
                        )
                    },
                ),
                "max_bytes": fields.Integer(
                    required=required,
                    validate=validate.Range(min=1, max=MAX_CLIPBOARD_BYTES),
                    metadata={
                        "description": (
                            "Most bytes (UTF-8) of one clipboard transfer; the gateway cuts "
                            "the rest. guacd 1.6.0 itself keeps at most 262144."
                        )
                    },
                ),
            },
            name=f"{name}{suffix}",
        )

    clipboards = Schema.from_dict(
        {
            "to_desktop": fields.Nested(
                clipboard("ClipboardToDesktop", "to the desktop (paste)"), required=required
            ),
            "to_browser": fields.Nested(
                clipboard("ClipboardToBrowser", "to the browser (copy out)"), required=required
            ),
        },
        name=f"ClientClipboard{suffix}",
    )
    files = Schema.from_dict(
        {
            "upload": fields.Boolean(
                required=required,
                metadata={"description": "Files may go from the browser to the desktop."},
            ),
            "download": fields.Boolean(
                required=required,
                metadata={"description": "Files may go from the desktop to the browser."},
            ),
            "max_file_bytes": fields.Integer(
                required=required,
                validate=validate.Range(min=1, max=MAX_FILE_BYTES),
                metadata={"description": "Most bytes of one file, either way."},
            ),
        },
        name=f"ClientFileTransfer{suffix}",
    )
    audio = Schema.from_dict(
        {
            "output": fields.Boolean(
                required=required, metadata={"description": "The desktop's sound is played."}
            ),
            "microphone": fields.Boolean(
                required=required,
                metadata={"description": "The browser's microphone reaches the desktop (RDP)."},
            ),
        },
        name=f"ClientAudio{suffix}",
    )
    fields_text = ", ".join("`{" + name + "}`" for name in WATERMARK_FIELDS)
    watermark = Schema.from_dict(
        {
            "enabled": fields.Boolean(
                required=required,
                metadata={"description": "The gateway draws the text over the desktop, tiled."},
            ),
            "text": fields.String(
                required=required,
                validate=[validate.Length(min=1, max=MAX_WATERMARK_TEXT), _watermark_text],
                metadata={"description": f"The text; it may name {fields_text}."},
            ),
            "opacity": fields.Float(
                required=required,
                validate=validate.Range(min=0.05, max=1.0),
                metadata={"description": "From 0.05 (faint) to 1."},
            ),
            "angle": fields.Integer(
                required=required,
                validate=validate.Range(min=-90, max=90),
                metadata={"description": "Degrees; negative rises to the right."},
            ),
            "spacing": fields.Integer(
                required=required,
                validate=validate.Range(min=40, max=2000),
                metadata={"description": "Pixels between two copies of the text."},
            ),
        },
        name=f"ClientWatermark{suffix}",
    )
    members: dict[str, Any] = {
        "clipboard": fields.Nested(clipboards, required=required),
        "file_transfer": fields.Nested(files, required=required),
        "audio": fields.Nested(audio, required=required),
        "printing": fields.Boolean(
            required=required,
            metadata={"description": "The desktop may print: the browser gets a PDF (RDP)."},
        ),
        "watermark": fields.Nested(watermark, required=required),
    }
    return Schema.from_dict(members, name=f"ClientPolicy{suffix}")


#: A pool's client policy, as the API shows it.
ClientPolicySchema = _schemas(True, "")
#: Changes to a pool's client policy (members left out, at any depth, stay as they are).
ClientPolicyInputSchema = _schemas(False, "Input")


class TransferSchema(Schema):
    """One transfer the gateway saw on a session: never its content."""

    at = fields.AwareDateTime(required=True, metadata={"description": "When it ended."})
    kind = fields.String(
        required=True,
        validate=validate.OneOf([kind.value for kind in TransferKind]),
        metadata={
            "description": (
                "`clipboard`, `file`, `print` (a print job's PDF), `microphone` or `audio` "
                "(sound streams are listed only when refused)."
            )
        },
    )
    direction = fields.String(
        required=True,
        validate=validate.OneOf([direction.value for direction in Direction]),
        metadata={"description": "`to_desktop` (from the browser) or `to_browser`."},
    )
    size = fields.Integer(
        required=True, metadata={"description": "Bytes the sender sent, kept or not."}
    )
    delivered = fields.Integer(
        required=True, metadata={"description": "Bytes that reached the other side."}
    )
    sha256 = fields.String(
        required=True, metadata={"description": "Hex SHA-256 of the bytes the sender sent."}
    )
    outcome = fields.String(
        required=True,
        validate=validate.OneOf(["allowed", "cut", "refused"]),
        metadata={"description": "`allowed`, `cut` (delivered up to the limit) or `refused`."},
    )
    reason = fields.String(
        required=True,
        allow_none=True,
        metadata={
            "description": (
                "Why not all of it crossed: `clipboard_off`, `not_text`, `upload_off`, "
                "`download_off`, `printing_off`, `microphone_off`, `audio_off`, `over_limit`."
            )
        },
    )
    name = fields.String(
        required=True, allow_none=True, metadata={"description": "The file's name or path."}
    )
    mimetype = fields.String(required=True, allow_none=True)


class TransferListSchema(Schema):
    """A session's transfers, oldest first."""

    items = fields.List(fields.Nested(TransferSchema), required=True)
