"""One cursor codec for every list: a list pages with the cursors it issued and refuses any other.

A cursor another list issued, one issued for other path parameters, one tampered with or made
up is a 400 ``invalid_cursor`` problem from every list of the API, before the handler runs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from deskpool.api.app import build_route_table
from deskpool.api.pagination import CursorSeal, cursor_binding, encode_cursor
from deskpool.errors import InvalidCursor
from deskpool.testing.pytest_plugin import served

PROBLEM = "application/problem+json"
ADMIN = "cursor-admin"


@pytest.fixture
async def admin_client(
    secure_environ: dict[str, str], aiohttp_client: Any
) -> AsyncIterator[tuple[Any, Any]]:
    """The API with a bootstrap administrator, and the runtime behind it."""
    environ = secure_environ | {"AUTH_BOOTSTRAP_ADMIN_SUBJECTS": ADMIN}
    async with served(environ, aiohttp_client) as (runtime, client):
        yield client, runtime


async def invalid_cursor(response: Any) -> None:
    assert response.status == 400, await response.text()
    assert response.content_type == PROBLEM
    assert (await response.json())["code"] == "invalid_cursor"


async def test_every_list_refuses_a_cursor_it_did_not_issue(
    admin_client: tuple[Any, Any], bearer: Callable[..., dict[str, str]]
) -> None:
    client, runtime = admin_client
    lists = [op for op in build_route_table(runtime.plugins).operations() if op.paginated]
    assert len(lists) >= 10
    made_up = encode_cursor(["a", str(uuid.uuid4())]) + "A" * 22
    for operation in lists:
        path = re.sub(r"{[^}]+}", lambda _: str(uuid.uuid4()), operation.path)
        for cursor in (made_up, "x", encode_cursor(1)):
            response = await client.get(
                path, params={"cursor": cursor}, headers=bearer(ADMIN, email="root@example.com")
            )
            await invalid_cursor(response)


async def test_a_list_pages_with_its_cursors_and_refuses_other_lists_and_tampering(
    admin_client: tuple[Any, Any], bearer: Callable[..., dict[str, str]]
) -> None:
    client, _ = admin_client
    tag = uuid.uuid4().hex
    subjects = [f"{tag}-{n}" for n in range(3)]
    for subject in subjects:  # each first sign-in creates a user
        headers = bearer(subject, email=f"{subject}@cursor.example")
        assert (await client.get("/api/v1/me", headers=headers)).status == 200
    admin = bearer(ADMIN)
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "1", "q": tag} | ({"cursor": cursor} if cursor else {})
        response = await client.get("/api/v1/users", params=params, headers=admin)
        assert response.status == 200, await response.text()
        body = await response.json()
        seen += [user["subject"] for user in body["items"]]
        cursor = body["next"]
        if cursor is None:
            break
        issued = cursor
    assert sorted(seen) == subjects
    # The last cursor issued by the user list means nothing to another list.
    for other in ("/api/v1/groups", "/api/v1/jobs"):
        await invalid_cursor(await client.get(other, params={"cursor": issued}, headers=admin))
    # Any change to it is refused, in the key or in the seal.
    for position in (0, len(issued) // 2, len(issued) - 1):
        flipped = "A" if issued[position] != "A" else "B"
        tampered = issued[:position] + flipped + issued[position + 1 :]
        response = await client.get("/api/v1/users", params={"cursor": tampered}, headers=admin)
        await invalid_cursor(response)


def test_a_cursor_is_sealed_to_its_list_and_path_parameters() -> None:
    seal = CursorSeal(b"k" * 32)
    pool_a = cursor_binding("listPoolDesktops", {"pool_id": "a"})
    pool_b = cursor_binding("listPoolDesktops", {"pool_id": "b"})
    cursor = seal.seal(pool_a, encode_cursor(["desk-1", "id-1"]))
    assert seal.open(pool_a, cursor) == encode_cursor(["desk-1", "id-1"])
    with pytest.raises(InvalidCursor):
        seal.open(pool_b, cursor)
    with pytest.raises(InvalidCursor):
        seal.open(cursor_binding("listUsers", {}), cursor)
    with pytest.raises(InvalidCursor):
        CursorSeal(b"j" * 32).open(pool_a, cursor)  # another instance's secret
