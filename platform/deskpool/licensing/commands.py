"""``deskpool license``: install, show or remove the license; build or verify the manifest.

``install``, ``show`` and ``remove`` call the same services as the API (the audit trail names
the actor ``system:cli``); ``manifest build`` is the release pipeline's step (it needs no
database), ``manifest verify`` anyone's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from deskpool.actor import Actor
from deskpool.errors import DeskpoolError, StartupError
from deskpool.licensing import keys, service
from deskpool.licensing.context import LicensingContext
from deskpool.licensing.manifest import (
    build_manifest,
    deskpool_distributions,
    installed_files,
    manifest_path,
    manifest_required,
    verify_manifest,
)
from deskpool.licensing.model import BuildIntegrity, format_instant

_T = TypeVar("_T")

#: Who the audit trail says acted, for changes made with this command.
CLI_ACTOR = Actor.system("system:cli")

EXIT_FAILED = 1


def _with_database(work: Callable[[asyncpg.Connection, LicensingContext], Awaitable[_T]]) -> _T:
    """Run ``work(connection, context)`` against the configured, current database."""
    from deskpool.db import connect_pool, schema_status
    from deskpool.errors import SchemaOutOfDate
    from deskpool.host import bootstrap

    process = bootstrap(dict(os.environ), [], log_setup=False)
    context = LicensingContext.from_config(process.config)

    async def run() -> _T:
        pool = await connect_pool(process.config)
        try:
            status = await schema_status(pool)
            if status.pending:
                raise SchemaOutOfDate("the database schema is behind; run `deskpool migrate`")
            async with pool.acquire() as connection:
                return await work(connection, context)
        finally:
            await pool.close()

    return asyncio.run(run())


def print_state(state: service.LicenseState) -> None:
    """The license state, one fact a line."""
    judgement = state.judgement
    print(f"status:     {judgement.status.value}")
    print(f"edition:    {judgement.edition.value}")
    limits = judgement.limits.as_dict()
    for name, used in state.usage.as_dict().items():
        limit = limits[name]
        print(f"{name + ':':<11} {used} of {'unlimited' if limit is None else limit}")
    license = judgement.license
    if license is not None:
        print(f"license:    {license.id} for {license.licensee} ({license.edition.value})")
        print(f"expires:    {format_instant(license.expires_at)}")
        if judgement.grace_ends_at is not None:
            print(f"grace ends: {format_instant(judgement.grace_ends_at)}")
    watermark = state.watermark
    instant = format_instant(watermark.instant) if watermark.instant else "not persisted yet"
    print(f"watermark:  {instant} ({watermark.integrity.value})")
    print(f"build:      {state.build.state.value}: {state.build.detail}")
    clock = state.clock.as_details()
    watermark_offset = clock["offset_from_watermark_seconds"]
    print(
        f"clock:      {clock['offset_from_database_seconds']:+} s from the database server's"
        + (f", {watermark_offset:+} s from the watermark" if watermark_offset is not None else "")
    )
    reports = state.reports
    print(f"reports:    {reports.sent} sent; last: {reports.last_outcome or 'none'}")
    for reason in judgement.reasons:
        print(f"note:       {reason}")


def cmd_install(args: argparse.Namespace) -> int:
    """Install the license file ``args.file``."""
    try:
        document = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = (
            (error.strerror or type(error).__name__)
            if isinstance(error, OSError)
            else "it is not UTF-8 text"
        )
        print(f"deskpool: cannot read the license file {args.file}: {reason}", file=sys.stderr)
        return EXIT_FAILED

    async def work(
        connection: asyncpg.Connection, context: LicensingContext
    ) -> service.LicenseState:
        return await service.install_license(connection, context, document, CLI_ACTOR)

    try:
        state = _with_database(work)
    except DeskpoolError as refused:
        print(f"deskpool: license refused ({refused.code}): {refused.detail}", file=sys.stderr)
        return EXIT_FAILED
    print_state(state)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Show the license state."""
    print_state(_with_database(service.license_state))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Remove the installed license."""

    async def work(
        connection: asyncpg.Connection, context: LicensingContext
    ) -> service.LicenseState:
        return await service.remove_license(connection, context, CLI_ACTOR)

    print_state(_with_database(work))
    return 0


def _configured_manifest(path: str | None) -> Path:
    return Path(path) if path else manifest_path(os.environ.get("LICENSE_MANIFEST_PATH", ""))


def cmd_manifest_build(args: argparse.Namespace) -> int:
    """Write the signed manifest of the installed deskpool distributions."""
    try:
        key = load_pem_private_key(Path(args.key).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as error:
        raise StartupError(f"cannot read the vendor key {args.key}: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise StartupError(f"{args.key} is not an Ed25519 private key")
    installed = installed_files(deskpool_distributions())
    output = _configured_manifest(args.output)
    output.write_text(build_manifest(key, installed, datetime.now(UTC)), encoding="utf-8")
    versions = ", ".join(f"{name} {version}" for name, version in installed.versions.items())
    print(f"wrote {output}: {len(installed.files)} files of {versions}")
    if key.public_key() not in keys.trusted_keys().values():
        print("note: this key is not one of this build's vendor keys; the manifest is invalid")
    return 0


def cmd_manifest_verify(args: argparse.Namespace) -> int:
    """Verify the manifest; exit 1 when the build is modified or the manifest invalid."""
    configured = os.environ.get("LICENSE_MANIFEST_PATH", "")
    check = verify_manifest(
        _configured_manifest(args.path),
        keys.trusted_keys(configured),
        lambda: installed_files(deskpool_distributions()),
        None if args.path else manifest_required(configured),
    )
    print(f"{check.state.value}: {check.detail}")
    for name in check.files:
        print(f"  {name}")
    return EXIT_FAILED if check.state in {BuildIntegrity.MODIFIED, BuildIntegrity.INVALID} else 0


def add_parser(commands: Any) -> None:
    """Add ``deskpool license ...`` to the command's sub-parsers."""
    license = commands.add_parser("license", help="the license and the build manifest")
    actions = license.add_subparsers(dest="action", required=True, metavar="ACTION")
    install = actions.add_parser("install", help="install a license file")
    install.add_argument("file", help="the license document the vendor sent")
    install.set_defaults(func=cmd_install)
    actions.add_parser("show", help="the license state").set_defaults(func=cmd_show)
    actions.add_parser("remove", help="remove the license (free edition)").set_defaults(
        func=cmd_remove
    )
    manifest = actions.add_parser("manifest", help="the signed build manifest")
    steps = manifest.add_subparsers(dest="step", required=True, metavar="STEP")
    build = steps.add_parser("build", help="sign the manifest of the installed files")
    build.add_argument("--key", required=True, help="the vendor's Ed25519 private key (PEM)")
    build.add_argument("--output", help="default: LICENSE_MANIFEST_PATH or its default")
    build.set_defaults(func=cmd_manifest_build)
    verify = steps.add_parser("verify", help="verify the installed files against the manifest")
    verify.add_argument("--path", help="default: LICENSE_MANIFEST_PATH or its default")
    verify.set_defaults(func=cmd_manifest_verify)
