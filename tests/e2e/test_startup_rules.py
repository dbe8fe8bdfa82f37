"""The startup rules of SPEC.md §7 about SECRETS_MASTER_KEY, each with the real command.

- The gateway refuses to start without SECRETS_MASTER_KEY.
- The api and worker refuse to start without it once any sealed value exists.
- Every process refuses to start while sealed values exist under a key id that neither
  configured key matches; the message names the key ids, never the keys.
- An invalid key value, or a previous key without a current one, is a startup error naming the
  variable and never echoing the value.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import uuid
from collections.abc import Callable

import asyncpg
import pytest
from tests.secret_leak_guard import LeakGuard

from deskpool.secrets import SecretContext, put_secrets
from deskpool.testing.processes import ANY_PORT, DeskpoolProcess
from deskpool_envelope.store import EnvelopeSecretStore, MasterKey

Run = Callable[..., subprocess.CompletedProcess[str]]


def key_id(key: str) -> str:
    return MasterKey(base64.b64decode(key)).key_id


def seal(url: str, key: str, plaintexts: list[str]) -> None:
    """Store ``plaintexts`` as cluster tokens sealed under ``key`` (base64)."""

    async def write() -> None:
        store = EnvelopeSecretStore(base64.b64decode(key))
        connection = await asyncpg.connect(url)
        try:
            await put_secrets(
                connection,
                store,
                [
                    (SecretContext.of("cluster.credentials", uuid.uuid4(), "api_token"), value)
                    for value in plaintexts
                ],
            )
        finally:
            await connection.close()

    asyncio.run(write())


def refused(result: subprocess.CompletedProcess[str], leak_guard: LeakGuard, *keys: str) -> str:
    """Check a refusal: exit status 2, no traceback, no key or test secret in the output."""
    output = result.stdout + result.stderr
    leak_guard.scan(output, "deskpool (startup rules)")
    assert result.returncode == 2, output
    assert "Traceback" not in output
    for key in keys:
        assert key not in output
    assert leak_guard.found_in(output) == []
    return result.stderr


def test_the_gateway_refuses_to_start_without_a_key(
    deskpool_environ: dict[str, str], run_deskpool: Run, leak_guard: LeakGuard
) -> None:
    message = refused(run_deskpool("run", "gateway", env=deskpool_environ), leak_guard)
    assert "the gateway refuses to start without SECRETS_MASTER_KEY" in message


@pytest.mark.parametrize("component", ["api", "worker"])
def test_the_api_and_worker_refuse_to_start_without_a_key_once_values_are_sealed(
    component: str,
    deskpool_environ: dict[str, str],
    isolated_database_url: str,
    run_deskpool: Run,
    leak_guard: LeakGuard,
) -> None:
    key = leak_guard.master_key()
    seal(isolated_database_url, key, [leak_guard.plaintext("token")])
    env = {**deskpool_environ, "DATABASE_URL": isolated_database_url}
    message = refused(run_deskpool("run", component, env=env), leak_guard, key)
    assert "SECRETS_MASTER_KEY is not set" in message
    assert f"the {component} refuses to start" in message
    assert f"{key_id(key)} (1 value)" in message


@pytest.mark.parametrize("component", ["api", "worker", "gateway", "web"])
def test_every_process_refuses_values_under_a_key_no_configured_key_matches(
    component: str,
    deskpool_environ: dict[str, str],
    isolated_database_url: str,
    run_deskpool: Run,
    leak_guard: LeakGuard,
) -> None:
    sealed_with, configured = leak_guard.master_key(), leak_guard.master_key()
    seal(isolated_database_url, sealed_with, [leak_guard.plaintext("a"), leak_guard.plaintext()])
    env = {
        **deskpool_environ,
        "DATABASE_URL": isolated_database_url,
        "SECRETS_MASTER_KEY": configured,
    }
    message = refused(run_deskpool("run", component, env=env), leak_guard, sealed_with, configured)
    assert f"under master key id(s) {key_id(sealed_with)} (2 values)" in message
    assert f"SECRETS_MASTER_KEY has key id {key_id(configured)}" in message
    assert "SECRETS_MASTER_KEY_PREVIOUS has unset" in message


@pytest.mark.parametrize(
    "value",
    ["not a key!", base64.b64encode(b"sixteen byte key").decode()],
    ids=["not base64", "16 bytes"],
)
@pytest.mark.parametrize("variable", ["SECRETS_MASTER_KEY", "SECRETS_MASTER_KEY_PREVIOUS"])
def test_an_invalid_key_is_refused_naming_the_variable_never_the_value(
    variable: str, value: str, deskpool_environ: dict[str, str], run_deskpool: Run
) -> None:
    env = {**deskpool_environ, "SECRETS_MASTER_KEY": base64.b64encode(os.urandom(32)).decode()}
    env[variable] = value
    result = run_deskpool("run", "api", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{variable}: " in result.stderr
    assert value not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_a_previous_key_without_a_current_one_is_refused(
    deskpool_environ: dict[str, str], run_deskpool: Run, leak_guard: LeakGuard
) -> None:
    previous = leak_guard.master_key()
    env = {**deskpool_environ, "SECRETS_MASTER_KEY_PREVIOUS": previous}
    message = refused(run_deskpool("run", "api", env=env), leak_guard, previous)
    assert "SECRETS_MASTER_KEY_PREVIOUS is set but SECRETS_MASTER_KEY is not" in message


async def test_during_a_rotation_window_the_api_and_worker_start_and_say_what_is_left(
    deskpool_environ: dict[str, str], isolated_database_url: str, leak_guard: LeakGuard
) -> None:
    old, new = leak_guard.master_key(), leak_guard.master_key()
    await asyncio.to_thread(seal, isolated_database_url, old, [leak_guard.plaintext()])
    env = {
        **deskpool_environ,
        "PATH": os.environ["PATH"],
        "DATABASE_URL": isolated_database_url,
        "SECRETS_MASTER_KEY": new,
        "SECRETS_MASTER_KEY_PREVIOUS": old,
        "API_ADDR": ANY_PORT,
        "WORKER_SHUTDOWN_TIMEOUT": "5s",
    }
    process = await DeskpoolProcess(["api", "worker"], env).start(within=60)
    returncode = await process.stop(within=60)
    text = process.output
    leak_guard.scan(text, "deskpool run api worker (rotation window)")
    assert returncode == 0, text
    assert "1 sealed secret(s) are still under the previous master key" in text
    assert key_id(old) in text
    assert old not in text
    assert new not in text
