"""The shipped alerting rules and dashboard (deploy/monitoring): valid, tested, on real metrics.

``promtool`` (Debian's ``prometheus`` package; ``make test`` installs it through
scripts/ensure-promtool.sh) checks the rules and runs their unit tests (alerts.test.yaml). The
dashboard's queries are checked by the same parser, as recording rules. A metric named by a rule
or a panel must be one the platform or a plugin declares, so a renamed metric cannot leave an
alert that never fires.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "dashboard.json"
#: Suffixes prometheus_client adds to a counter's or a histogram's samples.
SAMPLE_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum")
METRIC = re.compile(r"\bdeskpool_[a-z_]+\b")
DECLARED = re.compile(r'(?:Counter|Gauge|Histogram)\(\s*"(deskpool_[a-z_]+)"', re.MULTILINE)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: run `make test` (it installs it) or apt-get install prometheus"
        )
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, timeout=120, cwd=MONITORING
    )


def declared_metrics() -> set[str]:
    """Every metric name declared in the platform's and the plugins' code."""
    names: set[str] = set()
    for folder in ("platform", "plugins"):
        for source in (ROOT / folder).rglob("*.py"):
            names.update(DECLARED.findall(source.read_text()))
    return names


def base_name(sample: str, declared: set[str]) -> str:
    if sample in declared:
        return sample
    for suffix in SAMPLE_SUFFIXES:
        if sample.endswith(suffix) and sample.removesuffix(suffix) in declared:
            return sample.removesuffix(suffix)
    return sample


def alert_expressions() -> dict[str, str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def dashboard_expressions() -> dict[str, str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {
        f"{panel['title']} {target['refId']}": target["expr"]
        for panel in panels
        for target in panel.get("targets", [])
    }


def test_rules_are_valid() -> None:
    result = run_promtool("check", "rules", ALERTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_expressions())} rules found" in result.stdout


def test_rules_pass_their_unit_tests() -> None:
    result = run_promtool("test", "rules", "alerts.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_and_has_a_runbook() -> None:
    tests = yaml.safe_load((MONITORING / "alerts.test.yaml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert tested == set(alert_expressions())
    guide = (ROOT / "docs" / "operators" / "alerting.md").read_text()
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            anchor = rule["annotations"]["runbook"].split("#")[1]
            assert anchor == rule["alert"].lower()
            assert f"### {rule['alert']}" in guide, f"{rule['alert']} has no section in the guide"


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{index}", "expr": expr}
                    for index, expr in enumerate(dashboard_expressions().values())
                ],
            }
        ]
    }
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [promtool(), "check", "rules", "dashboard-rules.yaml"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_and_dashboard_name_only_declared_metrics() -> None:
    declared = declared_metrics()
    assert {"deskpool_pool_desktops", "deskpool_logon_failures"} <= declared
    queries = {**alert_expressions(), **dashboard_expressions()}
    unknown = {
        where: sorted(
            name for name in METRIC.findall(expr) if base_name(name, declared) not in declared
        )
        for where, expr in queries.items()
    }
    assert {where: names for where, names in unknown.items() if names} == {}
