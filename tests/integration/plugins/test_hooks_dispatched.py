"""Every hook of the plugin contract is dispatched by the host, and what it returns is used.

A third-party plugin implementing every hook (``tests/fixtures/plugins/deskpool_hookprobe.py``)
is installed as a distribution with entry points and loaded through the real plugin host. One
test per hook, marked with :func:`dispatches`, shows the platform calling the hook where its
reference says and using what the plugin contributed. A hook added to
:mod:`deskpool.hookspecs` without such a test fails :func:`test_every_hook_has_a_dispatch_test`.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

import pytest
from stevedore import ExtensionManager
from tests.support.plugins import install_fake_distribution

from deskpool import hookspecs
from deskpool.api.app import build_route_table
from deskpool.api.openapi import build_document
from deskpool.errors import StartupError
from deskpool.host import Host, bootstrap, create_components
from deskpool.licensing.reporting import build_reporter
from deskpool.ops import create_ops_app
from deskpool.runtime import Runtime
from deskpool.secrets import SecretContext
from deskpool.testing.pytest_plugin import opened_runtime, served

F = TypeVar("F", bound=Callable[..., Any])

#: Every hook specification of the contract.
HOOKS = sorted(name for name, spec in vars(hookspecs).items() if hasattr(spec, "deskpool_spec"))
#: hook name -> the test proving it is dispatched (filled by :func:`dispatches`).
TESTED: dict[str, str] = {}

PROBE = "hookprobe"
ENTRY_POINTS = {
    f"deskpool.{group}": {PROBE: "deskpool_hookprobe"}
    for group in (
        "plugins",
        "components",
        "auth_providers",
        "secret_stores",
        "license_reporters",
        "recording_stores",
    )
}


def dispatches(hook: str) -> Callable[[F], F]:
    """Mark a test as the one proving ``hook`` is dispatched and its result used."""
    if hook not in HOOKS:
        raise ValueError(f"{hook} is not a hook of deskpool.hookspecs")

    def mark(test: F) -> F:
        TESTED[hook] = test.__name__
        return test

    return mark


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The probe plugin, installed for this module's tests (its module, for its records)."""
    site = install_fake_distribution(
        tmp_path_factory.mktemp("site"), "deskpool-hookprobe", ["deskpool_hookprobe"], ENTRY_POINTS
    )
    # stevedore keeps each group's entry points for the life of the process: forget what an
    # earlier test of this process listed, before the probe is installed and after it is gone.
    ExtensionManager.ENTRY_POINT_CACHE.clear()
    sys.path.insert(0, str(site))
    try:
        yield importlib.import_module("deskpool_hookprobe")
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("deskpool_hookprobe", None)
        ExtensionManager.ENTRY_POINT_CACHE.clear()


@pytest.fixture
def environ(probe: ModuleType, deskpool_environ: dict[str, str]) -> dict[str, str]:
    """The test environment, with the probe installed."""
    return {**deskpool_environ, "HOOKPROBE_GREETING": "bonjour"}


def test_the_probe_is_loaded_through_its_entry_points(environ: dict[str, str]) -> None:
    process = bootstrap(environ, ["api"], log_setup=False)
    assert ("plugins", PROBE) in process.plugins.loaded


# ----------------------------------------------------------------------------- lifecycle


@dispatches("deskpool_declare_settings")
def test_declared_settings_are_read_into_the_configuration(environ: dict[str, str]) -> None:
    process = bootstrap(environ, ["api"], log_setup=False)
    assert process.config["HOOKPROBE_GREETING"] == "bonjour"
    assert process.config["HOOKPROBE_REFUSE"] is False
    names = [setting.name for setting in process.plugins.settings()]
    assert {"HOOKPROBE_GREETING", "HOOKPROBE_REFUSE"} <= set(names)


@dispatches("deskpool_configure")
def test_configure_sees_the_configuration_and_may_refuse_to_start(
    environ: dict[str, str], probe: ModuleType
) -> None:
    process = bootstrap(environ, ["api"], log_setup=False)
    assert probe.CONFIGURED[-1] is process.config
    with pytest.raises(StartupError, match="hookprobe refuses to start"):
        bootstrap({**environ, "HOOKPROBE_REFUSE": "true"}, ["api"], log_setup=False)


@dispatches("deskpool_startup")
async def test_startup_runs_when_the_runtime_opens(
    environ: dict[str, str], probe: ModuleType
) -> None:
    async with opened_runtime(environ) as runtime:
        assert id(runtime) in probe.STARTED


@dispatches("deskpool_shutdown")
async def test_shutdown_runs_when_the_runtime_closes(
    environ: dict[str, str], probe: ModuleType
) -> None:
    async with opened_runtime(environ) as runtime:
        pass
    assert id(runtime) not in probe.STARTED


@dispatches("deskpool_readiness_checks")
async def test_readiness_checks_are_reported_by_readyz(
    environ: dict[str, str], aiohttp_client: Any
) -> None:
    async with opened_runtime(environ) as runtime:
        client = await aiohttp_client(create_ops_app(runtime))
        body = await (await client.get("/readyz")).json()
        await client.close()
    assert body["checks"][PROBE]["ok"] is True
    # The check is the plugin's: on a runtime it did not start, it fails.
    process = bootstrap(environ, ["api"], log_setup=False)
    unstarted = Runtime(process.config, process.plugins)
    check = next(c for c in process.plugins.readiness_checks(unstarted) if c.name == PROBE)
    with pytest.raises(RuntimeError, match="has not started"):
        await check.probe()


# ---------------------------------------------------------------------------- components


@dispatches("deskpool_register_components")
async def test_a_registered_component_is_run_by_the_host(environ: dict[str, str]) -> None:
    host = Host(bootstrap(environ, [PROBE], log_setup=False))
    await host.start()
    try:
        component = host.runtime.components[PROBE]
        assert component.started
    finally:
        await host.stop()
    assert not component.started


@dispatches("deskpool_register_routes")
async def test_registered_routes_are_served_and_documented(
    environ: dict[str, str], aiohttp_client: Any
) -> None:
    async with served(environ, aiohttp_client) as (runtime, client):
        response = await client.get("/hookprobe/greeting")
        assert response.status == 200, await response.text()
        assert await response.json() == {"greeting": "bonjour"}
        document = build_document(build_route_table(runtime.plugins))
    assert "get" in document["paths"]["/hookprobe/greeting"]


# -------------------------------------------------------------------------------- providers


@dispatches("deskpool_register_auth_providers")
async def test_the_chosen_auth_provider_authenticates_requests(
    environ: dict[str, str], aiohttp_client: Any
) -> None:
    subject = f"alice-{uuid.uuid4().hex[:8]}"
    async with served({**environ, "AUTH_PROVIDER": PROBE}, aiohttp_client) as (_, client):
        refused = await client.get("/api/v1/me", headers={"Authorization": "Bearer other"})
        me = await client.get("/api/v1/me", headers={"Authorization": f"Bearer probe-{subject}"})
        assert refused.status == 401
        assert me.status == 200, await me.text()
        body = await me.json()
    assert body["subject"] == subject
    assert body["issuer"] == "https://hookprobe.invalid"


@dispatches("deskpool_register_secret_stores")
def test_the_chosen_secret_store_is_the_runtimes(
    environ: dict[str, str], probe: ModuleType
) -> None:
    process = bootstrap({**environ, "SECRET_STORE": PROBE}, ["api"], log_setup=False)
    store = Runtime(process.config, process.plugins).secret_store
    assert isinstance(store, probe.ProbeSecretStore)
    context = SecretContext.of("cluster", uuid.uuid4(), "password")
    assert store.decrypt(store.encrypt(b"s3cret", context), context) == b"s3cret"
    assert store.key_ids == ("hookprobe-1",)


@dispatches("deskpool_register_recording_stores")
def test_the_chosen_recording_store_is_the_runtimes(
    environ: dict[str, str], probe: ModuleType
) -> None:
    process = bootstrap({**environ, "RECORDING_STORE": PROBE}, ["api"], log_setup=False)
    store = Runtime(process.config, process.plugins).recording_store
    assert isinstance(store, probe.ProbeRecordingStore)
    store.put_chunk("a-recording", 0, b"4.sync,1.0;")
    assert store.get_chunk("a-recording", 0) == b"4.sync,1.0;"
    # What the gateway's recording writer calls: by default a put_chunk each, durable at once.
    store.write_chunks("a-recording", 1, [b"4.sync,1.1;", b"4.sync,1.2;"])
    store.sync("a-recording")
    assert store.get_chunk("a-recording", 2) == b"4.sync,1.2;"
    store.delete("a-recording")
    assert ("a-recording", 0) not in probe.RECORDED_CHUNKS


@dispatches("deskpool_register_hypervisor_drivers")
def test_registered_drivers_are_installed_for_clusters(
    environ: dict[str, str], probe: ModuleType
) -> None:
    process = bootstrap(environ, ["api"], log_setup=False)
    drivers = Runtime(process.config, process.plugins).drivers
    assert PROBE in drivers.installed()
    assert drivers.status_of(PROBE) == "installed"
    assert drivers.registry.get(PROBE) is probe.ProbeDriver


@dispatches("deskpool_register_license_reporters")
async def test_the_chosen_license_reporter_sends_the_reports(
    environ: dict[str, str], probe: ModuleType
) -> None:
    process = bootstrap({**environ, "LICENSE_REPORTER": PROBE}, ["api"], log_setup=False)
    reporter = build_reporter(process.plugins, process.config)
    assert isinstance(reporter, probe.ProbeReporter)
    await reporter.send({"schema": "probe"})
    assert probe.SENT[-1] == {"schema": "probe"}


# ------------------------------------------------------------------------------------- jobs


@pytest.fixture
def worker(environ: dict[str, str]) -> Any:
    """The worker component of a worker process with the probe installed (not started)."""
    process = bootstrap(environ, ["worker"], log_setup=False)
    (component,) = create_components(Runtime(process.config, process.plugins), ["worker"])
    return component


@dispatches("deskpool_register_job_kinds")
def test_registered_job_kinds_are_run_by_the_worker(worker: Any, probe: ModuleType) -> None:
    assert worker.runner.kinds[f"{PROBE}.echo"] is probe.ECHO


@dispatches("deskpool_register_periodic_tasks")
def test_registered_periodic_tasks_are_scheduled_by_the_worker(
    worker: Any, probe: ModuleType
) -> None:
    assert worker.scheduler.tasks[f"{PROBE}.tick"] is probe.TICK


# ------------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_dispatch_test(hook: str) -> None:
    assert hook in TESTED, f"{hook} has no test here proving the host dispatches it"


def test_the_contract_is_not_empty() -> None:
    assert len(HOOKS) >= 13
