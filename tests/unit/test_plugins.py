"""The plugin host: entry-point discovery, selection, load failures, the typed front."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from deskpool.errors import PluginNotFound, StartupError
from deskpool.host import discover
from deskpool.plugins import PluginSelection, list_installed
from deskpool.recordings.stores import build_recording_store
from deskpool.registry import Registry

TESTPLUGIN = {"deskpool.plugins": {"greeter": "deskpool_testplugin"}}
BROKEN = {"deskpool.plugins": {"broken": "deskpool_brokenplugin"}}
Run = Callable[..., subprocess.CompletedProcess[str]]


def test_first_party_components_and_providers_are_discovered() -> None:
    host = discover({})
    assert host.components().names() == ["api", "gateway", "web", "worker"]
    loaded = set(host.loaded)
    assert {
        ("components", "api"),
        ("auth_providers", "oidc"),
        ("secret_stores", "envelope"),
    } <= loaded


def test_only_the_named_components_are_loaded() -> None:
    host = discover({}, ["api"])
    assert host.components().names() == ["api"]


def test_a_chosen_provider_that_is_not_installed_is_a_clear_error() -> None:
    with pytest.raises(PluginNotFound) as caught:
        discover({"SECRET_STORE": "vault"})
    message = str(caught.value)
    assert "'vault'" in message
    assert "envelope" in message
    assert "SECRET_STORE" in message


def test_a_missing_recording_store_stops_nothing_until_one_is_built() -> None:
    host = discover({"RECORDING_STORE": "tape"})
    assert "tape" not in host.recording_stores().names()
    assert "files" in discover({}).recording_stores().names()

    class Process:
        config: ClassVar[dict[str, str]] = {"RECORDING_STORE": "tape"}

    with pytest.raises(StartupError) as caught:
        build_recording_store(host, Process())
    assert "RECORDING_STORE" in str(caught.value)
    assert "'tape'" in str(caught.value)


def test_selection_reads_plugins_disabled() -> None:
    selection = PluginSelection.from_environ({"PLUGINS_DISABLED": "greeter, plugins:other"})
    assert list(selection.disabled) == ["greeter", "plugins:other"]
    assert selection.wanted("plugins") is None
    assert selection.wanted("auth_providers") == ["oidc"]


def test_registry_rejects_duplicates_and_lists_names() -> None:
    registry: Registry[int] = Registry("thing")
    registry.add("b", 2)
    registry.add("a", 1)
    assert registry.names() == ["a", "b"]
    with pytest.raises(ValueError, match="registered twice"):
        registry.add("a", 3)
    with pytest.raises(KeyError, match="registered: a, b"):
        registry.get("c")


def test_list_installed_names_distributions() -> None:
    rows = list_installed(discover({}))
    api = next(row for row in rows if row.group == "components" and row.name == "api")
    assert api.distribution == "deskpool"
    assert api.loaded


def test_an_installed_third_party_plugin_is_loaded_through_its_entry_point(
    plugin_site: Callable[..., Path], run_deskpool: Run
) -> None:
    site = plugin_site("deskpool-testplugin", ["deskpool_testplugin"], TESTPLUGIN)
    result = run_deskpool("plugins", env={"PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if " greeter " in line)
    assert "deskpool-testplugin" in line
    assert "1.2.3" in line
    assert " yes " in line
    # Its declared setting is part of the one configuration and of the reference.
    doc = run_deskpool("config", "doc", "--path", "/dev/stdout", env={"PYTHONPATH": str(site)})
    assert "TESTPLUGIN_GREETING" in doc.stdout


def test_a_broken_plugin_stops_the_process_naming_it_and_how_to_disable_it(
    plugin_site: Callable[..., Path], run_deskpool: Run
) -> None:
    site = plugin_site("deskpool-brokenplugin", ["deskpool_brokenplugin"], BROKEN)
    result = run_deskpool("plugins", env={"PYTHONPATH": str(site)})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "'broken'" in result.stderr
    assert "deskpool-brokenplugin 1.2.3" in result.stderr
    assert "PLUGINS_DISABLED=plugins:broken" in result.stderr
    disabled = run_deskpool(
        "plugins", env={"PYTHONPATH": str(site), "PLUGINS_DISABLED": "plugins:broken"}
    )
    assert disabled.returncode == 0, disabled.stderr
