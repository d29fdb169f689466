"""The Grafana dashboard and the monitoring example, checked without an engine: structure Grafana
needs to import and provision it, every query parsed by Prometheus's own promtool, every metric it
names served by the exporter, and the compose/provisioning files pointing at each other.

The queries' values against a real Prometheus fed by the real engine: test_fleet_engine.py.
Layout after SGLang's examples/monitoring (docker-compose.yaml, prometheus.yaml,
grafana/datasources/datasource.yaml, grafana/dashboards/config/dashboard.yaml, grafana/dashboards/json/).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from benchmarks.support.analysis_streams import H, session
from eagle3scope.exporter.fleet import Fleet
from eagle3scope.exporter.metrics import FleetCollector

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "monitoring"
DASHBOARD = EXAMPLE / "grafana" / "dashboards" / "json" / "eagle3scope.json"
PANEL_TYPES = {"stat", "timeseries", "bargauge", "table", "state-timeline"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def served_names() -> set[str]:
    """Every sample name the exporter serves for a healthy and a broken publisher."""
    fleet = Fleet()
    fleet.ingest(session(200, accept_p=0.7))
    broken = session(200, accept_p=0.0, algorithm="EAGLE",
                     step_kw={"feature_width": H, "fc": False, "capture": {"on": False, "layers": None}})
    fleet.ingest([f.__class__(f.kind, "r1", f.n, f.t, f.body) for f in broken])
    return {s.name for fam in FleetCollector(fleet).collect() for s in fam.samples}


def test_dashboard_structure_is_importable_and_provisionable():
    d = dashboard()
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("model", "publisher"):
        assert variables[name]["type"] == "query" and variables[name]["multi"] and variables[name]["includeAll"]
    assert "$model" in variables["publisher"]["definition"]  # publishers narrowed by the chosen model
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES and p["title"] and p["datasource"]["uid"] == "${datasource}"
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']} overlaps another"
        cells |= mine
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert "$publisher" in t["expr"] and "$model" in t["expr"], t["expr"]
    titles = " ".join(p["title"].lower() for p in d["panels"])
    for wanted in ("acceptance length over time", "per-position", "distribution", "violations", "timeline",
                   "fc applied vs skipped", "frames lost"):
        assert wanted in titles


def test_every_metric_the_dashboard_queries_is_served():
    names = served_names()
    used = {m for e in exprs() for m in re.findall(r"\b(eagle3scope_[a-z_]+)\b", e)}
    assert used and used <= names, used - names


def test_promtool_parses_every_query(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") == "1":
            pytest.fail("promtool missing (make prometheus installs Debian's prometheus package)")
        pytest.skip("promtool missing (make prometheus)")
    rules = [{"record": f"eagle3scope:dashboard_query_{i}",
              "expr": e.replace("$model", ".*").replace("$publisher", ".*")
                       .replace("$__rate_interval", "1m").replace("$__range", "1h")}
             for i, e in enumerate(exprs())]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
    config = subprocess.run([promtool, "check", "config", str(EXAMPLE / "prometheus.yaml")], capture_output=True,
                            text=True)
    assert config.returncode == 0, config.stdout + config.stderr


def test_compose_and_provisioning_point_at_each_other():
    compose = yaml.safe_load((EXAMPLE / "docker-compose.yaml").read_text())
    services = compose["services"]
    assert {"sglang", "exporter", "prometheus", "grafana"} <= set(services)
    mounts = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            host, container = volume.split(":")[:2]
            if host.startswith("."):
                assert (EXAMPLE / host).exists(), f"{name}: {host} missing"
                mounts[container] = (EXAMPLE / host).resolve()
    provider = yaml.safe_load((EXAMPLE / "grafana/dashboards/config/dashboard.yaml").read_text())["providers"][0]
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent.resolve()
    assert mounts["/etc/grafana/provisioning/dashboards"] == (EXAMPLE / "grafana/dashboards/config").resolve()
    assert mounts["/etc/grafana/provisioning/datasources"] == (EXAMPLE / "grafana/datasources").resolve()
    datasource = yaml.safe_load((EXAMPLE / "grafana/datasources/datasource.yaml").read_text())["datasources"][0]
    prometheus_listen = [a for a in services["prometheus"]["command"] if a.startswith("--web.listen-address=")]
    assert datasource["type"] == "prometheus" and datasource["url"].endswith(prometheus_listen[0].split("=")[1])
    scrape = yaml.safe_load((EXAMPLE / "prometheus.yaml").read_text())
    targets = {t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    exporter_listen = re.search(r"--listen ([^\s\"]+)", services["exporter"]["command"])[1]
    assert exporter_listen in targets
    shim_endpoint = re.search(r"--endpoint ([^\s\"]+)", services["sglang"]["command"])
    if shim_endpoint:
        assert f"--connect {shim_endpoint[1]}" in services["exporter"]["command"]
    else:  # both on the default (the shim's private socket): the same runtime directory, on a shared volume
        assert "--connect" not in services["exporter"]["command"]
        runtime = [set(e for e in services[n].get("environment", []) if e.startswith("XDG_RUNTIME_DIR=")) for n in ("sglang", "exporter")]
        assert runtime[0] == runtime[1] and len(runtime[0]) == 1, runtime
        where = next(iter(runtime[0])).split("=", 1)[1]
        shared = [{v for v in services[n]["volumes"] if v.endswith(f":{where}")} for n in ("sglang", "exporter")]
        assert shared[0] == shared[1] and len(shared[0]) == 1 and next(iter(shared[0])).split(":")[0] in compose["volumes"]
