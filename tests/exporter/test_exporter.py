"""The exporter over real sockets with synthetic publishers: what it serves equals ``check``'s analysis,
labels stay bounded, publishers are held until their hello and forgotten when silent.

Scraped over HTTP and parsed with prometheus-client's own text parser. The real engine and a real
Prometheus server are in test_fleet_engine.py.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from benchmarks.support.analysis_streams import H, session
from eagle3scope.analysis import analyse
from eagle3scope.exporter.fleet import Fleet
from eagle3scope.exporter.metrics import PUBLISHER_LABELS
from eagle3scope.exporter.service import Exporter, parse_listen
from eagle3scope.wire import Frame
from eagle3scope.wire.endpoints import fresh_ipc_endpoint
from support.exporter_support import by, feed, renamed, scrape

BROKEN = dict(accept_p=0.0, algorithm="EAGLE", step_kw={"feature_width": H, "fc": False,
                                                         "capture": {"on": False, "layers": None}})


def test_served_values_are_checks_analysis_per_publisher():
    streams = {"host-a:1:dp0": renamed(session(600, bs=2, accept_p=0.7), "host-a:1:dp0"),
               "host-b:2:dp0": renamed(session(300, **BROKEN), "host-b:2:dp0")}
    exporter, fams = feed(streams)
    exporter.close()
    for src, frames in streams.items():
        state = analyse(frames)
        pub, summary = state.publishers[src], state.acceptance.summary()
        mine = dict(publisher=src)
        assert by(fams["eagle3scope_steps"], "eagle3scope_steps_total", **mine) == {(): summary["steps"]}
        assert by(fams["eagle3scope_request_steps"], "eagle3scope_request_steps_total", **mine) == {
            (): summary["request_steps"]}
        accepted = by(fams["eagle3scope_draft_accepted"], "eagle3scope_draft_accepted_total", **mine)
        reached = by(fams["eagle3scope_draft_reached"], "eagle3scope_draft_reached_total", **mine)
        for i, rate in enumerate(summary["per_position"], start=1):
            key = (("position", str(i)),)
            if rate is None:
                assert reached[key] == 0
            else:
                assert accepted[key] / reached[key] == pytest.approx(rate)
        hist = fams["eagle3scope_accept_length"]
        count = by(hist, "eagle3scope_accept_length_count", **mine)[()]
        total = by(hist, "eagle3scope_accept_length_sum", **mine)[()]
        assert total / count == pytest.approx(summary["mean_accept_length"])
        buckets = by(hist, "eagle3scope_accept_length_bucket", **mine)
        for j in range(len(summary["histogram"])):  # le = accepted drafts + 1
            assert buckets[(("le", str(j + 1)),)] == sum(summary["histogram"][: j + 1])
        violations = {dict(k)["rule"]: v for k, v in
                      by(fams["eagle3scope_violation_active"], "eagle3scope_violation_active", **mine).items()}
        assert violations == {v.id: 1.0 for v in state.violations()}
        skipped = by(fams["eagle3scope_draft_forwards"], "eagle3scope_draft_forwards_total", fc="skipped", **mine)
        assert sum(skipped.values()) == sum(p.fc_skipped for p in pub.passes.values())
        info = by(fams["eagle3scope_publisher_info"], "eagle3scope_publisher_info", **mine)
        assert len(info) == 1 and dict(next(iter(info)))["algorithm"] == pub.hello.args.algorithm
    broken = dict(publisher="host-b:2:dp0")
    fired = by(fams["eagle3scope_violations_fired"], "eagle3scope_violations_fired_total", **broken)
    assert {dict(k)["rule"] for k in fired} >= {"aux-capture-off", "fc-bypassed", "zero-acceptance"}
    assert by(fams["eagle3scope_aux_capture_on"], "eagle3scope_aux_capture_on", **broken) == {(): 0.0}
    assert by(fams["eagle3scope_violation_active"], "eagle3scope_violation_active", publisher="host-a:1:dp0") == {}
    assert by(fams["eagle3scope_exporter_publishers"], "eagle3scope_exporter_publishers") == {(): 2.0}


def test_positions_past_a_rounds_budget_are_not_served_as_reached():
    """Adaptive steps: a round that accepted every draft of a shorter budget did not reach the next
    position; the served reached/accepted counters are the analysis's, budgets included."""
    frames = renamed(session(300, bs=2, accept_p=0.8), "host-c:3:dp0")
    for i, f in enumerate(frames):
        if f.kind == "step" and f.body.get("mode") == "decode" and f.body["accepted"]:
            f.body["num_steps"] = max(f.body["accepted"]) if i % 3 else 3  # often exactly what was accepted
    exporter, fams = feed({"host-c:3:dp0": frames})
    exporter.close()
    total = analyse(frames).acceptance.total
    reached, accepted = total.positions(3)
    assert sum(total.capped[:3]) > 0
    mine = dict(publisher="host-c:3:dp0")
    served_reached = by(fams["eagle3scope_draft_reached"], "eagle3scope_draft_reached_total", **mine)
    served_accepted = by(fams["eagle3scope_draft_accepted"], "eagle3scope_draft_accepted_total", **mine)
    assert [served_reached[(("position", str(i)),)] for i in (1, 2, 3)] == reached
    assert [served_accepted[(("position", str(i)),)] for i in (1, 2, 3)] == accepted


def test_labels_are_bounded_and_never_per_request():
    exporter, fams = feed({"h:1:dp0": session(400, bs=4, accept_p=0.6)})
    exporter.close()
    allowed = set(PUBLISHER_LABELS) | {"position", "le", "mode", "fc", "rule", "severity", "seam", "status", "cause",
                                       "configured", "captured", "draft", "algorithm", "num_steps", "topk",
                                       "num_draft_tokens", "worker", "shim_version", "host"}
    series = [s for samples in fams.values() for s in samples]
    assert all(set(s.labels) <= allowed for s in series), {k for s in series for k in s.labels} - allowed
    assert not any("req-" in v for s in series for v in s.labels.values())
    assert len(series) < 120  # one publisher: tens of series, whatever the number of requests


def test_a_publisher_is_held_until_its_hello_and_counted_in_full_then():
    frames = session(200, accept_p=0.7)
    hello = next(f for f in frames if f.kind == "hello")
    rest = [f for f in frames if f.kind != "hello"]
    fleet = Fleet()
    fleet.ingest(rest)
    from eagle3scope.exporter.metrics import FleetCollector

    collector = FleetCollector(fleet)
    names = {s.name for fam in collector.collect() for s in fam.samples}
    assert "eagle3scope_steps_total" not in names  # no labels to give it yet
    fleet.ingest([Frame(hello.kind, hello.src, rest[-1].n + 1, rest[-1].t, hello.body)])
    steps = [s.value for fam in collector.collect() for s in fam.samples if s.name == "eagle3scope_steps_total"]
    assert steps == [200]


def test_silent_publishers_are_forgotten():
    now = [0.0]
    fleet = Fleet(forget_after_s=60, clock=lambda: now[0])
    fleet.ingest(renamed(session(50), "a"))
    now[0] = 30.0
    fleet.ingest(renamed(session(50), "b"))
    now[0] = 70.0
    with fleet.lock:
        fleet.expire()
    assert set(fleet.states) == {"b"} and fleet.forgotten == 1
    assert all(key[0] == "b" for key in fleet.fired)


def test_publishers_beyond_the_cap_are_counted_not_tracked_until_one_is_forgotten():
    """A publisher cycling its ``src`` cannot grow the exporter: the cap holds, the refusals are
    served as a counter, and a slot freed by forgetting a silent publisher is taken again."""
    from eagle3scope.exporter.metrics import FleetCollector

    now = [0.0]
    fleet = Fleet(forget_after_s=60, clock=lambda: now[0], max_publishers=2)
    for i, src in enumerate(("a", "b", "c", "d")):
        now[0] = 10.0 * i
        fleet.ingest(renamed(session(20), src))
    assert set(fleet.states) == {"a", "b"} and fleet.refused_frames == 2 * len(session(20))
    served = {s.name: s.value for fam in FleetCollector(fleet).collect() for s in fam.samples}
    assert served["eagle3scope_exporter_refused_frames_total"] == fleet.refused_frames
    now[0] = 65.0  # "a" silent for 65 s: forgotten, and "c" gets its place
    fleet.ingest(renamed(session(20), "c"))
    assert set(fleet.states) == {"b", "c"} and fleet.forgotten == 1


def test_fired_counts_each_time_a_rule_becomes_violated_again():
    healthy = session(100, accept_p=0.7)
    fleet = Fleet()
    fleet.ingest(healthy)
    n, t = healthy[-1].n, healthy[-1].t
    hook = lambda status, i: Frame("hook", "r0", n + i, t + i, {"seam": "verify", "status": status, "detail": "x"})  # noqa: E731
    fleet.ingest([hook("failed", 1)])
    fleet.ingest([hook("attached", 2)])
    fleet.ingest([hook("failed", 3)])
    assert fleet.fired[("r0", "hook-failed", "warning")] == 2


@pytest.mark.parametrize("text, expected", [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("9464", ("127.0.0.1", 9464)),
                                            ("[::1]:0", ("::1", 0)), (":8000", ("127.0.0.1", 8000))])
def test_listen_addresses(text, expected):
    assert parse_listen(text) == expected


def test_listen_rejects_garbage():
    with pytest.raises(ValueError):
        parse_listen("127.0.0.1:http")


def test_the_command_serves_on_loopback_and_stops_on_sigterm():
    endpoint = fresh_ipc_endpoint()
    proc = subprocess.Popen([sys.executable, "-m", "eagle3scope", "exporter", "--connect", endpoint,
                             "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "http://127.0.0.1:" in line, line
        url = line.split(" on ", 1)[1].strip()
        fams = scrape(url)
        assert by(fams["eagle3scope_exporter_publishers"], "eagle3scope_exporter_publishers") == {(): 0.0}
        assert "eagle3scope_exporter_process_resident_memory_bytes" in fams
        assert by(fams["eagle3scope_exporter_process_cpu_seconds"], "eagle3scope_exporter_process_cpu_seconds_total")[()] > 0
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
        proc.stderr.close()


def test_the_readmes_other_metrics_mean_what_the_table_says():
    """README "Fleet" metrics: the rolling mean is over the last 512 request-steps; capture-off steps,
    the aux layer set, frames received and lost per cause, hook failures and bad frames are counted
    as the frames say (expected values computed from the frames sent, not by the analysis)."""
    from benchmarks.support.analysis_streams import healthy_load

    healthy = renamed(session(600, bs=2, accept_p=0.6, seed=3), "host-a:1:dp0")
    last_beat = {"steps": 600, "dropped": 9, "hook_failures": 4, "queued": 0}
    healthy.append(Frame("heartbeat", "host-a:1:dp0", healthy[-1].n + 1, healthy[-1].t + 1, last_beat))
    sent = [f for i, f in enumerate(healthy) if i < 10 or i % 97 != 0]  # holes in the frame counter
    broken = renamed(session(300, **BROKEN), "host-b:2:dp0")
    exporter, fams = feed({"host-a:1:dp0": sent, "host-b:2:dp0": broken})
    exporter.close()
    a, b = dict(publisher="host-a:1:dp0"), dict(publisher="host-b:2:dp0")
    lengths = [x + 1 for f in sent if f.kind == "step" for x in f.body["accepted"]]
    rolling = by(fams["eagle3scope_accept_length_rolling"], "eagle3scope_accept_length_rolling", **a)[()]
    assert rolling == pytest.approx(sum(lengths[-512:]) / 512)
    assert rolling != pytest.approx(sum(lengths) / len(lengths))  # not the cumulative mean
    assert by(fams["eagle3scope_frames_received"], "eagle3scope_frames_received_total", **a) == {(): len(sent)}
    lost = by(fams["eagle3scope_frames_lost"], "eagle3scope_frames_lost_total", **a)
    assert lost == {(("cause", "transit"),): len(healthy) - len(sent), (("cause", "shim"),): 9}
    assert by(fams["eagle3scope_hook_failures"], "eagle3scope_hook_failures_total", **a) == {(): 4}
    off = by(fams["eagle3scope_aux_capture_off_steps"], "eagle3scope_aux_capture_off_steps_total", **b)
    assert off == {(): 300} and by(fams["eagle3scope_aux_capture_off_steps"],
                                   "eagle3scope_aux_capture_off_steps_total", **a) == {(): 0}
    aux = healthy_load()["aux"]
    layers = by(fams["eagle3scope_aux_layers_info"], "eagle3scope_aux_layers_info", **a)
    assert list(layers) == [(("captured", ",".join(map(str, aux["captured"]))),
                             ("configured", ",".join(map(str, aux["configured"]))))]
    assert by(fams["eagle3scope_exporter_bad_frames"], "eagle3scope_exporter_bad_frames_total") == {(): 0}


def test_the_exporter_keeps_no_advisor_rounds_a_viewer_does():
    """The exporter never advises: its per-publisher states hold no round log (~0.6 MB a publisher
    in a fleet of 256 otherwise), while the same stream analysed for the TUI keeps its rounds."""
    src = "host-a:1:dp0"
    frames = renamed(session(600, bs=2, accept_p=0.7), src)
    fleet = Fleet()
    fleet.ingest(frames)
    assert len(fleet.states[src].publishers[src].rounds.rounds) == 0
    assert fleet.states[src].publishers[src].decode_steps == analyse(frames).publishers[src].decode_steps > 0
    assert len(analyse(frames).publishers[src].rounds.rounds) > 0


def test_each_forgotten_publisher_counts_once_more():
    now = [0.0]
    fleet = Fleet(forget_after_s=60, clock=lambda: now[0])
    for i, src in enumerate(("a", "b")):
        now[0] = 10.0 * i
        fleet.ingest(renamed(session(20), src))
    now[0] = 200.0
    with fleet.lock:
        fleet.expire()
    assert fleet.states == {} and fleet.forgotten == 2


def test_the_hello_info_and_hook_status_carry_their_values_under_their_label_names():
    from eagle3scope.exporter.metrics import FleetCollector

    healthy = session(30)
    n, t = healthy[-1].n, healthy[-1].t
    fleet = Fleet()
    fleet.ingest([*healthy, Frame("hook", "r0", n + 1, t + 1, {"seam": "verify", "status": "failed", "detail": "x"})])
    samples = {s.name: s for fam in FleetCollector(fleet).collect() for s in fam.samples}
    info = samples["eagle3scope_publisher_info"].labels
    assert {k: info[k] for k in ("draft", "algorithm", "num_steps", "topk", "num_draft_tokens", "host")} == {
        "draft": "d", "algorithm": "EAGLE3", "num_steps": "3", "topk": "1", "num_draft_tokens": "4", "host": "box"}
    hooks = [s for fam in FleetCollector(fleet).collect() for s in fam.samples if s.name == "eagle3scope_hook_status"]
    assert [(s.labels["seam"], s.labels["status"], s.value) for s in hooks] == [("verify", "failed", 1.0)]
    assert samples["eagle3scope_aux_capture_on"].value == 1  # a 0/1 gauge: capture is on in a healthy stream
    assert samples["eagle3scope_publisher_last_frame_timestamp_seconds"].value == (t + 1) / 1e9  # ns to s, exactly


_PUB = ["dp_rank", "model", "publisher", "sglang_version"]
# README "Fleet": every family the collector serves, its type, HELP text (an interface: what Grafana and
# `curl /metrics` show) and label names, exactly
FAMILIES = {
    "eagle3scope_publisher": ("info", "What each publisher said in its hello.",
                              ["algorithm", "dp_rank", "draft", "host", "model", "num_draft_tokens", "num_steps",
                               "publisher", "sglang_version", "shim_version", "topk", "worker"]),
    "eagle3scope_steps": ("counter", "Decode steps (speculative rounds) seen.", _PUB),
    "eagle3scope_request_steps": (
        "counter", "Request-steps seen: one request in one decode step (one draft chain).", _PUB),
    "eagle3scope_draft_reached": (
        "counter", "Request-steps whose draft at this position was judged (every earlier draft accepted).",
        sorted(_PUB + ["position"])),
    "eagle3scope_draft_accepted": ("counter", "Request-steps whose draft at this position was accepted.",
                                   sorted(_PUB + ["position"])),
    "eagle3scope_accept_length": (
        "histogram", "Tokens committed per request-step, bucketed by accepted drafts + 1 (the bonus token); _sum "
        "counts the bonus tokens actually committed, so _sum/_count is check's mean acceptance length.",
        sorted(_PUB + ["le"])),
    "eagle3scope_accept_length_rolling": ("gauge", "Mean acceptance length over the last 512 request-steps.", _PUB),
    "eagle3scope_draft_forwards": ("counter", "Draft-model forwards by forward mode, with fc applied or skipped.",
                                   sorted(_PUB + ["fc", "mode"])),
    "eagle3scope_aux_capture_on": (
        "gauge", "1 while the target captures aux hidden states for the draft, 0 when not.", _PUB),
    "eagle3scope_aux_capture_off_steps": ("counter", "Steps that ran with aux capture off.", _PUB),
    "eagle3scope_aux_layers": ("info", "Aux-layer ids configured and target layers captured, now.",
                               sorted(_PUB + ["captured", "configured"])),
    "eagle3scope_violation_active": (
        "gauge", "Contract rules that fired for this publisher: 1 while the violation holds, 0 once it healed.",
        sorted(_PUB + ["rule", "severity"])),
    "eagle3scope_violations_fired": ("counter", "Times a contract rule went from holding to violated.",
                                     sorted(_PUB + ["rule", "severity"])),
    "eagle3scope_frames_received": ("counter", "Frames received from the publisher.", _PUB),
    "eagle3scope_frames_lost": (
        "counter", "Frames that never arrived: cause=transit (holes in the frame counter), cause=shim (dropped by "
        "the shim).", sorted(_PUB + ["cause"])),
    "eagle3scope_hook_failures": ("counter", "Failures inside the shim's hooks (the server kept running).", _PUB),
    "eagle3scope_shim_seconds": (
        "counter", "Wall time the shim's hooks spent on the scheduler thread, per seam (SGLang's wrapped calls "
        "excluded).", sorted(_PUB + ["seam"])),
    "eagle3scope_shim_round_seconds": (
        "counter", "Wall time of the step seams' calls, their hooks included (the rounds eagle3scope_shim_seconds "
        "relates to).", _PUB),
    "eagle3scope_hook_status": ("gauge", "1 for each seam's current hook status.", sorted(_PUB + ["seam", "status"])),
    "eagle3scope_publisher_last_frame_timestamp_seconds": ("gauge", "Send time of the publisher's latest frame.", _PUB),
    "eagle3scope_exporter_publishers": ("gauge", "Publishers known to the exporter (with and without a hello yet).", []),
    "eagle3scope_exporter_forgotten_publishers": (
        "counter", "Publishers dropped after staying silent longer than --forget-after.", []),
    "eagle3scope_exporter_bad_frames": ("counter", "Frames that could not be decoded.", []),
    "eagle3scope_exporter_refused_frames": (
        "counter", "Frames from new publishers not tracked: --max-publishers were tracked already.", []),
}


def test_every_family_is_served_with_its_type_help_text_and_label_names_exactly():
    """A stream that fills every family (a failed hook fires a rule, a heartbeat carries the shim's
    cost): the families in this order, with these types, HELP texts and label names; the shim's cost
    in seconds from the heartbeat's microseconds."""
    from eagle3scope.exporter.metrics import FleetCollector

    frames = session(30)
    n, t = frames[-1].n, frames[-1].t
    frames += [Frame("hook", "r0", n + 1, t + 1, {"seam": "verify", "status": "failed", "detail": "x"}),
               Frame("heartbeat", "r0", n + 2, t + 2, {"steps": 30, "dropped": 0, "hook_failures": 1, "queued": 0,
                                                       "shim_us": {"verify": 1500.0}, "step_us": 250000.0})]
    fleet = Fleet()
    fleet.ingest(frames)
    fams = list(FleetCollector(fleet).collect())
    served = {fam.name: (fam.type, fam.documentation, sorted({k for s in fam.samples for k in s.labels}))
              for fam in fams}
    assert served == FAMILIES and [fam.name for fam in fams] == list(FAMILIES)
    buckets = [s.labels["le"] for fam in fams for s in fam.samples if s.name == "eagle3scope_accept_length_bucket"]
    assert buckets == ["1", "2", "3", "4", "+Inf"]  # accepted drafts + 1, for k = 3, then Prometheus' +Inf
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in fams for s in fam.samples
              if fam.name in ("eagle3scope_shim_seconds", "eagle3scope_shim_round_seconds")}
    assert sorted((name, dict(labels).get("seam"), value) for (name, labels), value in values.items()) == [
        ("eagle3scope_shim_round_seconds_total", None, 0.25), ("eagle3scope_shim_seconds_total", "verify", 0.0015)]


def test_a_publisher_still_waiting_for_its_hello_holds_back_no_other():
    """Publishers are served each on its own: one whose hello has not arrived yet (held back) does
    not hide the series of those after it."""
    from eagle3scope.exporter.metrics import FleetCollector

    fleet = Fleet()
    fleet.ingest([f for f in renamed(session(20), "early") if f.kind != "hello"])
    fleet.ingest(renamed(session(30), "late"))
    steps = {s.labels["publisher"]: s.value for fam in FleetCollector(fleet).collect() for s in fam.samples
             if s.name == "eagle3scope_steps_total"}
    assert steps == {"late": 30}


def test_an_empty_aux_layer_set_is_served_as_none():
    """`aux_layers_info{configured}`: the ids in effect, comma-separated; an empty set is `none` (not
    an empty label, which Prometheus drops)."""
    from eagle3scope.exporter.metrics import FleetCollector

    frames = [Frame(f.kind, f.src, f.n, f.t, {**f.body, "aux": {**f.body["aux"], "configured": []}})
              if f.kind == "load" else f for f in session(20)]
    fleet = Fleet()
    fleet.ingest(frames)
    (info,) = [s.labels for fam in FleetCollector(fleet).collect() for s in fam.samples
               if s.name == "eagle3scope_aux_layers_info"]
    assert info["configured"] == "none"


def test_a_forgotten_publisher_leaves_nothing_behind():
    """A long-running exporter stays bounded while publishers come and go (a restarted server comes
    back under a new src): forgetting one drops every table entry about it."""
    now = [0.0]
    fleet = Fleet(forget_after_s=60, clock=lambda: now[0])
    fleet.ingest(renamed(session(50), "gone"))
    now[0] = 100.0
    fleet.ingest(renamed(session(50), "here"))
    tables = [value for value in vars(fleet).values() if isinstance(value, dict)]
    assert len(tables) >= 5 and not any("gone" in repr(list(table)) for table in tables)


def test_the_command_line_forget_after_reaches_the_fleet():
    """`exporter --forget-after S`: the Exporter hands it to its fleet (here 0: forgotten at once)."""
    exporter = Exporter([], "127.0.0.1:0", forget_after_s=0.0, discover=False)
    try:
        exporter.fleet.ingest(session(5))
        time.sleep(0.01)
        with exporter.fleet.lock:
            exporter.fleet.expire()
        assert exporter.fleet.forgotten == 1 and exporter.fleet.states == {}
    finally:
        exporter.close()


def test_a_hello_without_a_version_or_model_is_labelled_empty():
    from eagle3scope.exporter.metrics import FleetCollector

    frames = session(5)
    bare = [Frame(f.kind, f.src, f.n, f.t, {k: v for k, v in f.body.items() if k != "sglang_version"})
            if f.kind == "hello" else f for f in frames]
    fleet = Fleet()
    fleet.ingest(bare)
    labels = [s.labels for fam in FleetCollector(fleet).collect() for s in fam.samples
              if s.name == "eagle3scope_steps_total"]
    assert [lab["sglang_version"] for lab in labels] == [""]
