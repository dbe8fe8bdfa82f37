"""Builders of pools, desktops and observed VMs for the pool domain tests."""

from __future__ import annotations

from datetime import datetime

import pytest
from tests.support.pool_builders import (
    NOW,
    DesktopBuilder,
    PoolBuilder,
    VmBuilder,
    build_pool,
    build_vm,
    desktop_builder,
)


@pytest.fixture
def make_pool() -> PoolBuilder:
    """Build a pool: ``make_pool(min_size=3)``."""
    return build_pool


@pytest.fixture
def make_desktop() -> DesktopBuilder:
    """Build a desktop of a pool: ``make_desktop(pool, state=DesktopState.FAILED)``."""
    return desktop_builder()


@pytest.fixture
def make_vm() -> VmBuilder:
    """Build the observed VM of a desktop: ``make_vm(desktop, power_state=...)``."""
    return build_vm


@pytest.fixture
def now() -> datetime:
    """The time every test runs at."""
    return NOW
