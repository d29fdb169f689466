"""Live aux-layer A/B on the real engine: mean acceptance length per preset of the aux-offset draft.

Serves the ``aux-offset`` demo scenario (a draft trained on aux ids [1, 3, 4] configured as
speculators' [2, 4, 5]) on SGLang 0.5.23's CPU engine with the control channel, keeps a steady
greedy workload on it, and runs ``eagle3scope aux cycle`` as a user would. The trained set must
stand out. Needs the engine venv and the demo models (``make models``).

    .venv/bin/python benchmarks/engine/bench_aux_ab.py [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from eagle3scope.demo import models
from eagle3scope.demo.runner import ScenarioRun

PRESETS = "configured,configured-1,configured+1,custom"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="decode steps measured per preset")
    args = parser.parse_args()
    paths = models.ensure_demo_models()
    print(f"demo models {paths.root.name}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")
    with ScenarioRun("aux-offset", paths, control=True, concurrency=2, max_new_tokens=48) as run:
        done = subprocess.run(
            [sys.executable, "-m", "eagle3scope.cli", "aux", "cycle", "--control", run.control, "--token-file",
             str(run.token_file), "-c", run.endpoint, "--presets", PRESETS, "--custom", "0,1,2",
             "--steps", str(args.steps), "--json"], capture_output=True, text=True, timeout=900)
        errors = list(run.workload.errors)
    if done.returncode != 0:
        sys.exit(f"aux cycle failed:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    print(f"workload errors while the layers changed: {len(errors)}")
    print(f"{'preset':<14} {'ids':<12} {'captured':<12} {'mean accept length':>18} {'steps':>6}")
    for m in report["results"]:
        print(f"{m['preset']:<14} {str(m['layers']):<12} {str(m['captured']):<12} "
              f"{m['mean_accept_length']:>18.3f} {m['steps']:>6}")
    print(f"best: {report['best']['layers']}")


if __name__ == "__main__":
    main()
