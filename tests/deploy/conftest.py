"""Paths shared by the deployment tests (``make test-deploy``, tox environment ``deploy``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "deskpool"
