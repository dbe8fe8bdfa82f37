"""The ``deskpool`` command.

Every sub-command turns a :class:`deskpool.errors.StartupError` (bad configuration, a plugin
that fails to load, a store that cannot be reached) into one clear message on stderr and exit
status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from deskpool import __version__
from deskpool.errors import StartupError

if TYPE_CHECKING:
    from deskpool.db.rows import Db

_T = TypeVar("_T")

EXIT_STARTUP = 2
EXIT_CHECK_FAILED = 1

CONFIG_REFERENCE_PATH = "docs/reference/configuration.md"
HOOK_REFERENCE_PATH = "docs/reference/hooks.md"
OPENAPI_DOCUMENT_PATH = "api/openapi/openapi.yaml"


def _environ() -> dict[str, str]:
    return dict(os.environ)


# ------------------------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    """Run the named components until SIGTERM or SIGINT.

    Listeners asked for port 0 are bound first, and the URLs naming them derived when unset
    (:mod:`deskpool.bound_ahead`).
    """
    from deskpool.bound_ahead import bind_listeners_ahead, derive_public_urls
    from deskpool.host import Host, bootstrap, expand_components
    from deskpool.serving_loop import run_serving

    environ, ahead = bind_listeners_ahead(_environ(), expand_components(args.components))
    process = bootstrap(derive_public_urls(environ, ahead), args.components)
    run_serving(Host(process).run())
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    """The quick start: migrate, then run everything with a development identity provider."""
    from deskpool.dev import run_dev
    from deskpool.serving_loop import run_serving

    run_serving(
        run_dev(
            _environ(), Path(args.state_dir), args.issuer_port, args.hypervisor, args.libvirt_prefix
        )
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply pending migrations (idempotent, under an advisory lock)."""
    from deskpool.db import connect_pool, migrate
    from deskpool.host import bootstrap

    process = bootstrap(_environ(), [])

    async def run() -> list[str]:
        pool = await connect_pool(process.config, bounded=False)
        try:
            async with pool.acquire() as connection:
                return await migrate(connection)
        finally:
            await pool.close()

    applied = asyncio.run(run())
    if applied:
        for label in applied:
            print(f"applied {label}")
    else:
        print("schema is up to date")
    return 0


# --------------------------------------------------------------------------------- openapi


def _render_openapi() -> str:
    from deskpool.api.app import build_route_table
    from deskpool.api.openapi import render_document
    from deskpool.host import discover

    return render_document(build_route_table(discover(_environ())))


def cmd_openapi_write(args: argparse.Namespace) -> int:
    """Write the OpenAPI document generated from the code."""
    return _write_generated(Path(args.path), _render_openapi())


def cmd_openapi_check(args: argparse.Namespace) -> int:
    """Fail when the checked-in OpenAPI document differs from the code."""
    return _check_generated(Path(args.path), _render_openapi(), "deskpool openapi write")


def _write_generated(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


def _write_or_check_generated(args: argparse.Namespace, text: str, fix: str) -> int:
    """Write ``text`` to ``args.path``, or with ``--check`` verify that it is there."""
    path = Path(args.path)
    if args.check:
        return _check_generated(path, text, fix)
    return _write_generated(path, text)


def _check_generated(path: Path, expected: str, fix: str) -> int:
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current == expected:
        print(f"{path} is up to date")
        return 0
    print(f"{path} is out of date; run `{fix}` and commit the result", file=sys.stderr)
    return EXIT_CHECK_FAILED


# ---------------------------------------------------------------------------------- config


def cmd_config_show(args: argparse.Namespace) -> int:
    """Print the effective configuration, secrets redacted."""
    from deskpool.host import bootstrap

    process = bootstrap(_environ(), None, log_setup=False)
    config = process.config
    width = max(len(name) for name in config)
    for name, value in config.display().items():
        source = config.source(name)
        print(f"{name:<{width}}  {value}  ({source})")
    return 0


def cmd_config_check(args: argparse.Namespace) -> int:
    """Validate the configuration only."""
    from deskpool.host import bootstrap

    process = bootstrap(_environ(), None, log_setup=False)
    print(f"configuration is valid ({len(process.config)} settings)")
    return 0


def _render_config_reference() -> str:
    from deskpool.config import render_reference
    from deskpool.host import discover

    return render_reference(discover(_environ()).settings())


def cmd_config_doc(args: argparse.Namespace) -> int:
    """Write (or with ``--check``, verify) the configuration reference."""
    return _write_or_check_generated(args, _render_config_reference(), "deskpool config doc")


def cmd_hooks_doc(args: argparse.Namespace) -> int:
    """Write (or with ``--check``, verify) the hook reference."""
    from deskpool.hookdoc import render_hook_reference

    return _write_or_check_generated(args, render_hook_reference(), "deskpool hooks doc")


# --------------------------------------------------------------------------------- plugins


def cmd_plugins(args: argparse.Namespace) -> int:
    """List installed plugins, drivers and components with their distributions."""
    from deskpool.host import discover
    from deskpool.plugins import list_installed

    rows = list_installed(discover(_environ()))
    headers = ("GROUP", "NAME", "DISTRIBUTION", "VERSION", "LOADED", "TARGET")
    table = [
        (r.group, r.name, r.distribution, r.version, "yes" if r.loaded else "no", r.target)
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in [headers, *table]) for i in range(len(headers))]
    for row in [headers, *table]:
        cells = (str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip())
    return 0


# --------------------------------------------------------------------------------- secrets


def cmd_secrets_generate_key(args: argparse.Namespace) -> int:
    """Print a new master key for ``SECRETS_MASTER_KEY``: 32 random bytes, base64."""
    import base64

    print(base64.b64encode(os.urandom(32)).decode("ascii"))
    return 0


async def _with_secrets_table(config: Any, work: Callable[[Db], Awaitable[_T]]) -> _T:
    """Run ``work(pool)`` against the database once its schema is known to be current."""
    from deskpool.db import current_pool

    async with current_pool(config) as pool:
        return await work(pool)


def _print_key_usage(usage: Any) -> None:
    rows = dict.fromkeys(k for k in (usage.current_key_id, *usage.previous_key_ids) if k)
    rows.update(dict.fromkeys(usage.counts))
    table = [("KEY ID", "ROLE", "VALUES")]
    table += [(key_id, usage.role(key_id), str(usage.counts.get(key_id, 0))) for key_id in rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def cmd_secrets_status(args: argparse.Namespace) -> int:
    """Show how many sealed values are under each master key id."""
    from deskpool.host import bootstrap
    from deskpool.secret_rotation import KeyUsage, count_by_key_id
    from deskpool.secrets import build_secret_store

    process = bootstrap(_environ(), [], log_setup=False)
    store = build_secret_store(process.plugins, process.config)
    counts = asyncio.run(_with_secrets_table(process.config, count_by_key_id))
    usage = KeyUsage.of(counts, store)
    _print_key_usage(usage)
    print(f"total: {usage.total} sealed value(s)")
    if usage.under_previous:
        print(f"{usage.under_previous} under the previous key: run `deskpool secrets rewrap`")
    if usage.unknown:
        print(
            f"{sum(usage.unknown.values())} under key ids no configured key matches: the "
            f"processes refuse to start until the key they were sealed with is configured"
        )
        return EXIT_CHECK_FAILED
    return 0


def cmd_secrets_rewrap(args: argparse.Namespace) -> int:
    """Re-wrap every sealed value under ``SECRETS_MASTER_KEY``, in batches (resumable)."""
    from deskpool.host import bootstrap
    from deskpool.secret_rotation import (
        KeyUsage,
        RewrapBatch,
        RewrapTotals,
        count_by_key_id,
        rewrap_all,
    )
    from deskpool.secrets import build_secret_store

    process = bootstrap(_environ(), [])
    store = build_secret_store(process.plugins, process.config)
    if store.current_key_id is None:
        raise StartupError(
            "SECRETS_MASTER_KEY is not set; `deskpool secrets rewrap` re-wraps every sealed "
            "value under it (see docs/operators/secrets.md)"
        )

    def progress(batch: RewrapBatch, totals: RewrapTotals) -> None:
        print(
            f"batch {totals.batches}: re-wrapped {batch.rewrapped} of {batch.examined} "
            f"({totals.rewrapped} so far)",
            flush=True,
        )

    async def work(pool: Db) -> tuple[RewrapTotals, KeyUsage]:
        before = KeyUsage.of(await count_by_key_id(pool), store)
        print(
            f"re-wrapping under key id {store.current_key_id}: "
            f"{before.total - before.under_current} of {before.total} value(s) to do",
            flush=True,
        )
        totals = await rewrap_all(pool, store, batch_size=args.batch_size, on_batch=progress)
        return totals, KeyUsage.of(await count_by_key_id(pool), store)

    totals, after = asyncio.run(_with_secrets_table(process.config, work))
    print(
        f"done: re-wrapped {totals.rewrapped} value(s); {totals.changed_meanwhile} changed "
        f"meanwhile (written afresh by a running process); {len(totals.failed)} could not be "
        f"opened"
    )
    previous = ", ".join(after.previous_key_ids) or "none configured"
    print(f"remaining under the previous key ({previous}): {after.under_previous}")
    if after.unknown:
        print(f"remaining under unknown key ids: {sum(after.unknown.values())}")
    if after.under_previous or after.unknown:
        print("run `deskpool secrets rewrap` again; see `deskpool secrets status`")
        return EXIT_CHECK_FAILED
    return 0


def _batch_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 10000:
        raise argparse.ArgumentTypeError("must be between 1 and 10000")
    return value


# ------------------------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``deskpool`` command."""
    parser = argparse.ArgumentParser(
        prog="deskpool", description="deskpool: virtual desktop administration platform"
    )
    parser.add_argument("--version", action="version", version=f"deskpool {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run components until SIGTERM/SIGINT")
    run.add_argument(
        "components", nargs="+", metavar="COMPONENT", help="api, worker, gateway, web, or all"
    )
    run.set_defaults(func=cmd_run)

    dev = commands.add_parser(
        "dev", help="migrate and run everything with a development identity provider"
    )
    dev.add_argument("--state-dir", default=".run", help="where the dev issuer keeps its keys")
    dev.add_argument("--issuer-port", type=int, default=8090, help="port of the dev issuer")
    dev.add_argument(
        "--hypervisor",
        choices=("simulator", "libvirt"),
        default="simulator",
        help="the demo's desktops: simulated, or real tiny VMs on the local libvirt",
    )
    dev.add_argument(
        "--libvirt-prefix",
        default="deskpool-dev",
        help="with --hypervisor libvirt: the prefix of the template, storage pool and desktops",
    )
    dev.set_defaults(func=cmd_dev)

    commands.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)

    openapi = commands.add_parser("openapi", help="the OpenAPI document").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    for name, func, text in (
        ("write", cmd_openapi_write, "write the document generated from the code"),
        ("check", cmd_openapi_check, "fail when the checked-in document differs"),
    ):
        sub = openapi.add_parser(name, help=text)
        sub.add_argument("--path", default=OPENAPI_DOCUMENT_PATH)
        sub.set_defaults(func=func)

    config = commands.add_parser("config", help="configuration").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    config.add_parser("show", help="effective configuration, secrets redacted").set_defaults(
        func=cmd_config_show
    )
    config.add_parser("check", help="validate the configuration only").set_defaults(
        func=cmd_config_check
    )
    doc = config.add_parser("doc", help="write the Markdown configuration reference")
    doc.add_argument("--path", default=CONFIG_REFERENCE_PATH)
    doc.add_argument("--check", action="store_true", help="fail when the file differs")
    doc.set_defaults(func=cmd_config_doc)

    hooks = commands.add_parser("hooks", help="the hook reference").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    hooks_doc = hooks.add_parser("doc", help="write the Markdown hook reference")
    hooks_doc.add_argument("--path", default=HOOK_REFERENCE_PATH)
    hooks_doc.add_argument("--check", action="store_true", help="fail when the file differs")
    hooks_doc.set_defaults(func=cmd_hooks_doc)

    commands.add_parser(
        "plugins", help="installed and loaded plugins with their distributions"
    ).set_defaults(func=cmd_plugins)

    secrets = commands.add_parser("secrets", help="secrets at rest").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    secrets.add_parser(
        "generate-key", help="print a new SECRETS_MASTER_KEY (32 random bytes, base64)"
    ).set_defaults(func=cmd_secrets_generate_key)
    secrets.add_parser("status", help="sealed values per master key id").set_defaults(
        func=cmd_secrets_status
    )
    rewrap = secrets.add_parser(
        "rewrap", help="re-wrap every sealed value under SECRETS_MASTER_KEY (resumable)"
    )
    rewrap.add_argument(
        "--batch-size", type=_batch_size, default=500, help="values per batch (default 500)"
    )
    rewrap.set_defaults(func=cmd_secrets_rewrap)

    from deskpool.licensing.commands import add_parser as add_license_parser

    add_license_parser(commands)

    from deskpool.identity.commands import add_parser as add_admin_parser

    add_admin_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deskpool`` command."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except StartupError as error:
        print(f"deskpool: {error}", file=sys.stderr)
        return EXIT_STARTUP
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
