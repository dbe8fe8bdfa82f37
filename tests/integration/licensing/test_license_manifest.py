"""The signed build manifest: verified, modified (naming the files), invalid, unsigned."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deskpool.actor import Actor
from deskpool.cli import main
from deskpool.licensing import keys, service
from deskpool.licensing.document import sign_document
from deskpool.licensing.manifest import (
    build_manifest,
    default_manifest_path,
    deskpool_distributions,
    installed_files,
    manifest_required,
    verify_manifest,
)
from deskpool.licensing.model import FREE_LIMITS, BuildIntegrity, LicenseStatus
from deskpool.testing.licensing import TestVendor
from deskpool.testing.pytest_plugin import opened_runtime


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An installed distribution ``deskpool-fake`` (as a wheel installs one) in a folder."""
    root = tmp_path / "site"
    files = {
        "fakepkg/__init__.py": '"""Fake."""\n',
        "fakepkg/data.sql": "SELECT 1;\n",
        "deskpool_fake-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: deskpool-fake\n"
        "Version: 1.0\n",
        "deskpool_fake-1.0.dist-info/top_level.txt": "fakepkg\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    record = [
        f"{name},sha256={hashlib.sha256(text.encode()).hexdigest()},{len(text)}"
        for name, text in files.items()
    ]
    (root / "deskpool_fake-1.0.dist-info/RECORD").write_text(
        "\n".join([*record, "deskpool_fake-1.0.dist-info/RECORD,,"]) + "\n"
    )
    (root / "fakepkg/__pycache__").mkdir()
    (root / "fakepkg/__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    return root


def vendor_keys(vendor: TestVendor) -> dict[str, Any]:
    """The test vendor's key, as a build would carry it.

    For a context that requires a manifest: keys added in the process do not count there.
    """
    return {vendor.key_id: vendor.private_key.public_key()}


def files_of(site: Path) -> Any:
    return lambda: installed_files(deskpool_distributions([str(site)]))


def sign(site: Path, key: Ed25519PrivateKey, at: Path) -> Path:
    at.write_text(build_manifest(key, files_of(site)(), datetime.now(UTC)))
    return at


def test_states_of_a_manifest(site: Path, tmp_path: Path, license_vendor: TestVendor) -> None:
    trusted = keys.trusted_keys()
    manifest = sign(site, license_vendor.private_key, tmp_path / "deskpool.manifest")
    fresh = verify_manifest(manifest, trusted, files_of(site))
    assert fresh.state is BuildIntegrity.VERIFIED, fresh.detail
    # The package's two files and two of its metadata; bytecode and RECORD aside.
    assert "All 4 files" in fresh.detail
    (site / "fakepkg/data.sql").write_text("DROP TABLE licenses;\n")
    modified = verify_manifest(manifest, trusted, files_of(site))
    assert modified.state is BuildIntegrity.MODIFIED
    assert modified.changed == ("deskpool-fake:fakepkg/data.sql",)
    assert "deskpool-fake:fakepkg/data.sql" in modified.detail
    other = sign(site, Ed25519PrivateKey.generate(), tmp_path / "other.manifest")
    assert verify_manifest(other, trusted, files_of(site)).state is BuildIntegrity.INVALID
    (tmp_path / "garbage.manifest").write_text("{")
    garbage = verify_manifest(tmp_path / "garbage.manifest", trusted, files_of(site))
    assert garbage.state is BuildIntegrity.INVALID
    none = verify_manifest(tmp_path / "absent.manifest", trusted, files_of(site))
    assert none.state is BuildIntegrity.UNSIGNED
    assert "not an error" in none.detail


def test_the_default_path_is_named_after_the_executable() -> None:
    path = default_manifest_path()
    assert path.name == "deskpool.manifest"


def test_cli_builds_and_verifies_the_installed_build(
    tmp_path: Path, license_vendor: TestVendor, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "vendor.pem"
    key.write_bytes(license_vendor.pem())
    manifest = tmp_path / "deskpool.manifest"
    assert main(["license", "manifest", "build", "--key", str(key), "--output", str(manifest)]) == 0
    assert main(["license", "manifest", "verify", "--path", str(manifest)]) == 0
    assert "verified" in capsys.readouterr().out
    assert main(["license", "manifest", "verify", "--path", str(tmp_path / "none")]) == 0
    assert "unsigned" in capsys.readouterr().out


async def test_an_invalid_build_runs_with_free_limits_and_says_why(
    licensing_environ: dict[str, str],
    db: Any,
    tmp_path: Path,
    license_vendor: TestVendor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    manifest = tmp_path / "deskpool.manifest"
    other = Ed25519PrivateKey.generate()
    manifest.write_text(build_manifest(other, installed_files([]), datetime.now(UTC)))
    environ = {**licensing_environ, "LICENSE_MANIFEST_PATH": str(manifest)}
    with caplog.at_level(logging.WARNING, logger="deskpool.licensing.context"):
        async with opened_runtime(environ) as runtime:
            runtime.licensing.trusted = lambda: vendor_keys(license_vendor)
            async with runtime.db.acquire() as connection:
                state = await service.install_license(
                    connection,
                    runtime.licensing,
                    license_vendor.issue(),
                    Actor.system("test:manifest"),
                )
            assert state.build.state is BuildIntegrity.INVALID
            assert state.judgement.status is LicenseStatus.VALID
            assert state.judgement.limits == FREE_LIMITS
            assert any("manifest is invalid" in reason for reason in state.judgement.reasons)
            value = runtime.metrics.get_sample_value(
                "deskpool_build_integrity", {"state": "invalid"}
            )
            assert value == 1
    assert any("build integrity: invalid" in record.getMessage() for record in caplog.records)


def test_a_required_manifest_that_is_missing_is_modified(
    site: Path, tmp_path: Path, license_vendor: TestVendor
) -> None:
    absent = tmp_path / "absent.manifest"
    why = manifest_required(str(absent))
    assert why is not None
    missing = verify_manifest(absent, keys.trusted_keys(""), files_of(site), why)
    assert missing.state is BuildIntegrity.MODIFIED
    assert missing.missing == (str(absent),)
    assert "LICENSE_MANIFEST_PATH" in missing.detail


def test_the_manifest_covers_the_modules_that_decide_what_is_trusted(
    tmp_path: Path, license_vendor: TestVendor
) -> None:
    installed = installed_files(deskpool_distributions())
    for module in ("keys.py", "manifest.py", "model.py", "service.py"):
        assert f"deskpool:deskpool/licensing/{module}" in installed.files


async def test_a_configured_manifest_that_is_missing_means_free_limits(
    licensing_environ: dict[str, str], db: Any, tmp_path: Path, license_vendor: TestVendor
) -> None:
    environ = {**licensing_environ, "LICENSE_MANIFEST_PATH": str(tmp_path / "gone.manifest")}
    async with opened_runtime(environ) as runtime:
        assert license_vendor.key_id not in runtime.licensing.trusted()
        runtime.licensing.trusted = lambda: vendor_keys(license_vendor)
        async with runtime.db.acquire() as connection:
            state = await service.install_license(
                connection, runtime.licensing, license_vendor.issue(), Actor.system("test")
            )
    assert state.build.state is BuildIntegrity.MODIFIED
    assert "is missing, though LICENSE_MANIFEST_PATH names it" in state.build.detail
    assert state.judgement.status is LicenseStatus.VALID
    assert state.judgement.limits == FREE_LIMITS


SITECUSTOMIZE = '''
"""Slipped in from the environment: trusts a key of one's own in every Python process."""
import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from deskpool.licensing import keys

keys.trust_in_process(Ed25519PublicKey.from_public_bytes(base64.b64decode("{key}")))
'''


def deskpool_command(at: Path) -> Path:
    """The ``deskpool`` command installed in the folder ``at`` (its manifest's default place)."""
    at.mkdir(parents=True, exist_ok=True)
    command = at / "deskpool"
    shutil.copy2(shutil.which("deskpool") or Path(sys.executable).parent / "deskpool", command)
    return command


def test_a_sitecustomize_cannot_make_a_production_deskpool_trust_its_key(
    db: Any, licensing_environ: dict[str, str], tmp_path: Path, license_vendor: TestVendor
) -> None:
    own = Ed25519PrivateKey.generate()
    raw = own.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    slipped = tmp_path / "slipped"
    slipped.mkdir()
    (slipped / "sitecustomize.py").write_text(
        SITECUSTOMIZE.format(key=base64.b64encode(raw).decode())
    )
    forged = tmp_path / "own.json"
    forged.write_text(sign_document(own, license_vendor.claims(edition="enterprise")))
    environ = {
        **os.environ,
        **licensing_environ,
        "PYTHONPATH": str(slipped),
        "LICENSE_MANIFEST_PATH": "",
    }

    def install(command: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(command), "license", "install", str(forged)],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # A production installation: the image holds a signed manifest beside the command.
    production = deskpool_command(tmp_path / "image" / "bin")
    vendor_key = tmp_path / "vendor.pem"
    vendor_key.write_bytes(license_vendor.pem())
    built = subprocess.run(
        [str(production), "license", "manifest", "build", "--key", str(vendor_key)],
        env={**os.environ, "LICENSE_MANIFEST_PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert (production.parent / "deskpool.manifest").exists()
    refused = install(production)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "license_forged" in refused.stderr
    assert "Traceback" not in refused.stderr
    # The same hook in a development installation (no manifest required) is what tests use:
    # it does work there, so the refusal above is the production build's doing.
    development = deskpool_command(tmp_path / "checkout" / "bin")
    accepted = install(development)
    assert accepted.returncode == 0, accepted.stderr
    assert "edition:    enterprise" in accepted.stdout
