"""``deskpool license install|show|remove`` against the database, as an operator runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deskpool.cli import main
from deskpool.licensing.document import sign_document
from deskpool.testing.licensing import TestVendor


@pytest.fixture
def operator_environ(
    db: Any, licensing_environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's environment: the licensing database, reset, and its master key."""
    for name, value in licensing_environ.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("operator_environ")
def test_install_show_and_remove(
    license_vendor: TestVendor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = tmp_path / "forged.json"
    forged.write_text(sign_document(Ed25519PrivateKey.generate(), license_vendor.claims()))
    assert main(["license", "install", str(forged)]) == 1
    assert "license_forged" in capsys.readouterr().err
    good = tmp_path / "license.json"
    good.write_text(license_vendor.issue(licensee="CLI Test Org", limits={"pools": 3}))
    assert main(["license", "install", str(good)]) == 0
    out = capsys.readouterr().out
    assert "status:     valid" in out
    assert "pools:      0 of 3" in out
    assert "CLI Test Org" in out
    assert main(["license", "show"]) == 0
    assert "edition:    standard" in capsys.readouterr().out
    assert main(["license", "remove"]) == 0
    assert "status:     free" in capsys.readouterr().out


@pytest.mark.usefixtures("operator_environ")
def test_an_unreadable_file_or_document_is_one_line_and_a_failure(
    license_vendor: TestVendor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    files = {"missing": tmp_path / "missing.json", "binary": binary}
    for what, document in license_vendor.unreadable().items():
        files[what] = tmp_path / f"{what}.json"
        files[what].write_text(document)
    for what, path in files.items():
        assert main(["license", "install", str(path)]) == 1, what
        captured = capsys.readouterr()
        assert captured.out == "", what
        assert len(captured.err.splitlines()) == 1, (what, captured.err)
        assert "Traceback" not in captured.err
        expected = "cannot read the license file" if what in {"missing", "binary"} else "malformed"
        assert expected in captured.err, (what, captured.err)
    assert main(["license", "show"]) == 0
    assert "status:     free" in capsys.readouterr().out
