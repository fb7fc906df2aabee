"""The Grafana dashboard (k8s/components/observability) queries only metrics the code defines, with labels
those metrics have, and renders as a ConfigMap Grafana's sidecar loads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

import gateway.app
import services.common.metrics
import services.llm_gateway.metrics
import services.orchestrator.metrics

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "k8s" / "components" / "observability"
DASHBOARD = COMPONENT / "grafana-dashboard.json"
# Labels Prometheus adds to every scraped series, and a histogram's bucket bound.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "le"}
PROMQL_WORDS = {"sum", "rate", "by", "histogram_quantile", "le"}


def _defined() -> dict[str, tuple[str, set[str]]]:
    """Every series name the code exports -> (metric name, its label names)."""
    out: dict[str, tuple[str, set[str]]] = {}
    for module in (services.common.metrics, services.llm_gateway.metrics, services.orchestrator.metrics, gateway.app):
        for value in vars(module).values():
            if not isinstance(value, MetricWrapperBase):
                continue
            name, labels = value._name, set(value._labelnames)
            if isinstance(value, Counter):
                suffixes = ["_total"]
            elif isinstance(value, Histogram):
                suffixes = ["_bucket", "_sum", "_count"]
            else:
                suffixes = [""]
            for s in suffixes:
                out[name + s] = (name, labels)
    return out


def _queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = []
    for panel in dashboard["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    return exprs


def test_every_queried_metric_and_label_is_defined_in_the_code():
    defined = _defined()
    queries = _queries()
    assert len(queries) >= 15
    seen = set()
    for expr in queries:
        for series, matchers in re.findall(r"(trellis_[a-z_]+)(\{[^}]*\})?", expr):
            assert series in defined, f"the dashboard queries {series}, which no code defines: {expr}"
            seen.add(defined[series][0])
            labels = set(re.findall(r"(\w+)\s*(?:=~|!=|!~|=)", matchers))
            for grouping in re.findall(r"by \(([^)]*)\)", expr):
                labels |= {g.strip() for g in grouping.split(",")}
            unknown = labels - defined[series][1] - TARGET_LABELS
            assert not unknown, f"{series} has no label {sorted(unknown)}: {expr}"
    # Runs, services, tokens, time to first token and errors are all on it.
    assert {"trellis_grpc_requests", "trellis_grpc_errors", "trellis_grpc_request_seconds", "trellis_http_requests",
            "trellis_llm_tokens", "trellis_llm_time_to_first_token_seconds", "trellis_llm_errors"} <= seen


def test_dashboard_is_valid_grafana_json_with_a_datasource_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_component_renders_a_configmap_for_the_grafana_sidecar(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "components": [os.path.relpath(COMPONENT, tmp_path)]}))  # kustomize wants it relative
    kubectl = Path(sys.executable).parent / "kubectl"
    proc = subprocess.run([str(kubectl), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [cm] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "trellis-grafana-dashboard"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["grafana-dashboard.json"]) == json.loads(DASHBOARD.read_text())
