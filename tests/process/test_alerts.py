"""The alerts and the dashboard of deploy/monitoring, checked by Prometheus' own promtool (built from its
Go module by `make tools`): the rules load, each alert fires and stays quiet as its test in
fixtures/alerts_test.yaml says, and every query names only metrics the operator exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from kcpshard import metrics
from kcpshard_testkit.tools import tool

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
ALERTS_TEST = Path(__file__).parent / "fixtures" / "alerts_test.yaml"
RULES_NAME = "kcpshard.rules.yaml"
# PromQL words that are no metric: functions, aggregations, keywords, and our label names.
_NOT_METRICS = {
    "max", "min", "sum", "count", "by", "without", "increase", "rate", "absent", "histogram_quantile",
    "le", "namespace", "shard", "reason", "result", "step", "version", "offset", "and", "or", "unless",
}  # fmt: skip


def _rule_groups() -> dict[str, Any]:
    """The PrometheusRule's spec: what the Prometheus Operator writes into a rule file."""
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    return dict(rule["spec"])


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool("promtool")), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def _exported() -> set[str]:
    """The series names the operator's metrics module exports, by each metric's type."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "info": ["_info"]}
    names = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


def _metric_names(expr: str) -> set[str]:
    bare = re.sub(r'"[^"]*"', "", re.sub(r"\{[^}]*\}", "", expr))  # no label matchers, no strings
    bare = re.sub(r"\[[^]]*\]", "", bare)  # no range durations
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if w not in _NOT_METRICS}


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    (tmp_path / RULES_NAME).write_text(yaml.safe_dump(_rule_groups()))
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yaml")
    return tmp_path


def test_promtool_loads_the_rules(rules_dir: Path) -> None:
    done = _promtool("check", "rules", RULES_NAME, cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout, done.stdout


def test_every_alert_fires_and_stays_quiet_as_its_promtool_test_says(rules_dir: Path) -> None:
    done = _promtool("test", "rules", "alerts_test.yaml", cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {
        case["alertname"]
        for t in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
        for case in t["alert_rule_test"]
    }
    alerts = {r["alert"] for g in _rule_groups()["groups"] for r in g["rules"]}
    assert tested == alerts


def test_a_broken_alert_fails_its_promtool_test(rules_dir: Path) -> None:
    """The promtool tests can fail: an alert that waits longer than its test expects is caught."""
    groups = _rule_groups()
    groups["groups"][0]["rules"][0]["for"] = "30m"
    (rules_dir / RULES_NAME).write_text(yaml.safe_dump(groups))
    done = _promtool("test", "rules", "alerts_test.yaml", cwd=rules_dir)
    assert done.returncode != 0
    assert "KcpShardNotReady" in done.stdout + done.stderr


def test_the_dashboards_queries_parse_and_name_only_exported_metrics(tmp_path: Path) -> None:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    # promtool parses PromQL in rule files: each query becomes a recording rule.
    recorded = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"kcpshard:dashboard_{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump(recorded))
    done = _promtool("check", "rules", "dashboard.rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    exported = _exported()
    for expr in exprs:
        assert _metric_names(expr) <= exported, expr


def test_the_alerts_name_only_exported_metrics() -> None:
    exported = _exported()
    for group in _rule_groups()["groups"]:
        for rule in group["rules"]:
            assert _metric_names(rule["expr"]) <= exported, rule["expr"]
