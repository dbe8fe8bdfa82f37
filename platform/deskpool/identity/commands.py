"""``deskpool admin grant``: break glass, with database access alone.

When nobody can administer the instance any more (the identity provider lost the admins'
accounts, the last admin left), an operator with the database credentials gives one user the
``platform_admin`` role and enables it. Only ``DATABASE_URL`` (and ``DATABASE_MAX_CONNS``) are
read, so the command works where the key-value store or the identity provider does not; the
change is audited with the actor ``break-glass:cli`` and the operating-system user who ran it.
See docs/operators/access.md.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from typing import Any

from deskpool.errors import DeskpoolError
from deskpool.identity.operator import BreakGlassResult, break_glass_grant

#: The settings the command reads: the database, and the issuer a subject belongs to.
SETTINGS = ("DATABASE_URL", "DATABASE_MAX_CONNS", "AUTH_OIDC_ISSUER_URL")

EXIT_REFUSED = 1


def operator_name() -> str:
    """Who runs the command, for the audit trail (the operating-system user)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


async def _grant(config: Any, args: argparse.Namespace, issuer: str | None) -> BreakGlassResult:
    from deskpool.db import current_pool

    async with current_pool(config) as pool, pool.acquire() as connection:
        return await break_glass_grant(
            connection,
            email=args.email,
            subject=args.subject,
            issuer=issuer,
            operator=operator_name(),
        )


def cmd_admin_grant(args: argparse.Namespace) -> int:
    """Give a user ``platform_admin`` and enable it; print what was done."""
    from deskpool.config import load_config
    from deskpool.host import discover

    environ = dict(os.environ)
    settings = [s for s in discover(environ, []).settings() if s.name in SETTINGS]
    config = load_config(settings, environ)
    issuer = args.issuer or config.get("AUTH_OIDC_ISSUER_URL") or None
    try:
        result = asyncio.run(_grant(config, args, issuer))
    except DeskpoolError as error:
        print(f"deskpool: {error.detail}", file=sys.stderr)
        return EXIT_REFUSED
    who = f"user {result.user_id} (subject {result.subject!r} of {result.issuer})"
    if result.user_created:
        print(f"created {who}; it has not signed in yet")
    if result.grant_created:
        print(f"granted platform_admin to {who}")
    else:
        print(f"{who} already held platform_admin")
    if result.enabled:
        print("enabled the user (it was disabled)")
    print(
        "recorded in the audit trail (actor break-glass:cli); running API processes apply it "
        "within a minute (as their cached principals expire)"
    )
    return 0


def add_parser(commands: Any) -> None:
    """Add ``deskpool admin grant`` to the command's sub-parsers."""
    admin = commands.add_parser(
        "admin", help="break-glass administration with database access alone"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    grant = admin.add_parser(
        "grant",
        help="give a user platform_admin (and enable it); needs only DATABASE_URL",
        description=(
            "Give one user the platform_admin role and enable it, with database access alone "
            "(DATABASE_URL), for when nobody can administer the instance any more. Audited "
            "with the actor break-glass:cli. See docs/operators/access.md."
        ),
    )
    who = grant.add_mutually_exclusive_group(required=True)
    who.add_argument("--email", help="the one user who signed in with this email")
    who.add_argument(
        "--subject", help="the OIDC subject; its user is created if it never signed in"
    )
    grant.add_argument(
        "--issuer", help="the subject's issuer (default: AUTH_OIDC_ISSUER_URL)", default=None
    )
    grant.set_defaults(func=cmd_admin_grant)
