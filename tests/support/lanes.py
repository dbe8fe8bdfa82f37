"""Where each test runs: its order in the run, the ``slow`` lane, its ``xdist`` group.

Applied to every collected test by ``tests/conftest.py`` (``pytest_collection_modifyitems``),
by folder and file, so a new test gets them from where it lives (see tests/README.md):

- **order**: unit tests first, then integration, then end-to-end, then the checks over the
  whole run (``tests/test_*.py``): a broken unit test is reported in seconds.
- **slow**: every end-to-end test and the few integration modules listed in :data:`SLOW`;
  ``make test-fast`` runs everything else (``-m "not slow"``).
- **group** (``pytest-xdist``'s ``--dist loadgroup``): tests of one group run on one worker,
  one after the other. The tests on the local libvirt share this run's libvirt lab (one
  template domain, one storage pool): group ``libvirt``. An end-to-end module's tests share the
  module's database and processes: one group per module. Everything else is spread test by
  test: it binds ports the system picks and uses databases and Redis key prefixes of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

#: Integration test modules (or folders) in the slow lane, besides ``tests/e2e/``: each takes a
#: minute or more of the run (the contract fuzzes every operation; the VNC bridge drives real
#: X and VNC servers; the libvirt driver boots real VMs).
SLOW = (
    "tests/e2e/",
    "tests/integration/api/test_contract.py",
    "tests/integration/desktopd/test_vnc_bridge.py",
    "tests/integration/libvirt_driver/",
)

#: Fixtures that reach the run's libvirt lab: a test using one runs in group ``libvirt``.
LIBVIRT_FIXTURES = frozenset({"libvirt_lab", "libvirt_connection", "libvirt_credentials"})

#: The order of the folders in a run; anything else (the run's own checks) comes last.
ORDER = ("tests/unit/", "tests/integration/", "tests/e2e/", "tests/deploy/")


def path_of(item: pytest.Item) -> str:
    """The test's file, relative to the repository (``tests/unit/test_config.py``)."""
    return item.nodeid.split("::", 1)[0]


def rank(item: pytest.Item) -> int:
    """The position of the test's folder in :data:`ORDER`."""
    path = path_of(item)
    return next((i for i, folder in enumerate(ORDER) if path.startswith(folder)), len(ORDER))


def is_slow(item: pytest.Item) -> bool:
    """Whether the test is in the slow lane."""
    return path_of(item).startswith(SLOW)


def only_slow(path: str, is_folder: bool) -> bool:
    """Whether everything under ``path`` (relative to the repository) is in the slow lane."""
    return (f"{path}/" if is_folder else path).startswith(SLOW)


def group_of(item: pytest.Item) -> str | None:
    """The test's ``xdist`` group, or ``None`` when any worker may run it."""
    path = path_of(item)
    fixtures = set(getattr(item, "fixturenames", ()))
    if "libvirt" in path.rsplit("/", 1)[-1] or "/libvirt" in path or fixtures & LIBVIRT_FIXTURES:
        return "libvirt"
    if path.startswith("tests/e2e/"):
        return path
    return None


def arrange(items: list[pytest.Item]) -> None:
    """Order ``items`` in place and mark each (``slow``, ``xdist_group``) as said above."""
    items.sort(key=rank)  # stable: inside a folder, the collection's order
    for item in items:
        if is_slow(item) and not any(True for _ in item.iter_markers("slow")):
            item.add_marker(pytest.mark.slow)
        group = group_of(item)
        if group is not None and not _has_group(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(group))


def _has_group(markers: Iterable[pytest.Mark]) -> bool:
    return any(True for _ in markers)
