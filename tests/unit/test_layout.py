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


def test_platform_never_imports_a_plugin() -> None:
    offenders = []
    for path in (REPO / "platform" / "deskpool").rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(("import deskpool_", "from deskpool_")):
                offenders.append(f"{path.relative_to(REPO)}: {stripped}")
    assert offenders == []
