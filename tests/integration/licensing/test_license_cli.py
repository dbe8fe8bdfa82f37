"""``deskpool license install|show|remove`` against the database, as an operator runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deskpool.cli import main
from deskpool.licensing.model import sign_document
from deskpool.testing.licensing import TestVendor


def test_install_show_and_remove(
    db: Any,
    licensing_environ: dict[str, str],
    license_vendor: TestVendor,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in licensing_environ.items():
        monkeypatch.setenv(name, value)
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
