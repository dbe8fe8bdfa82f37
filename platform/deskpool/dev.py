"""``deskpool dev``: the quick start in one process.

It migrates, starts a development OIDC issuer on loopback (fixed keys kept in the state folder,
so sign-ins survive restarts), points the API and the console at it, makes its administrator a
bootstrap admin, runs every component, and prints where everything is and a ready-made token.
It is for a developer's machine only: anyone who reaches the issuer signs in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import asyncpg

from deskpool.db import migrate
from deskpool.host import ALL_COMPONENTS, Host, bootstrap
from deskpool.testing.idp import DevIdentityProvider

log = logging.getLogger(__name__)

#: The development administrator the issuer signs in by default.
DEV_ADMIN_SUBJECT = "dev-admin"
DEV_ADMIN_EMAIL = "admin@deskpool.test"
DEV_CLIENT_ID = "deskpool"


def dev_environ(environ: Mapping[str, str], issuer_url: str) -> dict[str, str]:
    """The environment of the development process: the caller's, plus the dev issuer."""
    defaults = {
        "AUTH_OIDC_ISSUER_URL": issuer_url,
        "AUTH_OIDC_AUDIENCE": DEV_CLIENT_ID,
        "AUTH_BOOTSTRAP_ADMIN_EMAILS": DEV_ADMIN_EMAIL,
        "WEB_PUBLIC_OIDC_AUTHORITY": issuer_url,
        "WEB_PUBLIC_OIDC_CLIENT_ID": DEV_CLIENT_ID,
        "WEB_PUBLIC_OIDC_SCOPE": "openid profile email groups offline_access",
    }
    merged = dict(environ)
    for key, value in defaults.items():
        if not merged.get(key):
            merged[key] = value
    return merged


async def run_dev(environ: Mapping[str, str], state_dir: Path, issuer_port: int) -> None:
    """Migrate, start the dev issuer, run every component until SIGTERM/SIGINT."""
    issuer = DevIdentityProvider(state_dir / "dev-idp-keys.json", audience=DEV_CLIENT_ID)
    await issuer.start("127.0.0.1", issuer_port)
    try:
        process = bootstrap(dev_environ(environ, issuer.issuer_url), ALL_COMPONENTS)
        connection = await asyncpg.connect(process.config["DATABASE_URL"])
        try:
            for label in await migrate(connection):
                log.info("applied migration %s", label)
        finally:
            await connection.close()
        host = Host(process)
        token = issuer.issue_token(
            DEV_ADMIN_SUBJECT, expires_in=8 * 3600, **issuer.users[DEV_ADMIN_SUBJECT].claims
        )
        config = process.config
        api = f"http://{config['API_ADDR']}"
        banner = "\n".join(
            [
                "",
                "deskpool dev is starting:",
                f"  console      http://{config['WEB_ADDR']}",
                f"  API          {api}   (docs: {api}/docs)",
                f"  OIDC issuer  {issuer.issuer_url}   (signs in {DEV_ADMIN_EMAIL})",
                f"  ops          http://{config['METRICS_ADDR']}/readyz",
                "  a token for the development administrator (valid 8 hours):",
                f"    curl -H 'Authorization: Bearer {token}' {api}/api/v1/me",
                "",
            ]
        )
        print(banner, flush=True)
        await host.run()
    finally:
        await issuer.stop()


def main(environ: Mapping[str, str], state_dir: Path, issuer_port: int) -> None:
    """Run :func:`run_dev` to completion."""
    asyncio.run(run_dev(environ, state_dir, issuer_port))
