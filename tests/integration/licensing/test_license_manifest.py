"""The signed build manifest: verified, modified (naming the files), invalid, unsigned."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deskpool.actor import Actor
from deskpool.cli import main
from deskpool.licensing import keys, service
from deskpool.licensing.manifest import (
    build_manifest,
    default_manifest_path,
    deskpool_distributions,
    installed_files,
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
