"""Floor (a) of the login storm: the least a cold ``GET /api/v1/me`` can cost.

A bare aiohttp handler that verifies the bearer token as deskpool's OIDC provider does, with
the same library (joserfc: the compact JWS checked against the issuer's JWKS, RS256, then the
``iss``, ``aud``, ``sub`` and ``exp`` claims), and reads the user's row by issuer and subject
with asyncpg (a pool of 10 connections, deskpool's ``DATABASE_MAX_CONNS``). No cache of any
kind. Run by ``bench/login_storm.py``::

    python bench/floor_me.py PORT DATABASE_URL ISSUER_URL AUDIENCE

Port 0 asks for a port the system picks; ``listening on PORT`` on stdout says which.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from typing import Any

import asyncpg
from aiohttp import web
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry

REGISTRY = jws.JWSRegistry(algorithms=["RS256"], strict_check_header=False)


def fetch_json(url: str) -> Any:
    """A JSON document over HTTP."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


async def serve(port: int, database_url: str, issuer: str, audience: str) -> None:
    """Serve ``GET /api/v1/me`` on 127.0.0.1:``port`` until killed."""
    discovery = fetch_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    keys = KeySet.import_key_set(fetch_json(discovery["jwks_uri"]))
    pool = await asyncpg.create_pool(database_url, min_size=10, max_size=10)

    async def me(request: web.Request) -> web.Response:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return web.json_response({"title": "no token"}, status=401)
        try:
            signed = jws.extract_compact(header[7:].encode("ascii"), registry=REGISTRY)
            key = keys.get_by_kid(signed.headers().get("kid"))
            if not jws.validate_compact(signed, key, registry=REGISTRY):
                raise JoseError("bad signature")
            claims = json.loads(signed.payload)
            JWTClaimsRegistry(
                now=int(time.time()),
                iss={"essential": True, "value": issuer},
                aud={"essential": True, "value": audience},
                sub={"essential": True},
                exp={"essential": True},
            ).validate(claims)
        except (JoseError, ValueError):
            return web.json_response({"title": "bad token"}, status=401)
        row = await pool.fetchrow(
            "SELECT id, email, display_name, disabled FROM users "
            "WHERE issuer = $1 AND subject = $2",
            issuer,
            claims["sub"],
        )
        if row is None or row["disabled"]:
            return web.json_response({"title": "unknown user"}, status=403)
        return web.json_response(
            {"id": str(row["id"]), "email": row["email"], "display_name": row["display_name"]}
        )

    app = web.Application()
    app.router.add_get("/api/v1/me", me)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"listening on {runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]))
