"""``eagle3scope record`` counts what never reached it, prints it and keeps it in the session file.

A synthetic publisher (tests/support/publisher.py) stands in for a server so the losses are exact:
a gap of 5 in the frame counter (lost in transit), a heartbeat saying the shim dropped 7 (its
queue was full), and one frame that is not msgpack (bad).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time

from eagle3scope.store import SessionReader
from support.cli import spawn
from benchmarks.support.synthetic import hello_body, load_body, step_body

GAP, DROPPED, STEPS = 5, 7, 40


def test_record_prints_and_stores_the_losses(tmp_path, synthetic_publisher):
    pub = synthetic_publisher
    out = tmp_path / "lossy.e3s"
    proc = spawn("record", "--connect", pub.endpoint, "--out", out, "--steps", STEPS, stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
        pub.wait_subscribed(60)  # frames sent before the recorder subscribed would not be losses
        pub.send("hello", hello_body())
        pub.send("load", load_body())
        for seq in range(STEPS - 1):
            if seq == STEPS // 2:
                pub.next_n["dp0"] += GAP  # five frames the network lost
                pub.send_raw(b"\xc1 not msgpack")
            pub.send("step", step_body(seq))
        pub.send("heartbeat", {"steps": STEPS + DROPPED, "dropped": DROPPED, "hook_failures": 0, "queued": 0})
        pub.send("step", step_body(STEPS - 1))
        proc.wait(timeout=60)
        time.sleep(0.1)
        log = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log
    last = [line for line in log.splitlines() if line.startswith("recording:")][-1]
    assert re.search(rf"\b{STEPS} steps, \d+ frames from 1 source\(s\), {GAP + DROPPED} lost, 1 bad,", last), last
    with SessionReader(out) as reader:
        loss = reader.meta["loss"]
        assert reader.count("step") == STEPS
    assert (loss["lost"], loss["bad_frames"]) == (GAP + DROPPED, 1)
    assert loss["sources"]["dp0"]["lost_in_transit"] == GAP and loss["sources"]["dp0"]["dropped_by_shim"] == DROPPED
