"""The Helm chart renders, lints strictly and yields valid Kubernetes manifests.

Rendering and linting use the Helm SDK embedded in ``helm-python-sdk`` (no helm binary); every
rendered manifest is validated with ``kubernetes-validate --strict`` for the two newest
Kubernetes versions it bundles. Nothing here installs the chart: no cluster runs on this machine.
"""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from tests.support.deploy import (
    CHART,
    DEPLOY,
)

PRODUCTION = yaml.safe_load((DEPLOY / "helm" / "values-production.yaml").read_text())
VALUE_SETS: dict[str, dict[str, Any]] = {"default": {}, "production": PRODUCTION}
COMPONENTS = ("api", "worker", "gateway", "web")


def newest_kubernetes_versions(count: int = 2) -> list[str]:
    """The newest minor versions whose schemas kubernetes-validate bundles."""

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    plain = sorted({v for v in all_versions() if v.count(".") == 2}, key=key)
    return plain[-count:]


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every manifest the chart renders for ``values`` (NOTES.txt aside)."""
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values)
        files = chart.render(values, name="dp", namespace="deskpool", is_install=True)
    manifests = []
    for path, text in files.items():
        if path.endswith("NOTES.txt"):
            continue
        manifests += [doc for doc in yaml.safe_load_all(text) if doc]
    return manifests


def by_kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint_strict_passes(name: str) -> None:
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [], report
    assert problems == [], report


# ServiceMonitor is a CRD (Prometheus Operator): kubernetes-validate bundles no schema for it,
# so it is checked against the CRD's required shape here.
SERVICE_MONITOR_KIND = ("monitoring.coreos.com/v1", "ServiceMonitor")


@pytest.mark.parametrize("version", newest_kubernetes_versions())
@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_manifest_validates_strictly(name: str, version: str) -> None:
    manifests = render(VALUE_SETS[name])
    assert manifests
    for manifest in manifests:
        if (manifest["apiVersion"], manifest["kind"]) == SERVICE_MONITOR_KIND:
            endpoints = manifest["spec"]["endpoints"]
            assert manifest["spec"]["selector"]["matchLabels"]
            assert all(e["port"] == "metrics" and e["path"] == "/metrics" for e in endpoints)
            continue
        kubernetes_validate.validate(manifest, version, strict=True)


def test_one_deployment_per_component_with_probes_pdb_and_labels() -> None:
    manifests = render({})
    deployments = by_kind(manifests, "Deployment")
    pdbs = by_kind(manifests, "PodDisruptionBudget")
    for component in COMPONENTS:
        deployment = deployments[f"dp-deskpool-{component}"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == component
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["run", component]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        assert f"dp-deskpool-{component}" in pdbs


def test_termination_grace_exceeds_the_drain_deadlines() -> None:
    deployments = by_kind(render({}), "Deployment")

    def grace(component: str) -> int:
        spec = deployments[f"dp-deskpool-{component}"]["spec"]["template"]["spec"]
        return int(spec["terminationGracePeriodSeconds"])

    # WORKER_SHUTDOWN_TIMEOUT 30s, API_SHUTDOWN_TIMEOUT 10s (SPEC 8.1 and 8.5).
    assert grace("worker") > 30
    assert grace("api") > 10


def test_migrations_run_as_a_hook_job_before_upgrades() -> None:
    for values, install_hook in (({}, "post-install"), (PRODUCTION, "pre-install")):
        jobs = [m for m in render(values) if m["kind"] == "Job"]
        assert len(jobs) == 1
        hooks = jobs[0]["metadata"]["annotations"]["helm.sh/hook"].split(",")
        assert install_hook in hooks
        assert "pre-upgrade" in hooks
        container = jobs[0]["spec"]["template"]["spec"]["containers"][0]
        assert container["args"] == ["migrate"]


def test_production_values_take_secrets_from_the_existing_secret() -> None:
    manifests = render(PRODUCTION)
    assert by_kind(manifests, "Secret") == {}, "existingSecret: the chart creates no Secret"
    assert not by_kind(manifests, "StatefulSet"), "external PostgreSQL: nothing bundled"
    hpas = by_kind(manifests, "HorizontalPodAutoscaler")
    assert set(hpas) == {f"dp-deskpool-{c}" for c in COMPONENTS}
    api = by_kind(manifests, "Deployment")["dp-deskpool-api"]
    sources = api["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"secretRef": {"name": "deskpool-secrets"}} in sources
    ingress = by_kind(manifests, "Ingress")["dp-deskpool"]
    paths = {
        p["path"]: p["backend"]["service"]["name"]
        for p in ingress["spec"]["rules"][0]["http"]["paths"]
    }
    assert paths["/api"] == "dp-deskpool-api"
    assert paths["/websocket-tunnel"] == "dp-deskpool-gateway"
    assert paths["/"] == "dp-deskpool-web"
    assert by_kind(manifests, "ServiceMonitor")


def test_monitoring_is_off_by_default_and_renders_the_shipped_rules_and_dashboard() -> None:
    assert not by_kind(render({}), "PrometheusRule")
    assert "dp-deskpool-dashboard" not in by_kind(render({}), "ConfigMap")
    monitoring = DEPLOY / "monitoring"
    manifests = render(
        {
            "monitoring": {
                "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus"}},
                "grafanaDashboard": {"enabled": True},
            }
        }
    )
    rule = by_kind(manifests, "PrometheusRule")["dp-deskpool"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    # The rules as shipped, their {{ $labels }} templates untouched by Helm.
    assert rule["spec"] == yaml.safe_load((monitoring / "alerts.yaml").read_text())
    dashboard = by_kind(manifests, "ConfigMap")["dp-deskpool-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((monitoring / "dashboard.json").read_text())
    assert json.loads(dashboard["data"]["deskpool.json"]) == shipped
    kubernetes_validate.validate(dashboard, newest_kubernetes_versions()[-1], strict=True)


def test_desktopd_log_level_reaches_guacd() -> None:
    manifests = render({"desktopd": {"logLevel": "debug"}})
    guacd = by_kind(manifests, "Deployment")["dp-deskpool-desktopd"]
    env = guacd["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "GUACD_LOG_LEVEL", "value": "debug"} in env


def test_schema_refuses_unknown_keys_and_secrets_in_config() -> None:
    with helm.Chart.load(str(CHART)) as chart:
        for bad in (
            {"apii": {}},
            {"config": {"DATABASE_URL": "postgresql://x"}},
            {"config": {"GATEWAY_PUBLIC_WS_URL": "ws://insecure"}},
            {"desktopd": {"logLevel": "loud"}},
        ):
            with pytest.raises(helm.HelmError):
                chart.validate_schema(bad)
