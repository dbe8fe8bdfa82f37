"""Generated references are up to date, and every hook is documented (datasette style)."""

from __future__ import annotations

import inspect
from pathlib import Path

from deskpool import hookspecs
from deskpool.cli import main
from deskpool.hookdoc import hook_groups

REPO = Path(__file__).parents[2]


def test_configuration_reference_is_up_to_date(capsys: object) -> None:
    assert (
        main(["config", "doc", "--check", "--path", str(REPO / "docs/reference/configuration.md")])
        == 0
    )


def test_hook_reference_is_up_to_date() -> None:
    assert main(["hooks", "doc", "--check", "--path", str(REPO / "docs/reference/hooks.md")]) == 0


def test_every_hook_is_documented_and_grouped() -> None:
    hooks = [name for name in dir(hookspecs) if name.startswith("deskpool_")]
    grouped = [name for _, names in hook_groups() for name in names]
    assert sorted(grouped) == sorted(hooks)
    for name in hooks:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert len(doc.splitlines()) >= 2, f"{name} needs a docstring with its parameters"
        for parameter in inspect.signature(getattr(hookspecs, name)).parameters:
            assert f":param {parameter}:" in doc, f"{name} does not document {parameter}"


def test_every_hook_is_in_the_hook_reference() -> None:
    text = (REPO / "docs/reference/hooks.md").read_text()
    for name in dir(hookspecs):
        if name.startswith("deskpool_"):
            assert f"### `{name}`" in text
