"""Where each test runs: its order in the run, the ``slow`` lane, its ``xdist`` group.

Applied to every collected test by ``tests/conftest.py`` (``pytest_collection_modifyitems``),
by folder and file, so a new test gets them from where it lives (see tests/README.md):

- **order**: unit tests first, then integration, then end-to-end, then the checks over the
  whole run (``tests/test_*.py``): a broken unit test is reported in seconds.
- **slow**: every end-to-end test and the few integration modules listed in :data:`SLOW`;
  ``make test-fast`` runs everything else (``-m "not slow"``).
- **group** (``pytest-xdist``'s ``--dist loadgroup``): tests of one group run on one worker,
  one after the other. An end-to-end module's tests share the module's database and
  processes, and the tests of a module on the local libvirt share the worker's libvirt lab
  (one template domain, one storage pool, whose domains a test lists by the lab's prefix): one
  group per module. Two such modules may run side by side: each worker makes a lab of its own
  (its prefix names the worker's process). Everything else is spread test by test: it binds
  ports the system picks and uses databases and Redis key prefixes of its own.
- **order in a parallel run** (on an xdist worker; ``tests/conftest.py`` keeps xdist from
  reordering it): unit tests, then the longest first: the modules on libvirt (minutes of
  booting VMs), the end-to-end modules, the slow integration modules, then the rest of the
  integration tests, hundreds of short ones that fill the workers' last minutes evenly, and
  the run's own checks last.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, TypeVar

import pytest


class CollectedTest(Protocol):
    """What the lanes read of a collected test (a :class:`pytest.Item` has it all)."""

    nodeid: str

    def iter_markers(self, name: str) -> Iterator[pytest.Mark]: ...

    def add_marker(self, marker: pytest.MarkDecorator) -> None: ...


Test = TypeVar("Test", bound=CollectedTest)

#: Integration test modules (or folders) in the slow lane, besides ``tests/e2e/``: each takes a
#: minute or more of the run (the contract fuzzes every operation; the VNC bridge drives real
#: X and VNC servers; the libvirt driver boots real VMs).
SLOW = (
    "tests/e2e/",
    "tests/integration/api/test_contract.py",
    "tests/integration/desktopd/test_vnc_bridge.py",
    "tests/integration/libvirt_driver/",
)

#: Fixtures that reach the worker's libvirt lab: a test using one runs in its module's group.
LIBVIRT_FIXTURES = frozenset({"libvirt_lab", "libvirt_connection", "libvirt_credentials"})

#: The order of the folders in a run; anything else (the run's own checks) comes last.
ORDER = ("tests/unit/", "tests/integration/", "tests/e2e/", "tests/deploy/")


def path_of(item: CollectedTest) -> str:
    """The test's file, relative to the repository (``tests/unit/test_config.py``)."""
    return item.nodeid.split("::", 1)[0]


def rank(item: CollectedTest) -> int:
    """The position of the test's folder in :data:`ORDER`."""
    path = path_of(item)
    return next((i for i, folder in enumerate(ORDER) if path.startswith(folder)), len(ORDER))


def is_slow(item: CollectedTest) -> bool:
    """Whether the test is in the slow lane."""
    return path_of(item).startswith(SLOW)


def only_slow(path: str, is_folder: bool) -> bool:
    """Whether everything under ``path`` (relative to the repository) is in the slow lane."""
    return (f"{path}/" if is_folder else path).startswith(SLOW)


def on_libvirt(item: CollectedTest) -> bool:
    """Whether the test runs VMs on the local libvirt (a lab fixture, or a module named so)."""
    path = path_of(item)
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(fixtures & LIBVIRT_FIXTURES) or (
        not path.startswith("tests/unit/") and "libvirt" in path.rsplit("/", 1)[-1]
    )


def group_of(item: CollectedTest) -> str | None:
    """The test's ``xdist`` group (its module), or ``None`` when any worker may run it."""
    path = path_of(item)
    if path.startswith("tests/e2e/") or on_libvirt(item):
        return path
    return None


def parallel_rank(item: CollectedTest) -> int:
    """The test's place in a parallel run: unit tests, then the longest first (see above)."""
    path = path_of(item)
    if path.startswith("tests/unit/"):
        return 0
    if on_libvirt(item):
        return 1
    if path.startswith("tests/e2e/"):
        return 2
    if is_slow(item):
        return 3
    return 4 if path.startswith("tests/integration/") else 5


def arrange(items: list[Test], *, parallel: bool = False) -> None:
    """Order ``items`` in place and mark each (``slow``, ``xdist_group``) as said above.

    :param parallel: the order of a parallel run (on an xdist worker), instead of the folders'.
    """
    items.sort(key=rank)  # stable: inside a folder, the collection's order
    if parallel:
        items.sort(key=parallel_rank)
    for item in items:
        if is_slow(item) and not any(True for _ in item.iter_markers("slow")):
            item.add_marker(pytest.mark.slow)
        group = group_of(item)
        if group is not None and not _has_group(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(group))


def _has_group(markers: Iterable[pytest.Mark]) -> bool:
    return any(True for _ in markers)
