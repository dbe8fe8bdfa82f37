"""In-memory changes held until their transaction commits, against the real PostgreSQL."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from deskpool.db.after_commit import AfterCommit
from deskpool.testing.pytest_plugin import connected


class Failed(Exception):
    """Makes a transaction roll back."""


async def failing(commits: AfterCommit, connection: asyncpg.Connection, change: Any) -> None:
    """A transaction of ``commits`` that applies ``change``, then fails."""
    async with commits.transaction(connection):
        commits.apply(connection, change)
        raise Failed


async def cut_off(commits: AfterCommit, connection: asyncpg.Connection, change: Any) -> None:
    """A transaction of ``commits`` that applies ``change``, then loses its connection."""
    async with commits.transaction(connection):
        commits.apply(connection, change)
        connection.terminate()


async def test_changes_wait_for_the_outermost_commit_and_die_with_a_rollback(
    migrated_database_url: str,
) -> None:
    commits = AfterCommit()
    kept: list[str] = []
    async with connected(migrated_database_url) as connection:
        commits.apply(connection, lambda: kept.append("outside"))
        assert kept == ["outside"]
        async with commits.transaction(connection):
            await connection.execute("SELECT 1")
            commits.apply(connection, lambda: kept.append("outer"))
            async with commits.transaction(connection):
                commits.apply(connection, lambda: kept.append("released savepoint"))
            with pytest.raises(Failed):
                await failing(commits, connection, lambda: kept.append("rolled back savepoint"))
            assert kept == ["outside"]  # nothing before the commit
        assert kept == ["outside", "outer", "released savepoint"]
        with pytest.raises(Failed):
            await failing(commits, connection, lambda: kept.append("rolled back"))
        assert kept == ["outside", "outer", "released savepoint"]


async def test_in_a_transaction_opened_elsewhere_a_change_is_dropped_unless_it_only_shows(
    migrated_database_url: str,
) -> None:
    commits = AfterCommit()
    kept: list[str] = []
    async with connected(migrated_database_url) as connection, connection.transaction():
        commits.apply(connection, lambda: kept.append("dropped"))
        commits.apply(connection, lambda: kept.append("shown"), foreign="apply")
        async with commits.transaction(connection):
            commits.apply(connection, lambda: kept.append("in a savepoint of it"))
        assert kept == ["shown"]
    assert kept == ["shown"]


async def test_a_commit_cut_off_applies_nothing(migrated_database_url: str) -> None:
    commits = AfterCommit()
    kept: list[str] = []
    async with connected(migrated_database_url) as connection:
        with pytest.raises(asyncpg.InterfaceError):
            await cut_off(commits, connection, lambda: kept.append("lost"))
    assert kept == []
