"""The source roots are not packages, so ``platform`` stays the standard library module."""

import platform
import sysconfig
from pathlib import Path

REPO = Path(__file__).parents[2]


def test_import_platform_is_the_standard_library_module() -> None:
    assert Path(platform.__file__).parent == Path(sysconfig.get_paths()["stdlib"])
    assert callable(platform.python_version)


def test_source_roots_have_no_init_module() -> None:
    assert not (REPO / "platform" / "__init__.py").exists()
    assert not (REPO / "plugins" / "__init__.py").exists()


def test_every_module_has_a_docstring() -> None:
    missing = []
    for root in ("platform", "plugins", "hypervisor_drivers"):
        for path in (REPO / root).rglob("*.py"):
            if "build" in path.parts:
                continue
            text = path.read_text(encoding="utf-8").lstrip()
            if not (text.startswith('"""') or text.startswith("'''")):
                missing.append(str(path.relative_to(REPO)))
    assert missing == []


#: The most lines a module of the platform, a plugin or a driver may have (issue 35): past it, a
#: module holds more than one use case and is split by use case, not by line count.
MOST_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    over = {}
    for root in ("platform", "plugins", "hypervisor_drivers"):
        for path in (REPO / root).rglob("*.py"):
            if "build" in path.parts:
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MOST_LINES:
                over[str(path.relative_to(REPO))] = lines
    assert over == {}


def imported_packages(root: Path) -> list[tuple[str, str]]:
    """``(file, top-level package)`` of every import statement under ``root``."""
    found = []
    for path in root.rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")) and len(stripped.split()) > 1:
                package = stripped.split()[1].split(".")[0]
                found.append((str(path.relative_to(REPO)), package))
    return found


def test_platform_never_imports_a_plugin() -> None:
    # The driver contract is a distribution the platform depends on, not a plugin.
    offenders = [
        (path, package)
        for path, package in imported_packages(REPO / "platform" / "deskpool")
        if package.startswith("deskpool_") and package != "deskpool_driver_api"
    ]
    assert offenders == []


def test_drivers_and_the_contract_never_import_the_platform() -> None:
    offenders = [
        (path, package)
        for path, package in imported_packages(REPO / "hypervisor_drivers")
        if package == "deskpool"
    ]
    assert offenders == []
