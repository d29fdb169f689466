"""The hardened control channel inside the real SGLang engine (CPU, the tiny random models).

Run (the engine venv built, ``python -m eagle3scope.demo.tiny`` run once)::

    PYTHONPATH=$PWD:$PWD/instrumentation:$PWD/cpu_engine/src .venv/bin/python benchmarks/engine/bench_control_engine.py

Starts SGLang 0.5.23 with the shim's channel, then under generate traffic: a valid ``list``;
garbage and a multipart message from a DEALER socket; a wrong token; a signed request replayed;
every preset as a ``set`` (applied on the scheduler thread, or refused with the reason); a last
``list`` and a generate, which must both still work. Prints one line per probe (RELIABILITY.md).
"""

from __future__ import annotations

import os

import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("EAGLE3SCOPE_TRUSTED_NETWORK", "1")  # loopback TCP figures of a trusted machine, as before CURVE
import zmq

from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.demo.server import SGLangServer, cache_dir
from eagle3scope.demo.tiny import MODELS_DIRNAME
from eagle3scope.wire.endpoints import free_port
from eagle3scope.wire.token import create_token_file, read_token


def main() -> None:
    root = cache_dir() / "models" / MODELS_DIRNAME
    token = create_token_file(Path(tempfile.mkdtemp(prefix="e3s-control-")))
    control = f"tcp://127.0.0.1:{free_port()}"
    env = {"EAGLE3SCOPE_ENDPOINT": f"tcp://127.0.0.1:{free_port()}", "EAGLE3SCOPE_CONTROL": control,
           "EAGLE3SCOPE_CONTROL_TOKEN_FILE": str(token)}
    t0 = time.monotonic()
    with SGLangServer(str(root / "target"), str(root / "draft-random"), env=env) as server:
        print(f"server up in {time.monotonic() - t0:.0f} s")
        client = ControlClient(control, read_token(token), timeout_s=20)
        listed = client.list()
        print(f"list: current {listed['current']}, captured {listed['captured']}, changeable {listed['changeable']}")
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(control)
        dealer.send_multipart([b"", b"\xc1garbage"])
        dealer.send_multipart([b"a", b"b", b"c"])
        answers = [dealer.recv_multipart()[-1][:60] for _ in range(2) if dealer.poll(3000)]
        dealer.close(0)
        print(f"garbage and multipart: {len(answers)} refusals: {answers}")
        try:
            ControlClient(control, "x" * 40, timeout_s=10).list()
            print("wrong token: ACCEPTED")
        except ControlError as exc:
            print(f"wrong token: refused ({exc})")
        signed = client.sign({"cmd": "list"})
        print(f"signed list: ok={client.raw(signed)['ok']}; replayed: {client.raw(signed).get('error')}")
        stop = threading.Event()

        def traffic() -> None:
            while not stop.is_set():
                server.generate(["hello there"], max_new_tokens=8)

        load = threading.Thread(target=traffic)
        load.start()
        try:
            for preset in listed["presets"]:
                started = time.monotonic()
                try:
                    reply = client.set(preset["layers"], wait_s=8)
                    print(f"set {preset['name']} {preset['layers']}: {reply['status']} (captured {reply['captured']})"
                          f" in {time.monotonic() - started:.2f} s")
                except ControlError as exc:
                    print(f"set {preset['name']} {preset['layers']}: refused: {exc}")
        finally:
            stop.set()
            load.join()
        tokens = server.generate(["a test"], max_new_tokens=4)[0]["meta_info"]["completion_tokens"]
        print(f"afterwards: list ok={client.list()['ok']}, generate {tokens} tokens")


if __name__ == "__main__":
    main()
