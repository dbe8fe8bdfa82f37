"""``deskpool secrets``: generate-key, status, and a key rotation of 10,000 values with rewrap.

The rotation follows docs/operators/secrets.md: values sealed under key A; the processes are
restarted with B as SECRETS_MASTER_KEY and A as SECRETS_MASTER_KEY_PREVIOUS; `deskpool secrets
rewrap` is interrupted halfway (killed while a row it needs is locked, as a crash would), then
run again; with PREVIOUS removed every value still opens.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import uuid
from collections.abc import Callable, Mapping

import asyncpg
from tests.secret_leak_guard import LeakGuard
from tests.support.paths import REPO

from deskpool.host import bootstrap
from deskpool.secret_rotation import count_by_key_id
from deskpool.secrets import SecretContext, SecretStore, build_secret_store, put_secrets
from deskpool.testing.processes import deskpool_command
from deskpool_envelope.store import EnvelopeSecretStore, MasterKey

Run = Callable[..., subprocess.CompletedProcess[str]]

VALUES = 10_000
BATCH = 500
KIND = "cluster.credentials"


def key_id(key: str) -> str:
    return MasterKey(base64.b64decode(key)).key_id


def store_of(environ: Mapping[str, str]) -> SecretStore:
    """The store a process configured with ``environ`` would use."""
    process = bootstrap(environ, ["api"], log_setup=False)
    return build_secret_store(process.plugins, process.config)


async def open_every_value(url: str, store: SecretStore, expected: Mapping[str, str]) -> None:
    """Every stored value opens with ``store`` to what was stored."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT owner_id, field, sealed FROM sealed_secrets")
    finally:
        await connection.close()
    assert len(rows) == len(expected)
    for row in rows:
        context = SecretContext(KIND, row["owner_id"], row["field"])
        assert store.decrypt(bytes(row["sealed"]), context).decode() == expected[row["owner_id"]]


async def counts(url: str) -> dict[str, int]:
    connection = await asyncpg.connect(url)
    try:
        return await count_by_key_id(connection)
    finally:
        await connection.close()


def run_checked(run: Run, leak_guard: LeakGuard, env: Mapping[str, str], *args: str) -> str:
    result = run(*args, env=env, timeout=120)
    output = result.stdout + result.stderr
    leak_guard.scan(output, f"deskpool {' '.join(args)}")
    assert "Traceback" not in output
    assert result.returncode == 0, output
    return result.stdout


async def rewrap_until_blocked(env: Mapping[str, str], url: str) -> list[str]:
    """Run ``deskpool secrets rewrap``; kill it once it is blocked halfway, as a crash would.

    The row that starts the second half is locked first, so the batch holding it waits: the
    first half is re-wrapped and committed, batch by batch, and the rest is not.
    """
    locker = await asyncpg.connect(url)
    output: list[str] = []
    try:
        transaction = locker.transaction()
        await transaction.start()
        await locker.execute(
            "SELECT 1 FROM sealed_secrets WHERE id = "
            "(SELECT id FROM sealed_secrets ORDER BY id OFFSET $1 LIMIT 1) FOR UPDATE",
            VALUES // 2,
        )
        process = await asyncio.create_subprocess_exec(
            *deskpool_command(),
            "secrets",
            "rewrap",
            "--batch-size",
            str(BATCH),
            env={**env, "PATH": os.environ["PATH"]},
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert process.stdout is not None
        try:
            halfway = f"batch {VALUES // 2 // BATCH}:"
            while not (output and output[-1].startswith(halfway)):
                line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
                assert line, "".join(output)  # it ended before reaching halfway
                output.append(line)
        finally:
            process.kill()
            await process.wait()
        # The killed process's server sessions go too (one may be waiting on the lock).
        await locker.fetch(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await transaction.rollback()
    finally:
        await locker.close()
    return output


async def test_a_key_rotation_of_ten_thousand_values_with_an_interrupted_rewrap(
    deskpool_environ: dict[str, str],
    isolated_database_url: str,
    run_deskpool: Run,
    leak_guard: LeakGuard,
) -> None:
    key_a, key_b = leak_guard.master_key(), leak_guard.master_key()
    id_a, id_b = key_id(key_a), key_id(key_b)
    url = isolated_database_url
    base = {**deskpool_environ, "DATABASE_URL": url}
    under_a = {**base, "SECRETS_MASTER_KEY": key_a}
    rotating = {**base, "SECRETS_MASTER_KEY": key_b, "SECRETS_MASTER_KEY_PREVIOUS": key_a}
    under_b = {**base, "SECRETS_MASTER_KEY": key_b}

    # 10,000 values sealed under A, in one statement.
    values = {str(uuid.uuid4()): leak_guard.plaintext(f"v{i}") for i in range(VALUES)}
    connection = await asyncpg.connect(url)
    try:
        written = await put_secrets(
            connection,
            store_of(under_a),
            [(SecretContext(KIND, owner, "api_token"), value) for owner, value in values.items()],
        )
    finally:
        await connection.close()
    assert written == VALUES
    assert await counts(url) == {id_a: VALUES}

    # Restarted with B current and A previous: every value still opens.
    await open_every_value(url, store_of(rotating), values)
    status = await asyncio.to_thread(
        run_checked, run_deskpool, leak_guard, rotating, "secrets", "status"
    )
    assert f"{id_b}  current   0" in status
    assert f"{id_a}  previous  {VALUES}" in status
    assert f"{VALUES} under the previous key: run `deskpool secrets rewrap`" in status

    # Interrupted halfway: the first half is under B, the rest still under A.
    progress = await rewrap_until_blocked(rotating, url)
    assert progress[0].startswith(f"re-wrapping under key id {id_b}: {VALUES} of {VALUES}")
    assert await counts(url) == {id_a: VALUES // 2, id_b: VALUES // 2}
    await open_every_value(url, store_of(rotating), values)

    # Run again: it picks up the rest and reports nothing left under A.
    rewrap = await asyncio.to_thread(
        run_checked,
        run_deskpool,
        leak_guard,
        rotating,
        "secrets",
        "rewrap",
        "--batch-size",
        str(BATCH),
    )
    assert f"re-wrapping under key id {id_b}: {VALUES // 2} of {VALUES} value(s) to do" in rewrap
    assert f"done: re-wrapped {VALUES // 2} value(s); 0 changed meanwhile" in rewrap
    assert f"remaining under the previous key ({id_a}): 0" in rewrap
    assert await counts(url) == {id_b: VALUES}

    # PREVIOUS removed: every value opens with B alone, and nothing is left to do.
    await open_every_value(url, store_of(under_b), values)
    status = await asyncio.to_thread(
        run_checked, run_deskpool, leak_guard, under_b, "secrets", "status"
    )
    assert f"{id_b}  current  {VALUES}" in status
    assert id_a not in status
    again = await asyncio.to_thread(
        run_checked, run_deskpool, leak_guard, under_b, "secrets", "rewrap"
    )
    assert "0 of 10000 value(s) to do" in again
    for output in (status, rewrap, again, *progress):
        assert key_a not in output
        assert key_b not in output


def test_status_fails_on_values_under_an_unknown_key(
    deskpool_environ: dict[str, str],
    isolated_database_url: str,
    run_deskpool: Run,
    leak_guard: LeakGuard,
) -> None:
    stray, configured = leak_guard.master_key(), leak_guard.master_key()

    async def seal_one() -> None:
        connection = await asyncpg.connect(isolated_database_url)
        try:
            store = EnvelopeSecretStore(base64.b64decode(stray))
            await put_secrets(
                connection,
                store,
                [(SecretContext(KIND, "c1", "api_token"), leak_guard.plaintext())],
            )
        finally:
            await connection.close()

    asyncio.run(seal_one())
    env = {
        **deskpool_environ,
        "DATABASE_URL": isolated_database_url,
        "SECRETS_MASTER_KEY": configured,
    }
    status = run_deskpool("secrets", "status", env=env)
    leak_guard.scan(status.stdout + status.stderr, "deskpool secrets status")
    assert status.returncode == 1
    assert f"{key_id(stray)}  unknown  1" in status.stdout
    assert f"{key_id(configured)}  current  0" in status.stdout
    rewrap = run_deskpool("secrets", "rewrap", env=env)
    leak_guard.scan(rewrap.stdout + rewrap.stderr, "deskpool secrets rewrap")
    assert rewrap.returncode == 1
    assert "1 could not be opened" in rewrap.stdout
    assert "remaining under unknown key ids: 1" in rewrap.stdout
    assert "cannot re-wrap the secret cluster.credentials[c1].api_token" in rewrap.stderr
    for output in (status.stdout, status.stderr, rewrap.stdout, rewrap.stderr):
        assert stray not in output
        assert configured not in output


def test_rewrap_needs_a_key_and_a_current_schema(
    deskpool_environ: dict[str, str], migrated_database_url: str, run_deskpool: Run
) -> None:
    no_key = run_deskpool("secrets", "rewrap", env=deskpool_environ)
    assert no_key.returncode == 2
    assert "SECRETS_MASTER_KEY is not set" in no_key.stderr
    behind = {
        **deskpool_environ,
        "DATABASE_URL": migrated_database_url.rsplit("/", 1)[0] + "/postgres",
        "SECRETS_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
    }
    for command in ("status", "rewrap"):
        result = run_deskpool("secrets", command, env=behind)
        assert result.returncode == 2
        assert "run `deskpool migrate` first" in result.stderr
        assert "Traceback" not in result.stderr
