"""Plugins installed for a test the way pip lays a distribution out."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from tests.support.paths import FIXTURES


def install_fake_distribution(
    target: Path, name: str, modules: list[str], entry_points: Mapping[str, Mapping[str, str]]
) -> Path:
    """Install a distribution into ``target`` the way pip lays one out.

    The modules and a ``.dist-info`` folder with METADATA and entry_points.txt; put ``target``
    on PYTHONPATH to make it installed.
    """
    target.mkdir(parents=True, exist_ok=True)
    for module in modules:
        shutil.copy(FIXTURES / "plugins" / f"{module}.py", target / f"{module}.py")
    info = target / f"{name.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    lines = []
    for group, items in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in items.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return target
