"""Fixtures of the identity tests: people with exactly the grants a test gives them."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.identity import (
    Directory,
)


@pytest.fixture
def directory(
    secure_runtime: Any, secure_api_client: Any, identity_provider: Any, bearer: Any
) -> Directory:
    """People on the run's database, calling the API of ``secure_runtime``."""
    return Directory(secure_runtime, secure_api_client, identity_provider.issuer_url, bearer)
