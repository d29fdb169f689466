"""Run inside the vLLM venv: vLLM's offline ``LLM`` with the demo target and an EAGLE-3 draft, the
shim switched on through the environment and loaded by vLLM's own ``vllm.general_plugins`` lookup,
a subscriber in a thread collecting every frame. Prints one JSON line: the frames, vLLM's own spec
decode counters (``llm.get_metrics()``) and each request's ``spec_decode_metrics``.

usage: vllm_offline.py TARGET DRAFT [--requests N] [--tokens N] [--k N] [--drop-weight NAME --scratch DIR] [--compile]

``--drop-weight`` serves a copy of the draft (in ``--scratch``) whose checkpoint lacks that tensor:
vLLM loads it without complaint, the draft's parameter keeps its initial values.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import zmq

from eagle3scope.control.client import ControlClient, ControlError
from eagle3scope.wire import decode_frame
from eagle3scope.wire.control_protocol import ENV_CONTROL


def collect(endpoint: str, frames: list, stop: threading.Event) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint)
    while not stop.is_set():
        if sock.poll(100):
            frame = decode_frame(sock.recv())
            frames.append({"k": frame.kind, "src": frame.src, "b": frame.body})
    sock.close(0)


def without_weight(draft: str, name: str, scratch: str) -> str:
    import shutil
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    out = Path(scratch) / "draft-dropped"
    shutil.copytree(draft, out)
    for path in out.glob("*.safetensors"):
        tensors = load_file(path)
        if tensors.pop(name, None) is not None:
            save_file(tensors, path, metadata={"format": "pt"})
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--drop-weight")
    parser.add_argument("--scratch")
    parser.add_argument("--compile", action="store_true", help="vLLM's default CPU compile mode, not eager")
    args = parser.parse_args()
    draft = without_weight(args.draft, args.drop_weight, args.scratch) if args.drop_weight else args.draft
    frames: list = []
    stop = threading.Event()
    collector = threading.Thread(target=collect, args=(os.environ["EAGLE3SCOPE_ENDPOINT"], frames, stop), daemon=True)
    collector.start()

    from vllm import LLM, SamplingParams

    llm = LLM(model=args.target, dtype="float32", enforce_eager=not args.compile, max_model_len=256, max_num_seqs=4,
              max_num_batched_tokens=256, speculative_config={"method": "eagle3", "model": draft,
                                                               "num_speculative_tokens": args.k},
              per_request_spec_decode_metrics="detailed", disable_log_stats=False)
    prompts = [f"the quick brown fox number {i} jumps over" for i in range(args.requests)]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True))
    control = {}
    if os.environ.get(ENV_CONTROL):  # the control channel's answers to a list and a set
        client = ControlClient.from_options(None, None, timeout_s=10)
        for cmd, fields in (("list", {}), ("set", {"layers": [1, 2, 3]})):
            try:
                control[cmd] = client.request(cmd, **fields)
            except ControlError as exc:
                control[cmd] = {"error": str(exc), "reply": exc.reply}
    time.sleep(1.5)  # the publisher sends within its flush interval
    stop.set()
    collector.join()
    metrics = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            metrics[m.name] = getattr(m, "value", None) if hasattr(m, "value") else getattr(m, "values", None)
    per_request = [{"request_id": o.request_id,
                    "spec": (o.outputs[0].spec_decode_metrics.to_dict()
                             if getattr(o.outputs[0], "spec_decode_metrics", None) is not None else None)}
                   for o in outs]
    print("E3S-RESULT " + json.dumps({"frames": frames, "metrics": metrics, "requests": per_request,
                                      "control": control}, default=str))


if __name__ == "__main__":
    main()
