"""``eagle3scope record`` counts what never reached it, prints it and keeps it in the session file.

A raw ZeroMQ PUB socket stands in for a server so the losses are exact: a gap of 5 in the frame
counter (lost in transit), a heartbeat saying the shim dropped 7 (its queue was full), and one
frame that is not msgpack (bad).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import zmq

from eagle3scope.store import SessionReader
from eagle3scope.wire import encode_frame
from synthetic import hello_body, load_body, step_body

CLI = [sys.executable, "-c", "from eagle3scope.cli import main; main()"]
GAP, DROPPED, STEPS = 5, 7, 40


def test_record_prints_and_stores_the_losses(tmp_path):
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 1000)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    out = tmp_path / "lossy.e3s"
    proc = subprocess.Popen([*CLI, "record", "--connect", f"tcp://127.0.0.1:{port}", "--out", str(out),
                             "--steps", str(STEPS)], stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
        n = 0
        # hellos until the recorder has one: frames sent before it subscribed are not losses
        deadline = time.monotonic() + 60
        while not any("receiving from dp0" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            sock.send(encode_frame("hello", hello_body(), src="dp0", n=n))
            n += 1
            time.sleep(0.05)
        sock.send(encode_frame("load", load_body(), src="dp0", n=n))
        for seq in range(STEPS - 1):
            if seq == STEPS // 2:
                n += GAP  # five frames the network lost
                sock.send(b"\xc1 not msgpack")
            n += 1
            sock.send(encode_frame("step", step_body(seq), src="dp0", n=n))
        n += 1
        sock.send(encode_frame("heartbeat", {"steps": STEPS + DROPPED, "dropped": DROPPED, "hook_failures": 0,
                                             "queued": 0}, src="dp0", n=n))
        n += 1
        sock.send(encode_frame("step", step_body(STEPS - 1), src="dp0", n=n))
        proc.wait(timeout=60)
        time.sleep(0.1)
        log = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
    assert proc.returncode == 0, log
    last = [line for line in log.splitlines() if line.startswith("recording:")][-1]
    assert re.search(rf"\b{STEPS} steps, \d+ frames from 1 source\(s\), {GAP + DROPPED} lost, 1 bad,", last), last
    with SessionReader(out) as reader:
        loss = reader.meta["loss"]
        assert reader.count("step") == STEPS
    assert (loss["lost"], loss["bad_frames"]) == (GAP + DROPPED, 1)
    assert loss["sources"]["dp0"]["lost_in_transit"] == GAP and loss["sources"]["dp0"]["dropped_by_shim"] == DROPPED
