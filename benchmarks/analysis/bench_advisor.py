"""The advisor's prediction error per setting, on the real engine (BENCHMARKS.md "Advisor").

Records the demo's healthy scenario (greedy) at --speculative-num-steps 5 through the shim, asks
``eagle3scope advise`` for 1..4, then serves each setting and measures SGLang's own accept length
(verify-committed tokens per verify pass, from ``meta_info``) and the wall throughput of the same
workload (completion tokens per second over a fixed count of requests). Prints one row per setting,
and which clock the time model was fitted to (device where the steps carry device times), its fit
error and the share of the gain interval that error adds; where the advisor predicts no throughput
(host times on a graph or overlap server, or a fit error above its bound) the predicted columns are
"-" and its reason is printed.

    .venv/bin/python benchmarks/analysis/bench_advisor.py [--requests 64] [--record-steps 600]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

from eagle3scope.cli import main as cli
from eagle3scope.demo import families
from eagle3scope.demo.runner import ScenarioRun
from eagle3scope.demo.server import cache_dir, engine_python


def serve(models, k: int, requests: int, tmp: Path, record: Path | None = None, record_steps: int = 0) -> dict:
    run = ScenarioRun("healthy", models, control=False, python=engine_python(), num_steps=k, temperatures=(0.0,),
                      log_path=tmp / f"s{k}.log")
    with run:
        if record is not None:
            run.record(record, record_steps)
        start, before = time.monotonic(), len(run.workload.results)
        run.finished_requests(at_least=before + requests, timeout_s=900)
        wall = time.monotonic() - start
        run.workload.stop()
        results = list(run.workload.results)[before:]
    tokens = sum(r["meta_info"]["completion_tokens"] - 1 for r in results)
    verifies = sum(r["meta_info"]["spec_verify_ct"] for r in results)
    return {"accept_length": tokens / verifies, "tok_per_s": sum(r["meta_info"]["completion_tokens"]
                                                                 for r in results) / wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--record-steps", type=int, default=600)
    args = parser.parse_args()
    models = families.ensure_models("llama", cache_dir(), python=engine_python())
    with tempfile.TemporaryDirectory(prefix="bench-advisor-") as tmp:
        tmp = Path(tmp)
        recording = tmp / "deep.e3s"
        measured = {5: serve(models, 5, args.requests, tmp, recording, args.record_steps)}
        out = CliRunner().invoke(cli, ["advise", str(recording), "--json"])
        (advice,) = json.loads(out.output)["publishers"].values()
        for k in (1, 2, 3, 4):
            measured[k] = serve(models, k, args.requests, tmp)
    predicted = {s["num_steps"]: s for s in advice["settings"]}
    base_pred, base_meas = predicted[5]["tokens_per_s"], measured[5]["tok_per_s"]
    model = advice["time_model"] or {}
    print(f"recommended: {advice['recommended_num_steps']} ({advice['headline']}); time model on "
          f"{model.get('clock')} times, fit error {model.get('rel_error')} (bound {model.get('max_rel_error')}), "
          f"interval widened by {model.get('prediction_error')}; throughput predicted: {advice['throughput_predicted']}")
    print("steps  predicted_len  measured_len  error   predicted_rel_tps  gain_ci          measured_rel_tps")
    for k in range(1, 6):
        p, m = predicted[k], measured[k]
        rel = "-" if p["tokens_per_s"] is None else f"{p['tokens_per_s'] / base_pred:.3f}"
        ci = "-" if not p["gain_ci"] else f"{p['gain_ci'][0]:+.3f}..{p['gain_ci'][1]:+.3f}"
        print(f"{k:>5}  {p['accept_length']:>13.3f}  {m['accept_length']:>12.3f}  {p['accept_length'] - m['accept_length']:+.3f}"
              f"  {rel:>17}  {ci:<15}  {m['tok_per_s'] / base_meas:>16.3f}")
    best = max(measured, key=lambda k: measured[k]["tok_per_s"])
    rec = advice["recommended_num_steps"]
    print(f"best measured: {best} ({measured[best]['tok_per_s']:.1f} tok/s)")
    if rec is not None:
        print(f"recommended {rec}: {measured[rec]['tok_per_s']:.1f} tok/s "
              f"({measured[rec]['tok_per_s'] / measured[best]['tok_per_s']:.1%} of best)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
