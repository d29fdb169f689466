"""A real Prometheus server and the fleet observers attached to the shared scenario servers.

``PrometheusServer`` runs Debian's ``prometheus`` binary (``make prometheus`` installs it) on a
loopback port with a private config and data directory, scraping every second the targets written
to a file_sd file. ``FleetObservers`` rides along one scenario run of ``scenario_result`` (no extra
SGLang server): the ``exporter`` command, a ``record`` of the whole run (the same frames the
exporter saw, for ``check``), and the live ``gate`` command once the server is up.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

DASHBOARD = Path(__file__).resolve().parents[2] / "examples/monitoring/grafana/dashboards/json/eagle3scope.json"

SCRAPE_S = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, timeout: float = 10.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class PrometheusServer:
    def __init__(self, binary: str, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.targets_file = self.workdir / "targets.json"
        self.targets: list[dict] = []
        self._write_targets()
        config = self.workdir / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_S:g}s\n  scrape_timeout: {SCRAPE_S:g}s\n"
            f"scrape_configs:\n  - job_name: eagle3scope\n    file_sd_configs:\n"
            f"      - files: ['{self.targets_file}']\n        refresh_interval: 1s\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start:\n{(self.workdir / 'prometheus.log').read_text()[-3000:]}")
            time.sleep(0.3)

    def _write_targets(self) -> None:
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.targets))
        os.replace(tmp, self.targets_file)  # file_sd must never read a half-written file

    def add_target(self, address: str, **labels: str) -> None:
        self.targets.append({"targets": [address], "labels": labels})
        self._write_targets()

    def api(self, path: str, **params) -> dict:
        out = http_json(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        assert out["status"] == "success", out
        return out["data"]

    def query(self, expr: str, at: float) -> list[dict]:
        data = self.api("query", query=expr, time=f"{at:.3f}")
        assert data["resultType"] == "vector", data
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = SCRAPE_S) -> list[dict]:
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
        assert data["resultType"] == "matrix", data
        return data["result"]

    def wait_for(self, expr: str, accept, timeout: float = 60.0) -> float:
        """Poll ``expr`` at now until ``accept(result)``; return the evaluation time."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.time()
            result = self.query(expr, now)
            if accept(result):
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus: {expr} never satisfied within {timeout} s; last {result}")
            time.sleep(0.25)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "eagle3scope", *args], **kw)


def _stop(proc: subprocess.Popen, timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


def metric_value(text: str, name: str) -> float | None:
    """Sum of one metric's samples in an exposition text (for 'has the exporter settled?')."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") or line.startswith(name + " ")]
    return sum(values) if values else None


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def panel_expr(title: str) -> str:
    (expr,) = [e for t, e in dashboard_queries() if t == title]
    return expr


def bind(expr: str, publisher: str, window_s: int) -> str:
    """What Grafana sends for one publisher and a time range covering the run."""
    out = expr.replace("$model", ".*").replace("$publisher", re.escape(publisher).replace("\\", "\\\\"))
    out = out.replace("$__rate_interval", f"{window_s}s").replace("$__range", f"{window_s}s")
    assert "$" not in out, out
    return out


def values(result: list[dict], key: str | None = None) -> dict:
    return {(r["metric"].get(key) if key else None): float(r["value"][1]) for r in result}


def assert_dashboard_matches_check(fleet: dict, report: dict) -> dict:
    """The dashboard's queries, bound to the run's publisher over the whole run and evaluated by
    Prometheus at its end, equal ``check --json`` (``report``) on a recording of the same frames.
    Returns the violations as {(rule, severity): active}."""
    prom, t0, t1, scenario = fleet["prometheus"], fleet["t_start"], fleet["t_end"], fleet["scenario"]
    summary = report["summary"]
    (publisher,) = summary["publishers"]
    k = len(summary["per_position"])
    window = math.ceil(t1 - t0) + 2
    q = lambda title: prom.query(bind(panel_expr(title), publisher, window), t1)  # noqa: E731

    # raw counters at the end of the run: exactly the recording's
    sel = f'{{scenario="{scenario}"}}'
    counted = {name: values(prom.query(f"sum(eagle3scope_{name}_total{sel})", t1))[None]
               for name in ("steps", "request_steps", "frames_received")}
    assert (counted["steps"], counted["request_steps"]) == (summary["steps"], summary["request_steps"]), \
        (counted, {key: summary[key] for key in ("steps", "request_steps", "frames")})

    # the dashboard's per-position acceptance over the run is check's per-position acceptance
    per_position = values(q("Per-position acceptance over the range"), "position")
    for i, rate in enumerate(summary["per_position"], start=1):
        if rate is None:
            assert str(i) not in per_position or math.isnan(per_position[str(i)])
        else:
            assert per_position[str(i)] == pytest.approx(rate, rel=1e-9), (i, per_position)
    mean = values(q("Mean acceptance length"))[None]
    assert mean == pytest.approx(summary["mean_accept_length"], rel=1e-9)

    # the histogram and the unconditional (vLLM-style) rates follow from check's histogram
    hist, n = summary["histogram"], summary["request_steps"]
    at_least = [sum(hist[j:]) for j in range(k + 1)]
    vllm = values(q("Acceptance by draft position (vLLM-style)"), "position")
    for i in range(1, k + 1):
        assert vllm[str(i)] == pytest.approx(at_least[i] / n, rel=1e-9)
    buckets = values(q("Accept-length distribution"), "le")
    for length in range(1, k + 2):
        assert buckets[str(length)] / buckets["+Inf"] == pytest.approx(1 - at_least[length] / n if length <= k else 1.0)

    # the violation gauges are check's violations, active or healed
    got = {(r["metric"]["rule"], r["metric"]["severity"]): float(r["value"][1])
           for r in prom.query(f"eagle3scope_violation_active{sel}", t1)}
    want = {(v["id"], v["severity"]): 1.0 if v["active"] else 0.0 for v in report["violations"]}
    assert got == want
    table = {(r["metric"]["rule"], r["metric"]["severity"]): float(r["value"][1]) for r in q("Violations")}
    assert table == want
    errors = values(q("Active violations"), "severity")
    assert errors.get("error", 0.0) == sum(1 for v in report["violations"] if v["active"] and v["severity"] == "error")

    return want


#: The gate the fixture runs against the live scenario servers, and its floor.
GATE_STEPS = 40
GATE_MIN_ACCEPT_LENGTH = 2.0  # healthy mixes greedy and sampled requests (about 2.9); aux-off about 1.0


class FleetObservers:
    """Exporter + whole-run recorder + live gate around one scenario run (see module docstring)."""

    def __init__(self, scenario: str, endpoint: str, workdir: Path, prometheus: PrometheusServer | None) -> None:
        self.scenario, self.endpoint, self.workdir, self.prometheus = scenario, endpoint, Path(workdir), prometheus
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.recording = self.workdir / "whole-run.e3s"
        self.junit = self.workdir / "gate.xml"
        self.gate = None
        self.result: dict = {"scenario": scenario, "recording": self.recording, "junit": self.junit}

    def __enter__(self) -> "FleetObservers":
        """Before the server starts: both subscribers connect as soon as the shim binds."""
        self.exporter = _cli("exporter", "--connect", self.endpoint, "--listen", "127.0.0.1:0", "--forget-after", "3600",
                             stderr=subprocess.PIPE, text=True)
        line = self.exporter.stderr.readline()
        if "/metrics" not in line:
            raise RuntimeError(f"exporter did not start: {line}{self.exporter.stderr.read()}")
        self.metrics_url = line.split(" on ", 1)[1].strip()
        self.result["metrics_url"] = self.metrics_url
        self.recorder_log = self.workdir / "record.log"
        with open(self.recorder_log, "wb") as log:
            self.recorder = _cli("record", "--connect", self.endpoint, "--out", str(self.recording), stderr=log)
        deadline = time.monotonic() + 120
        while b"recording " not in self.recorder_log.read_bytes():  # its SUB socket exists: frames are not missed
            if self.recorder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"recorder did not start: {self.recorder_log.read_text()}")
            time.sleep(0.1)
        if self.prometheus is not None:
            self.result["t_start"] = time.time()
            address = urllib.parse.urlparse(self.metrics_url).netloc
            self.prometheus.add_target(address, scenario=self.scenario)
            self.prometheus.wait_for(f'up{{scenario="{self.scenario}"}} == 1', bool)
        return self

    def wait_for_idle_publisher(self) -> None:
        """Once the server is up, before its first request: Prometheus has scraped the publisher's
        counters at zero. Without that sample ``increase()`` over the run extrapolates each
        series' first value back towards zero by its own slope, and per-position ratios drift
        from ``check``'s by a few per cent (seen when traffic began within a scrape of the hello)."""
        if self.prometheus is not None:
            self.prometheus.wait_for(f'eagle3scope_draft_reached_total{{scenario="{self.scenario}",position="1"}} == 0',
                                     bool)

    def start_gate(self) -> None:
        """Once the server serves: the canary a deployment would run."""
        self.gate = _cli("gate", "--connect", self.endpoint, "--steps", str(GATE_STEPS), "--timeout", "240",
                         "--min-accept-length", str(GATE_MIN_ACCEPT_LENGTH), "--junit", str(self.junit), "--json",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __exit__(self, *exc) -> None:
        """After the server exited: let the last frames land, the last scrape happen, then stop."""
        try:
            if self.gate is not None:
                out, err = self.gate.communicate(timeout=300)
                self.result["gate"] = {"code": self.gate.returncode, "stdout": out, "stderr": err}
            # The exporter's frame count stops moving once the server is gone and every frame landed:
            # unchanged for 2 s (a loaded 2-core machine can stall a subscriber for over 0.5 s). Only
            # then is the recorder, which reads the same stream, stopped.
            settled, still = None, 0
            for _ in range(60):
                with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
                    text = r.read().decode()
                frames = metric_value(text, "eagle3scope_frames_received_total")
                still = still + 1 if frames is not None and frames == settled else 0
                if still == 4:
                    break
                settled = frames
                time.sleep(0.5)
            self.result["exporter_text"] = text
            time.sleep(0.5)
            self.result["recorder_code"] = _stop(self.recorder)
            if self.prometheus is not None and settled is not None:
                self.result["t_end"] = self.prometheus.wait_for(
                    f'sum(eagle3scope_frames_received_total{{scenario="{self.scenario}"}})',
                    lambda r: bool(r) and float(r[0]["value"][1]) == settled)
        finally:
            for proc in (self.gate, self.recorder, self.exporter):
                if proc is not None:
                    _stop(proc)
            self.exporter.stderr.close()
