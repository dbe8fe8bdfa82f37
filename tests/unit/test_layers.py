"""The layer order is a test (in the spirit of Home Assistant's ``hassfest`` dependency check).

The imports of ``platform/deskpool``, ``plugins`` and ``hypervisor_drivers`` are read with
:mod:`ast` (nothing is imported) and checked against the order declared here, in one place,
which ``docs/architecture.md`` draws (:func:`test_the_architecture_draws_this_order`):

- the platform's packages (``deskpool.<package>``; a top-level module is a package of its own)
  import only packages of their layer or below (:data:`LAYERS`), and no two packages import
  each other, directly or round about, at run time;
- a model (:data:`MODEL_FILES`) does no I/O: it imports no driver of a database, a key-value
  store or HTTP, and no store, service or runtime;
- a store imports no service;
- the runtime core (:data:`RUNTIME_CORE`) never imports ``deskpool.api``;
- the platform never imports a plugin; a driver imports nothing first-party but the driver
  contract (``deskpool_driver_api``).

An import under ``if TYPE_CHECKING:`` is left out: it never runs, and naming a type of a layer
above is how an inversion is typed (``reconciliation/jobs.py`` types its factory's
``PoolReconcilerService`` so). An import inside a function runs when the function does, not at
import time: it cannot make an import cycle, so the cycle check leaves it out, but it is a
dependency all the same, so the layer order holds for it too (hiding an upward import in a
function is not a fix). Every exception is listed below with its reason; an exception that is no
longer needed fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).parents[2]
PLATFORM = REPO / "platform"

#: The platform's layers, bottom first: a package imports packages of its layer or below.
#: Within a layer, packages may import each other as long as no cycle forms.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "deskpool",
            "errors",
            "ids",
            "values",
            "unset",
            "names",
            "log",
            "config_values",
            "events",
            "registry",
            "drivers",
            "guacamole",
            "permissions",
            "auth",
            "outages",
            "hookspecs",
            "per_registry",
            "task_stop",
        ),
    ),
    (
        "runtime core",
        (
            "config",
            "area_settings",
            "db",
            "kv",
            "runtime",
            "secrets",
            "secret_rotation",
            "listener",
            "plugins",
            "ops",
            "host",
            "serving_loop",
        ),
    ),
    ("shared records", ("audit", "audit_query", "live", "idempotency")),
    ("actor", ("actor",)),
    ("event export", ("webhooks", "syslog_export")),
    ("jobs", ("jobs",)),
    (
        "clusters, licensing, recordings, client_policy",
        ("clusters", "licensing", "recordings", "client_policy"),
    ),
    ("pools", ("pools",)),
    ("identity", ("identity",)),
    ("desktops", ("desktops",)),
    ("starts", ("starts",)),
    ("sessions", ("sessions",)),
    ("outage brokering", ("outage_brokering",)),
    ("notices, messages", ("notices", "messages")),
    ("revocation", ("revocation",)),
    ("rollouts, schedules", ("rollouts", "schedules")),
    ("reconciliation", ("reconciliation",)),
    ("provisioning", ("provisioning",)),
    ("pool administration", ("pool_admin",)),
    ("vm_events, reports, helpdesk", ("vm_events", "reports", "helpdesk")),
    ("api", ("api",)),
    (
        "entry points",
        ("cli", "__main__", "hookdoc", "bound_ahead", "desktopd", "testing", "dev", "dev_libvirt"),
    ),
)

#: The runtime core: what builds and runs a process; it reaches the API only as a component.
RUNTIME_CORE = frozenset(dict(LAYERS)["runtime core"])

#: Models: plain data and rules, no I/O (file names inside the platform's packages).
MODEL_FILES = frozenset(
    {
        "model.py",
        "states.py",
        "allocation.py",
        "plan.py",
        "planner.py",
        "naming.py",
        "rules.py",
        "principal.py",
        "logoffs.py",
        "samples.py",
        "logons.py",
        "phases.py",
        "document.py",
    }
)
#: What a model may not import: drivers of I/O, and the platform's modules that do I/O.
IO_PACKAGES = frozenset({"asyncpg", "redis", "aiohttp", "httpx", "socket"})
IO_MODULES = frozenset(
    {
        "deskpool.db",
        "deskpool.runtime",
        "deskpool.kv",
        "deskpool.audit",
        "deskpool.jobs.queue",
        "deskpool.jobs.queue_keyed",
    }
)

#: Upward imports still in the code, each with why it is there and how it goes away.
#: ``(importing module, imported module)``. Remove a line when its import is gone.
_RUNTIME = (
    "inside functions: the runtime builds the drivers, the recording store and the licensing "
    "context on first use, for every component; to be handed in by host.py"
)

KNOWN_UPWARD: dict[tuple[str, str], str] = {
    ("deskpool.runtime", "deskpool.clusters.drivers"): _RUNTIME,
    ("deskpool.runtime", "deskpool.recordings.stores"): _RUNTIME,
    ("deskpool.runtime", "deskpool.licensing.context"): _RUNTIME,
    ("deskpool.runtime", "deskpool.licensing.service"): _RUNTIME,
}

#: A model's imports of I/O still in the code, with why. Remove a line when its import is gone.
KNOWN_MODEL_IO: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One imported module, as written in one file."""

    importer: str
    imported: str
    path: Path
    line: int
    in_function: bool

    def where(self) -> str:
        deferred = " (inside a function)" if self.in_function else ""
        place = f"{self.path.relative_to(REPO)}:{self.line}"
        return f"{place}: {self.importer} imports {self.imported}{deferred}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(nodes: list[ast.stmt], in_function: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement that runs, with whether it runs only when a function is called."""
    for node in nodes:
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from _statements(node.orelse, in_function)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function
            continue
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                for child in children:
                    if isinstance(child, ast.stmt):
                        yield from _statements([child], inner)
                    else:  # an except handler or a match case
                        yield from _statements(child.body, inner)


def imports_of(path: Path, root: Path, modules: frozenset[str]) -> Iterator[Import]:
    """The modules ``path`` imports (a name imported from a package counts as its module)."""
    importer = module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node, in_function in _statements(tree.body, False):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        for name in dict.fromkeys(names):
            yield Import(importer, name, path, node.lineno, in_function)


def source_files(root: Path) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*.py")
        if "build" not in path.parts and not any(part.endswith(".egg-info") for part in path.parts)
    )


@cache
def _platform_imports() -> tuple[Import, ...]:
    files = source_files(PLATFORM / "deskpool")
    modules = frozenset(module_name(path, PLATFORM) for path in files)
    return tuple(found for path in files for found in imports_of(path, PLATFORM, modules))


def platform_imports() -> list[Import]:
    """Every import of the platform that runs (those under ``TYPE_CHECKING`` left out)."""
    return list(_platform_imports())


def package_of(module: str) -> str:
    """``deskpool.pools.model`` is in ``pools``; ``deskpool.actor`` is ``actor``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(package: str) -> int:
    for index, (_, packages) in enumerate(LAYERS):
        if package in packages:
            return index
    raise AssertionError(
        f"the package deskpool.{package} is in no layer: add it to LAYERS in {__file__} "
        "(and to the drawing in docs/architecture.md)"
    )


def layer_name(package: str) -> str:
    return LAYERS[layer_of(package)][0]


def internal(imports: list[Import]) -> Iterator[Import]:
    for found in imports:
        first_party = found.imported.startswith("deskpool.") or found.imported == "deskpool"
        if first_party and package_of(found.importer) != package_of(found.imported):
            yield found


def package_cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected sets of packages of more than one, at run time (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for found in internal(imports):
        if not found.in_function:
            graph[package_of(found.importer)].add(package_of(found.imported))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                cycles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


HOW_TO_INVERT = (
    "Depend downward instead: move what both need to the lower package, or invert the edge the "
    "way deskpool.reconciliation.jobs does (the lower module declares a handler type and takes "
    "the handler as a parameter or a setter the composition fills in: the worker plugin, "
    "api/component.py or host.py), naming the upper type only under `if TYPE_CHECKING:`."
)


def upward_imports(imports: list[Import]) -> list[Import]:
    return [
        found
        for found in internal(imports)
        if layer_of(package_of(found.imported)) > layer_of(package_of(found.importer))
    ]


def test_every_package_is_in_a_layer() -> None:
    packages = {package_of(module_name(path, PLATFORM)) for path in source_files(PLATFORM)}
    for package in sorted(packages):
        layer_of(package)


def test_no_package_imports_a_layer_above_it() -> None:
    found = upward_imports(platform_imports())
    new = [item for item in found if (item.importer, item.imported) not in KNOWN_UPWARD]
    assert not new, "\n".join(
        [f"{len(new)} import(s) point up the layer order (tests/unit/test_layers.py, LAYERS):"]
        + [
            f"  {item.where()}: {layer_name(package_of(item.importer))!r} is below "
            f"{layer_name(package_of(item.imported))!r}"
            for item in new
        ]
        + [HOW_TO_INVERT]
    )
    stale = sorted(set(KNOWN_UPWARD) - {(item.importer, item.imported) for item in found})
    assert not stale, f"these exceptions no longer happen: remove them from KNOWN_UPWARD: {stale}"


def test_no_package_cycle_at_run_time() -> None:
    imports = [
        found
        for found in platform_imports()
        if (found.importer, found.imported) not in KNOWN_UPWARD
    ]
    cycles = package_cycles(imports)
    edges = defaultdict(list)
    for found in internal(imports):
        if not found.in_function:
            edges[package_of(found.importer), package_of(found.imported)].append(found)
    lines = []
    for members in cycles:
        lines.append(f"these packages import each other at run time: {', '.join(members)}")
        lines.append("  (one import per pair of packages; the ones going up LAYERS first)")
        pairs = sorted(
            (key for key in edges if key[0] in members and key[1] in members),
            key=lambda key: (layer_of(key[0]) >= layer_of(key[1]), key),
        )
        for source, target in pairs:
            items = edges[source, target]
            more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
            lines.append(f"  {items[0].where()}{more}")
    assert not cycles, "\n".join([*lines, HOW_TO_INVERT])


def test_models_do_no_io() -> None:
    offenders = []
    for found in platform_imports():
        if Path(found.path).name not in MODEL_FILES or (found.importer, found.imported) in (
            KNOWN_MODEL_IO
        ):
            continue
        leaf = found.imported.rpartition(".")[2]
        if (
            found.imported.split(".")[0] in IO_PACKAGES
            or any(found.imported == io or found.imported.startswith(f"{io}.") for io in IO_MODULES)
            or leaf in {"service", "repository", "stores", "queue"}
            or leaf.startswith("store")
            or leaf.endswith("_apply")
        ):
            offenders.append(found)
    assert not offenders, "\n".join(
        ["a model (MODEL_FILES) imports I/O, a store or a service:"]
        + [f"  {item.where()}" for item in offenders]
        + [
            "Move the record type it needs into a model and let the store import it, or do the "
            "I/O in the service and hand the model plain values."
        ]
    )


def test_stores_import_no_service() -> None:
    offenders = [
        found
        for found in platform_imports()
        if found.path.name.startswith("store") or found.path.name == "repository.py"
        if found.imported.rpartition(".")[2] == "service"
        or found.imported.rpartition(".")[2].endswith("_apply")
    ]
    assert not offenders, "\n".join(
        ["a store imports a service (stores hold SQL; services call stores, not the reverse):"]
        + [f"  {item.where()}" for item in offenders]
    )


def test_the_runtime_core_never_imports_the_api() -> None:
    offenders = [
        found
        for found in platform_imports()
        if package_of(found.importer) in RUNTIME_CORE
        and (found.imported == "deskpool.api" or found.imported.startswith("deskpool.api."))
    ]
    assert not offenders, "\n".join(
        ["the runtime core imports deskpool.api (the API is a component the core runs):"]
        + [f"  {item.where()}" for item in offenders]
        + [HOW_TO_INVERT]
    )


def first_party_imports(root: Path, source_root: Path) -> Iterator[Import]:
    """The imports of first-party code (``deskpool``, ``deskpool_*``) under ``root``."""
    for path in source_files(root):
        for found in imports_of(path, source_root, frozenset()):
            top = found.imported.split(".")[0]
            if top == "deskpool" or top.startswith("deskpool_"):
                yield found


def test_the_platform_never_imports_a_plugin() -> None:
    offenders = [
        found.where()
        for found in first_party_imports(PLATFORM / "deskpool", PLATFORM)
        if found.imported.split(".")[0] not in ("deskpool", "deskpool_driver_api")
    ]
    assert not offenders, "\n".join(
        ["the platform imports a plugin (reach it through a hook or a registry instead):"]
        + [f"  {item}" for item in offenders]
    )


def test_drivers_import_only_the_driver_contract() -> None:
    offenders = []
    for distribution in sorted((REPO / "hypervisor_drivers").iterdir()):
        for package in sorted(distribution.glob("deskpool_*/__init__.py")):
            own = package.parent.name
            for found in first_party_imports(package.parent, distribution):
                top = found.imported.split(".")[0]
                if top not in (own, "deskpool_driver_api"):
                    offenders.append(found.where())
    assert not offenders, "\n".join(
        ["a driver imports first-party code other than the driver contract:"]
        + [f"  {item}" for item in offenders]
        + ["A driver and its conformance run need only deskpool_driver_api."]
    )


def drawing() -> str:
    """The layer order as docs/architecture.md draws it (Mermaid), top layer first."""
    lines = ["```mermaid", "flowchart TB"]
    for index in reversed(range(len(LAYERS))):
        name, packages = LAYERS[index]
        label = name if name == ", ".join(packages) else f"{name}: {', '.join(packages)}"
        lines.append(f'    L{index}["{label}"]')
    for index in reversed(range(1, len(LAYERS))):
        lines.append(f"    L{index} --> L{index - 1}")
    lines.append("```")
    return "\n".join(lines)


def test_the_architecture_draws_this_order() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert drawing() in text, (
        "docs/architecture.md must draw LAYERS of tests/unit/test_layers.py; paste:\n" + drawing()
    )
