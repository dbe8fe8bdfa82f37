"""Where a test runs, from where it lives: its group and its place in a parallel run (lanes)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from tests.support import lanes


@dataclass
class Item:
    """What ``lanes`` reads of a collected test: its id, its fixtures, its marks."""

    nodeid: str
    fixturenames: list[str] = field(default_factory=list)
    marks: list[pytest.Mark] = field(default_factory=list)

    def iter_markers(self, name: str) -> Iterator[pytest.Mark]:
        return (mark for mark in self.marks if mark.name == name)

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.marks.append(marker.mark)


def group(item: Item) -> str | None:
    return lanes.group_of(item)


def test_libvirt_modules_are_a_group_each_so_two_may_run_side_by_side() -> None:
    conformance = "tests/integration/libvirt_driver/test_libvirt_conformance.py"
    assert group(Item(f"{conformance}::T::test_a", ["libvirt_lab"])) == conformance
    assert group(Item(f"{conformance}::test_b")) == conformance  # named after libvirt
    pool = "tests/integration/pools/test_x.py"
    assert group(Item(f"{pool}::test_c", ["libvirt_credentials"])) == pool
    assert group(Item("tests/e2e/test_dev_libvirt.py::test_d")) == "tests/e2e/test_dev_libvirt.py"


def test_unit_tests_named_after_libvirt_and_other_integration_tests_are_spread() -> None:
    assert group(Item("tests/unit/drivers/test_libvirt_domain_xml.py::test_e")) is None
    assert group(Item("tests/integration/api/test_contract.py::test_f")) is None


def test_a_parallel_run_puts_the_unit_tests_first_then_the_longest() -> None:
    names = [
        "tests/test_zz_no_secret_in_logs.py::test_final",
        "tests/integration/api/test_problems.py::test_short",
        "tests/integration/desktopd/test_vnc_bridge.py::test_slow",
        "tests/e2e/test_console.py::test_browser",
        "tests/e2e/test_libvirt_pool.py::test_vms",
        "tests/unit/test_config.py::test_unit",
    ]
    items = [Item(name) for name in names]
    lanes.arrange(items, parallel=True)
    assert [item.nodeid for item in items] == names[::-1]
    serial = [Item(name) for name in names]
    lanes.arrange(serial)
    assert [item.nodeid.split("::")[0].split("/")[1] for item in serial] == [
        "unit",
        "integration",
        "integration",
        "e2e",
        "e2e",
        "test_zz_no_secret_in_logs.py",
    ]
    assert [mark.name for mark in items[1].marks] == ["slow", "xdist_group"]
