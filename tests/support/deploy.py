"""Paths the deployment tests share (``make test-deploy``)."""

from __future__ import annotations

from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "deskpool"
