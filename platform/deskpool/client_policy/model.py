"""A pool's client policy, with no I/O: what may cross between a desktop and the browser.

- :class:`ClientPolicy`: the clipboard per direction (``off`` or ``text``, with a byte limit
  each), file transfer (upload, download, a per-file limit), audio out, the microphone,
  printing and the watermark. :data:`DEFAULT_CLIENT_POLICY` is what deskpool did before the
  policy existed: text both ways up to guacd 1.6.0's clipboard buffer (256 KiB), no file
  transfer, audio out, no microphone, no printing, no watermark.
- :func:`offered` narrows a policy to what a desktop's protocol supports (VNC has no printing
  and no microphone; its files go through SFTP and its sound through PulseAudio, only when the
  desktop's connection parameters provide them): nothing the guest does not support is offered.
- :func:`guacd_arguments` are the connection arguments guacd 1.6 is given for the policy
  (``disable-copy``, ``disable-paste``, ``enable-drive``, ``disable-upload``...).
- :class:`Transfer` is one clipboard transfer, file, print job or refused stream as the gateway
  saw it (sizes and a SHA-256, never the content), audited on the session.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from deskpool.errors import FieldError
from deskpool.unset import UNSET, Unset

__all__ = [
    "DEFAULT_CLIENT_POLICY",
    "GUACD_CLIPBOARD_BYTES",
    "MAX_CLIPBOARD_BYTES",
    "MAX_FILE_BYTES",
    "WATERMARK_FIELDS",
    "ClientPolicy",
    "ClientPolicyChange",
    "Clipboard",
    "ClipboardMode",
    "Direction",
    "FileTransfer",
    "Transfer",
    "TransferKind",
    "Watermark",
    "guacd_arguments",
    "offered",
    "render_watermark",
    "validate_client_policy",
]

#: guacd 1.6.0's clipboard buffer (``GUAC_COMMON_CLIPBOARD_MAX_LENGTH``): the default limit.
GUACD_CLIPBOARD_BYTES = 262144
#: The largest clipboard limit a policy accepts (50 MiB, guacd's own ``clipboard-buffer-size``
#: ceiling in its releases after 1.6.0).
MAX_CLIPBOARD_BYTES = 50 * 1024 * 1024
#: The largest per-file limit a policy accepts (100 GiB).
MAX_FILE_BYTES = 100 * 1024**3
#: Where guacd keeps the drive of an RDP session that transfers files (on guacd's host).
DRIVE_ROOT = "/var/lib/guacd/drives"
#: What a watermark's text may name, as ``{name}``.
WATERMARK_FIELDS = ("name", "email", "session_id", "client_address", "time")
#: The longest watermark text template.
MAX_WATERMARK_TEXT = 200


class ClipboardMode(StrEnum):
    """What the clipboard carries in one direction."""

    OFF = "off"
    TEXT = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class Clipboard:
    """The clipboard in one direction: ``off``, or text up to ``max_bytes`` (UTF-8)."""

    mode: ClipboardMode = ClipboardMode.TEXT
    max_bytes: int = GUACD_CLIPBOARD_BYTES

    @property
    def allowed(self) -> bool:
        """Whether anything crosses in this direction."""
        return self.mode is not ClipboardMode.OFF


@dataclass(frozen=True, slots=True, kw_only=True)
class FileTransfer:
    """Files from the browser to the desktop (upload) and back (download).

    Each file is at most ``max_file_bytes``.
    """

    upload: bool = False
    download: bool = False
    max_file_bytes: int = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Watermark:
    """Text the gateway draws over the desktop, tiled.

    :ivar text: a template naming :data:`WATERMARK_FIELDS` as ``{name}``.
    :ivar opacity: from 0.05 (faint) to 1.
    :ivar angle: degrees, from -90 to 90 (negative rises to the right).
    :ivar spacing: pixels between two copies of the text, from 40 to 2000.
    """

    enabled: bool = False
    text: str = "{name} · {session_id} · {client_address} · {time}"
    opacity: float = 0.15
    angle: int = -30
    spacing: int = 240


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientPolicy:
    """What a pool's sessions may carry between the desktop and the browser."""

    clipboard_to_desktop: Clipboard = field(default_factory=Clipboard)
    clipboard_to_browser: Clipboard = field(default_factory=Clipboard)
    files: FileTransfer = field(default_factory=FileTransfer)
    audio_out: bool = True
    microphone: bool = False
    printing: bool = False
    watermark: Watermark = field(default_factory=Watermark)

    def as_json(self) -> dict[str, Any]:
        """The policy as the API shows it."""
        return {
            "clipboard": {
                "to_desktop": _clipboard_json(self.clipboard_to_desktop),
                "to_browser": _clipboard_json(self.clipboard_to_browser),
            },
            "file_transfer": {
                "upload": self.files.upload,
                "download": self.files.download,
                "max_file_bytes": self.files.max_file_bytes,
            },
            "audio": {"output": self.audio_out, "microphone": self.microphone},
            "printing": self.printing,
            "watermark": {
                "enabled": self.watermark.enabled,
                "text": self.watermark.text,
                "opacity": self.watermark.opacity,
                "angle": self.watermark.angle,
                "spacing": self.watermark.spacing,
            },
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> ClientPolicy:
        """The policy of ``document`` (what :meth:`as_json` wrote; members left out default)."""
        flat = _flatten(DEFAULT_CLIENT_POLICY.as_json())
        flat.update(_flatten(document or {}))
        return _from_flat(flat)


def _clipboard_json(clipboard: Clipboard) -> dict[str, Any]:
    return {"mode": str(clipboard.mode), "max_bytes": clipboard.max_bytes}


#: The policy of a pool that never set one: deskpool's behaviour before client policies.
DEFAULT_CLIENT_POLICY = ClientPolicy()

#: Every member of the policy's JSON by its path, joined with ``.``.
_PATHS = (
    "clipboard.to_desktop.mode",
    "clipboard.to_desktop.max_bytes",
    "clipboard.to_browser.mode",
    "clipboard.to_browser.max_bytes",
    "file_transfer.upload",
    "file_transfer.download",
    "file_transfer.max_file_bytes",
    "audio.output",
    "audio.microphone",
    "printing",
    "watermark.enabled",
    "watermark.text",
    "watermark.opacity",
    "watermark.angle",
    "watermark.spacing",
)


def _flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The members of a (partial) policy document by path; unknown members are left out."""
    flat: dict[str, Any] = {}
    for name, value in document.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{path}."))
        elif path in _PATHS:
            flat[path] = value
    return flat


def _from_flat(flat: Mapping[str, Any]) -> ClientPolicy:
    def clipboard(direction: str) -> Clipboard:
        return Clipboard(
            mode=ClipboardMode(flat[f"clipboard.{direction}.mode"]),
            max_bytes=int(flat[f"clipboard.{direction}.max_bytes"]),
        )

    return ClientPolicy(
        clipboard_to_desktop=clipboard("to_desktop"),
        clipboard_to_browser=clipboard("to_browser"),
        files=FileTransfer(
            upload=bool(flat["file_transfer.upload"]),
            download=bool(flat["file_transfer.download"]),
            max_file_bytes=int(flat["file_transfer.max_file_bytes"]),
        ),
        audio_out=bool(flat["audio.output"]),
        microphone=bool(flat["audio.microphone"]),
        printing=bool(flat["printing"]),
        watermark=Watermark(
            enabled=bool(flat["watermark.enabled"]),
            text=str(flat["watermark.text"]),
            opacity=float(flat["watermark.opacity"]),
            angle=int(flat["watermark.angle"]),
            spacing=int(flat["watermark.spacing"]),
        ),
    )


@dataclass(frozen=True, slots=True)
class ClientPolicyChange:
    """Members of a client policy to set, as a partial policy document.

    It is the API's input, already validated at the edge; members left out stay as they are.
    """

    members: Mapping[str, Any] | Unset = UNSET

    def applied_to(self, base: ClientPolicy) -> ClientPolicy:
        """``base`` with the members this change sets."""
        if isinstance(self.members, Unset):
            return base
        flat = _flatten(base.as_json())
        flat.update(_flatten(self.members))
        return _from_flat(flat)


def validate_client_policy(
    policy: ClientPolicy, prefix: str = "/session_policy/client"
) -> list[FieldError]:
    """The invalid members of ``policy`` as JSON pointers under ``prefix``."""
    errors: list[FieldError] = []
    for direction, clipboard in (
        ("to_desktop", policy.clipboard_to_desktop),
        ("to_browser", policy.clipboard_to_browser),
    ):
        if not 1 <= clipboard.max_bytes <= MAX_CLIPBOARD_BYTES:
            errors.append(
                FieldError(
                    f"{prefix}/clipboard/{direction}/max_bytes",
                    f"must be between 1 and {MAX_CLIPBOARD_BYTES}",
                )
            )
    if not 1 <= policy.files.max_file_bytes <= MAX_FILE_BYTES:
        errors.append(
            FieldError(
                f"{prefix}/file_transfer/max_file_bytes", f"must be between 1 and {MAX_FILE_BYTES}"
            )
        )
    mark = policy.watermark
    problem = watermark_text_problem(mark.text)
    if problem is not None:
        errors.append(FieldError(f"{prefix}/watermark/text", problem))
    if not 0.05 <= mark.opacity <= 1.0:
        errors.append(FieldError(f"{prefix}/watermark/opacity", "must be between 0.05 and 1"))
    if not -90 <= mark.angle <= 90:
        errors.append(FieldError(f"{prefix}/watermark/angle", "must be between -90 and 90"))
    if not 40 <= mark.spacing <= 2000:
        errors.append(FieldError(f"{prefix}/watermark/spacing", "must be between 40 and 2000"))
    return errors


def watermark_text_problem(text: str) -> str | None:
    """Why ``text`` is no watermark template (``None``: it is one)."""
    if not text.strip() or len(text) > MAX_WATERMARK_TEXT:
        return f"must hold 1 to {MAX_WATERMARK_TEXT} characters"
    if not text.isprintable():
        return "must be printable text on one line"
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError:
        return "has an unbalanced '{' or '}' (write '{{' for a brace)"
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in WATERMARK_FIELDS or spec or conversion:
            return f"may name only {', '.join('{' + f + '}' for f in WATERMARK_FIELDS)}"
    return None


def render_watermark(template: str, values: Mapping[str, str]) -> str:
    """The watermark's text: ``template`` with each ``{field}`` replaced by its value.

    A field ``values`` lacks is rendered empty.
    """
    out: list[str] = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            out.append(values.get(name, ""))
    return "".join(out)


# ------------------------------------------------------------------------------ protocols


def offered(policy: ClientPolicy, protocol: str, parameters: Mapping[str, str]) -> ClientPolicy:
    """``policy`` narrowed to what a desktop reached with ``protocol`` supports.

    RDP supports everything (files through guacd's drive redirection). VNC has no microphone
    and no printing; its files go through SFTP and its sound through PulseAudio, so they are
    offered only when the desktop's connection ``parameters`` enable them (``enable-sftp``,
    ``enable-audio``).
    """
    if protocol == "rdp":
        return policy
    sftp = parameters.get("enable-sftp") == "true"
    files = policy.files if sftp else replace(policy.files, upload=False, download=False)
    return replace(
        policy,
        files=files,
        audio_out=policy.audio_out and parameters.get("enable-audio") == "true",
        microphone=False,
        printing=False,
    )


def _flag(value: bool) -> str:
    return "true" if value else "false"


def guacd_arguments(policy: ClientPolicy, protocol: str, session_id: str) -> dict[str, str]:
    """The connection arguments guacd 1.6 is given for an :func:`offered` ``policy``.

    They override the desktop's own parameters (the handshake answers only the names guacd
    asks for, so an argument a protocol lacks is never sent).
    """
    files = policy.files
    args = {
        "disable-copy": _flag(not policy.clipboard_to_browser.allowed),
        "disable-paste": _flag(not policy.clipboard_to_desktop.allowed),
        # guacd's releases after 1.6.0 size their clipboard buffer from this (1.6.0 keeps 256 KiB).
        "clipboard-buffer-size": str(
            max(policy.clipboard_to_desktop.max_bytes, policy.clipboard_to_browser.max_bytes)
        ),
    }
    if protocol == "rdp":
        drive = files.upload or files.download
        args.update(
            {
                "enable-drive": _flag(drive),
                "disable-upload": _flag(not files.upload),
                "disable-download": _flag(not files.download),
                "disable-audio": _flag(not policy.audio_out),
                "enable-audio-input": _flag(policy.microphone),
                "enable-printing": _flag(policy.printing),
            }
        )
        if drive:
            args.update(
                {
                    "drive-name": "deskpool",
                    "drive-path": f"{DRIVE_ROOT}/{session_id}",
                    "create-drive-path": "true",
                }
            )
    else:
        if not (files.upload or files.download):
            args["enable-sftp"] = "false"
        args["sftp-disable-upload"] = _flag(not files.upload)
        args["sftp-disable-download"] = _flag(not files.download)
        if not policy.audio_out:
            args["enable-audio"] = "false"
    return args


# ------------------------------------------------------------------------------ transfers


class TransferKind(StrEnum):
    """What crossed (or tried to)."""

    CLIPBOARD = "clipboard"
    FILE = "file"
    PRINT = "print"
    MICROPHONE = "microphone"
    AUDIO = "audio"


class Direction(StrEnum):
    """Which way: from the browser to the desktop, or from the desktop to the browser."""

    TO_DESKTOP = "to_desktop"
    TO_BROWSER = "to_browser"


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    """One transfer as the gateway saw it: never its content.

    :ivar size: bytes the sender sent (decoded from base64), all of them, kept or not.
    :ivar delivered: bytes that reached the other side.
    :ivar sha256: hex SHA-256 of the ``size`` bytes sent.
    :ivar outcome: ``allowed``, ``cut`` (delivered up to the limit) or ``refused``.
    :ivar reason: why not all of it was delivered (``clipboard_off``, ``over_limit``...).
    """

    kind: TransferKind
    direction: Direction
    size: int
    delivered: int
    sha256: str
    outcome: str
    reason: str | None = None
    name: str | None = None
    mimetype: str | None = None
    at: datetime | None = None

    def as_details(self) -> dict[str, Any]:
        """The transfer as its audit event's details."""
        return {
            "kind": str(self.kind),
            "direction": str(self.direction),
            "size": self.size,
            "delivered": self.delivered,
            "sha256": self.sha256,
            "outcome": self.outcome,
            "reason": self.reason,
            "name": self.name,
            "mimetype": self.mimetype,
        }


def changed_members(before: ClientPolicy, after: ClientPolicy) -> dict[str, list[Any]]:
    """The members that differ, by path (``watermark.enabled``): ``[before, after]`` each."""
    old, new = _flatten(before.as_json()), _flatten(after.as_json())
    return {path: [old[path], new[path]] for path in _PATHS if old[path] != new[path]}
