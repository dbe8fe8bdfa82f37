"""``Idempotency-Key`` on the API's writes: a retried change is answered, never applied twice.

A write (``POST``, ``PUT``, ``PATCH``, ``DELETE``) by an authenticated caller that carries an
``Idempotency-Key`` header runs in one transaction with its key and its response:

1. the key is claimed (:func:`deskpool.idempotency.store.claim`), keyed by the caller and the
   key; a key the caller used before answers its stored response (with ``Idempotent-Replayed:
   true``) when the request is the same (method, path and query, body), or 422
   ``idempotency_key_reused`` when it is not, and nothing runs;
2. the operation runs on the transaction's connection (its services' transactions are
   savepoints of it, :func:`deskpool.db.bounded.shared_connection`), and its response is
   rendered and stored with the key;
3. the transaction commits. When the connection is lost during the ``COMMIT`` (or it does not
   answer), nobody knows whether the change was applied: the answer is 503
   ``commit_outcome_unknown`` with ``Retry-After``, and the same request sent again with the
   same key gets the stored response if it was, or runs if it was not.

An operation that fails keeps what it would have kept without a key (a refusal it recorded, say)
and forgets the key: it runs again when retried. Keys are kept
:data:`~deskpool.idempotency.model.KEY_LIFETIME` (24 h), then the worker purges them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from deskpool.api.context import Call
from deskpool.db.bounded import shared_connection
from deskpool.errors import CommitOutcomeUnknown, IdempotencyKeyReused
from deskpool.idempotency import store
from deskpool.idempotency.model import (
    KEPT_HEADERS,
    KEY_LIFETIME,
    WRITE_METHODS,
    StoredResponse,
    fingerprint,
    idempotency_key,
)
from deskpool.outages import DATABASE, RETRY_AFTER_SECONDS, outage_of

#: The request header.
HEADER = "Idempotency-Key"
#: The header of a response answered from a key's stored response.
REPLAYED = "Idempotent-Replayed"

#: What a response publishes when it changed nothing (a replay, a read).
UNPUBLISHED = object()

Respond = Callable[[], Awaitable[tuple[web.StreamResponse, Any]]]


def key_of(call: Call) -> str | None:
    """The request's idempotency key, when it has one that applies (a caller's write).

    :raises BadRequest: the header is not a usable key.
    """
    value = call.request.headers.get(HEADER)
    if value is None or call.principal is None or call.request.method not in WRITE_METHODS:
        return None
    return idempotency_key(value)


def replay(stored: StoredResponse) -> web.Response:
    """The stored response, said to be one."""
    headers = {**stored.headers, REPLAYED: "true"}
    content_type = headers.pop("Content-Type", None)
    response = web.Response(status=stored.status, body=stored.body or None, headers=headers)
    if content_type is not None:
        response.headers["Content-Type"] = content_type
    return response


async def idempotent(call: Call, key: str, respond: Respond) -> tuple[web.StreamResponse, Any]:
    """``respond()`` run once per key (see the module); what it returns, or the stored answer.

    :raises IdempotencyKeyReused: the key was used for another request.
    :raises CommitOutcomeUnknown: the connection was lost during the commit.
    """
    request = call.request
    assert call.principal is not None
    principal = call.principal.id
    claimed = fingerprint(request.method, request.path_qs, await request.read())
    expires = datetime.now(UTC) + KEY_LIFETIME
    async with call.runtime.db.acquire() as connection:
        transaction = connection.transaction()
        await transaction.start()
        try:
            stored = await store.claim(connection, principal, key, claimed, expires)
        except BaseException:
            await _quietly(transaction.rollback)
            raise
        if stored is not None:
            await transaction.rollback()
            if stored.fingerprint != claimed:
                raise IdempotencyKeyReused(
                    "This Idempotency-Key was used for another request (another target or "
                    "body); use a new key for a new request."
                )
            return replay(stored), UNPUBLISHED
        try:
            with shared_connection(connection):
                response, outcome = await respond()
            if isinstance(response, web.Response) and response.status < 500:
                body = response.body if isinstance(response.body, bytes) else b""
                kept = {
                    name: response.headers[name]
                    for name in KEPT_HEADERS
                    if name in response.headers
                }
                await store.record(connection, principal, key, response.status, kept, body)
            else:
                await store.release(connection, principal, key)
        except BaseException:
            await _keep_what_failed(connection, transaction, principal, key)
            raise
        try:
            await transaction.commit()
        except Exception as error:
            if outage_of(error) != DATABASE:
                raise
            raise CommitOutcomeUnknown(
                "The connection to the database was lost while the change was committed: it "
                "may or may not have been applied. Send the same request again with the same "
                "Idempotency-Key to learn its outcome (it is never applied twice).",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            ) from error
    return response, outcome


async def _keep_what_failed(connection: Any, transaction: Any, principal: str, key: str) -> None:
    """The operation failed: keep what it would have kept without a key, and forget the key.

    When the transaction cannot commit (a statement of it failed, the connection is lost), it
    is rolled back: the operation then changed nothing.
    """
    try:
        await store.release(connection, principal, key)
        await transaction.commit()
    except Exception:
        await _quietly(transaction.rollback)


async def _quietly(action: Callable[[], Awaitable[Any]]) -> None:
    """``action()``, whatever it raises (a connection already lost)."""
    with contextlib.suppress(Exception):
        await action()
