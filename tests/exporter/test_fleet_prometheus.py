"""A real Prometheus scraping the exporter fed by the shim's real publisher (synthetic steps, no
engine): the dashboard's queries over the run equal ``check`` on a recording of the same frames.

The same assertions over the real engine's healthy and aux-off runs: test_fleet_engine.py. This one
needs no engine, so a machine without the engine venv still checks the PromQL end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from support.fleet_support import FleetObservers, PrometheusServer, assert_dashboard_matches_check, prometheus_binary
from benchmarks.support.synthetic import hello_body, load_body, step_body

from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from eagle3scope_shim.publisher import Publisher


@pytest.fixture
def prometheus(tmp_path):
    binary = prometheus_binary()
    if binary is None:
        if os.environ.get("EAGLE3SCOPE_REQUIRE_ENGINE") == "1":
            pytest.fail("prometheus missing (make prometheus installs Debian's package)")
        pytest.skip("prometheus missing (make prometheus)")
    server = PrometheusServer(binary, tmp_path / "prometheus")
    yield server
    server.close()


def test_dashboard_over_a_real_prometheus_equals_check(prometheus, tmp_path):
    endpoint = fresh_ipc_endpoint()
    with FleetObservers("synthetic", endpoint, tmp_path / "fleet", prometheus) as fleet:
        pub = Publisher(endpoint, "synthetic:1:dp0", sticky_interval_s=0.5)
        pub.start()
        pub.set_sticky("hello", hello_body())
        pub.set_sticky("load", load_body())
        time.sleep(2.5)  # hello known, a few scrapes at zero
        for seq in range(600):  # healthy, then the aux-capture break from step 400 on
            pub.submit("step", step_body(seq, bs=2, t_ns=time.time_ns(), aux_off=seq >= 400))
            time.sleep(0.01)
        time.sleep(1.5)
        pub.close(2.0)
    done = subprocess.run([sys.executable, "-m", "eagle3scope", "check", str(fleet.recording), "--json"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert report["summary"]["steps"] == 600
    violations = assert_dashboard_matches_check(dict(fleet.result, prometheus=prometheus), report)
    assert {"aux-capture-off", "fc-bypassed"} <= {rule for rule, _ in violations}
