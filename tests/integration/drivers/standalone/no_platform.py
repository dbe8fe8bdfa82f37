"""A pytest plugin for a run with only the driver contract: the platform cannot be imported.

Loaded with ``-p no_platform`` before anything is collected, it makes importing ``deskpool``
(the platform) or the platform's own dependencies (Redis, stevedore, voluptuous) fail, so a
driver or a conformance check that still reaches for them fails loudly.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

#: Top-level packages a driver and the conformance kit must not need.
BLOCKED = ("deskpool", "redis", "stevedore", "voluptuous")


class PlatformBlocker(importlib.abc.MetaPathFinder):
    """Refuses every import of a :data:`BLOCKED` package or one of its modules."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """Raise for a blocked package; let every other import go on."""
        if fullname.split(".", 1)[0] in BLOCKED:
            raise ImportError(f"{fullname} is not importable in a contract-only run")
        return None


loaded = sorted(name for name in sys.modules if name.split(".", 1)[0] in BLOCKED)
if loaded:
    raise RuntimeError(f"already imported before the run: {loaded}")
sys.meta_path.insert(0, PlatformBlocker())


def pytest_sessionfinish() -> None:
    """Check once more that nothing blocked was loaded (by a path around the finder)."""
    leaked = sorted(name for name in sys.modules if name.split(".", 1)[0] in BLOCKED)
    if leaked:
        raise RuntimeError(f"a contract-only run imported {leaked}")
