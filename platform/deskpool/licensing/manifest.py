"""The signed build manifest: the SHA-256 of every file of the installed deskpool distributions.

A release build writes it with ``deskpool license manifest build --key VENDOR_KEY.pem``
(docs/release.md); every process verifies it at startup (:func:`verify_manifest`) and says one
of:

- ``verified``: every file matches and the signature is a vendor key's;
- ``modified``: the signature is good but files differ (each named: changed, missing, added);
- ``unsigned``: there is no manifest, and none is required (a development install: not an
  error). A manifest is required when ``LICENSE_MANIFEST_PATH`` names one, or when there is one
  at the default path (the image has one) though ``LICENSE_MANIFEST_PATH`` points elsewhere;
  a required manifest that is missing is ``modified`` (:func:`manifest_required`);
- ``invalid``: the manifest cannot be read, or is not signed by a vendor key of this build.

A modified or invalid build keeps running, with the free edition's limits
(:func:`deskpool.licensing.model.judge`). The manifest is at ``LICENSE_MANIFEST_PATH``, by
default a file named after the ``deskpool`` executable with the suffix ``.manifest``.

The files of a distribution are those its installer recorded (``RECORD``), compiled bytecode
and installer bookkeeping aside; for an editable (development) install, the files of its
top-level packages where they live. A distribution is "deskpool's" when its name starts with
``deskpool`` (the platform, its first-party plugins, the drivers shipped with it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.metadata
import importlib.util
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from deskpool.licensing.document import canonical, key_fingerprint
from deskpool.licensing.model import BuildIntegrity, format_instant

MANIFEST_FORMAT = "deskpool-manifest/1"
MANIFEST_LABEL = b"deskpool-manifest/1\n"
MANIFEST_SUFFIX = ".manifest"

#: Files an installer writes about the installation itself, which differ between installs.
_VOLATILE = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


@dataclass(frozen=True)
class ManifestCheck:
    """The verdict on the installed files."""

    state: BuildIntegrity
    path: str
    detail: str
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    added: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """Every file that differs, as ``changed: name`` (``missing:``, ``added:``)."""
        return (
            tuple(f"changed: {name}" for name in self.changed)
            + tuple(f"missing: {name}" for name in self.missing)
            + tuple(f"added: {name}" for name in self.added)
        )


@dataclass(frozen=True)
class InstalledFiles:
    """The files of some distributions: ``{"dist:relative/path": path}`` and their versions."""

    files: Mapping[str, Path]
    versions: Mapping[str, str] = field(default_factory=dict)

    def digests(self) -> dict[str, str]:
        """SHA-256 of every file, by name."""
        return {name: _sha256(path) for name, path in sorted(self.files.items())}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- where


def default_manifest_path() -> Path:
    """``<the deskpool executable>.manifest``.

    The executable is the running command when it is ``deskpool``; otherwise (a test runner,
    ``python -m``) the ``deskpool`` script beside the Python interpreter.
    """
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    executable = argv0 if argv0.name == "deskpool" else Path(sys.executable).parent / "deskpool"
    return executable.absolute().with_name(executable.name + MANIFEST_SUFFIX)


def manifest_path(configured: str) -> Path:
    """``LICENSE_MANIFEST_PATH``, or the default when it is empty."""
    return Path(configured) if configured.strip() else default_manifest_path()


def manifest_required(configured: str) -> str | None:
    """Why a signed manifest must exist (``None``: it need not, a development install).

    :param configured: ``LICENSE_MANIFEST_PATH``.
    """
    if configured.strip():
        return f"LICENSE_MANIFEST_PATH names it ({configured.strip()})"
    default = default_manifest_path()
    if default.exists():
        return f"the installation has one at {default}"
    return None


# --------------------------------------------------------------------------- what


def _name(dist: importlib.metadata.Distribution) -> str:
    return str(dist.metadata["Name"] or "").lower().replace("_", "-")


def _installed_by_installer(dist: importlib.metadata.Distribution) -> bool:
    return dist.read_text("RECORD") is not None or dist.read_text("direct_url.json") is not None


def deskpool_distributions(
    search_path: list[str] | None = None,
) -> list[importlib.metadata.Distribution]:
    """The installed distributions whose name starts with ``deskpool`` (one per name)."""
    chosen: dict[str, importlib.metadata.Distribution] = {}
    found = (
        importlib.metadata.distributions(path=search_path)
        if search_path
        else importlib.metadata.distributions()
    )
    for dist in found:
        name = _name(dist)
        if not name.startswith("deskpool"):
            continue
        if name not in chosen or (
            _installed_by_installer(dist) and not _installed_by_installer(chosen[name])
        ):
            chosen[name] = dist
    return [chosen[name] for name in sorted(chosen)]


def _editable(dist: importlib.metadata.Distribution) -> bool:
    # pip's editable install says so in direct_url.json; an editable wheel installed as a file
    # (tox's `package = editable`) says only where the wheel was, but records the PEP 660
    # hook it installs (`__editable__.<name>.pth`, `__editable___<name>_finder.py`).
    if any(entry.name.startswith("__editable__") for entry in dist.files or ()):
        return True
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool(info.get("dir_info", {}).get("editable"))


def _package_files(name: str, top: str) -> dict[str, Path]:
    spec = importlib.util.find_spec(top)
    if spec is None:
        return {}
    roots = list(spec.submodule_search_locations or [])
    out: dict[str, Path] = {}
    if not roots and spec.origin:
        origin = Path(spec.origin)
        return {f"{name}:{origin.name}": origin}
    for root in map(Path, roots):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out[f"{name}:{top}/{path.relative_to(root).as_posix()}"] = path
    return out


def distribution_files(dist: importlib.metadata.Distribution) -> dict[str, Path]:
    """The files of one distribution, by ``name:relative/path``."""
    name = _name(dist)
    out: dict[str, Path] = {}
    for entry in dist.files or ():
        parts = entry.parts
        if (
            not parts
            or parts[0] == ".."
            or "__pycache__" in parts
            or entry.suffix == ".pyc"
            or entry.name in _VOLATILE
        ):
            continue
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            out[f"{name}:{entry.as_posix()}"] = path
    if _editable(dist):
        for top in (dist.read_text("top_level.txt") or "").split():
            out.update(_package_files(name, top))
    return out


def installed_files(distributions: Iterable[importlib.metadata.Distribution]) -> InstalledFiles:
    """The files and versions of ``distributions``."""
    files: dict[str, Path] = {}
    versions: dict[str, str] = {}
    for dist in distributions:
        files.update(distribution_files(dist))
        versions[_name(dist)] = dist.version
    return InstalledFiles(files, versions)


# --------------------------------------------------------------------------- build and verify


def build_manifest(
    private_key: Ed25519PrivateKey, installed: InstalledFiles, created_at: datetime
) -> str:
    """The signed manifest of ``installed`` (the release pipeline's step)."""
    body: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "created_at": format_instant(created_at),
        "distributions": dict(sorted(installed.versions.items())),
        "files": installed.digests(),
        "key_id": key_fingerprint(private_key.public_key()),
    }
    signature = private_key.sign(MANIFEST_LABEL + canonical(body))
    document = {**body, "signature": base64.b64encode(signature).decode("ascii")}
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def verify_manifest(
    path: Path,
    trusted: Mapping[str, Ed25519PublicKey],
    installed: Callable[[], InstalledFiles],
    required: str | None = None,
) -> ManifestCheck:
    """Check the manifest at ``path`` against the vendor keys ``trusted`` and the files.

    :param installed: lists the installed files (called only when there is a manifest).
    :param required: why the manifest must exist (:func:`manifest_required`); missing, it is
        then ``modified``, not ``unsigned``.
    """
    where = str(path)
    if not path.exists() and required is not None:
        return ManifestCheck(
            BuildIntegrity.MODIFIED,
            where,
            f"The signed build manifest {where} is missing, though {required}.",
            missing=(where,),
        )
    if not path.exists():
        return ManifestCheck(
            BuildIntegrity.UNSIGNED,
            where,
            f"No signed build manifest at {where}: a development install (not an error).",
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        body = {key: value for key, value in document.items() if key != "signature"}
        if document.get("format") != MANIFEST_FORMAT or not isinstance(body.get("files"), dict):
            raise ValueError("not a deskpool manifest")
        key = trusted.get(str(document.get("key_id")))
        if key is None:
            raise InvalidSignature
        key.verify(
            base64.b64decode(str(document["signature"]), validate=True),
            MANIFEST_LABEL + canonical(body),
        )
    except (OSError, ValueError, KeyError, AttributeError, binascii.Error):
        return ManifestCheck(BuildIntegrity.INVALID, where, f"The manifest {where} is unreadable.")
    except InvalidSignature:
        return ManifestCheck(
            BuildIntegrity.INVALID,
            where,
            f"The manifest {where} is not signed by a vendor key of this build.",
        )
    expected: dict[str, str] = body["files"]
    actual = installed().digests()
    changed = tuple(sorted(n for n in expected if n in actual and actual[n] != expected[n]))
    missing = tuple(sorted(n for n in expected if n not in actual))
    added = tuple(sorted(n for n in actual if n not in expected))
    if changed or missing or added:
        names = ", ".join((changed + missing + added)[:10])
        more = len(changed) + len(missing) + len(added) - 10
        return ManifestCheck(
            BuildIntegrity.MODIFIED,
            where,
            f"{len(changed)} changed, {len(missing)} missing and {len(added)} added file(s) "
            f"since the build was signed: {names}{f' and {more} more' if more > 0 else ''}.",
            changed,
            missing,
            added,
        )
    return ManifestCheck(
        BuildIntegrity.VERIFIED, where, f"All {len(expected)} files match the signed manifest."
    )
