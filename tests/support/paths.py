"""Where the repository and the suite's fixture files are."""

from __future__ import annotations

from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parents[2]
#: Files the tests read or install (``tests/fixtures``).
FIXTURES = REPO / "tests" / "fixtures"
