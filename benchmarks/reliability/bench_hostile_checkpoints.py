"""Hostile-checkpoint figures for RELIABILITY.md: doctor and fix through the CLI on damaged drafts.

Run: ``.venv/bin/python benchmarks/reliability/bench_hostile_checkpoints.py [--cases 2000] [--seed 0]``.
Each case is a tiny valid draft (benchmarks/support/draft_checkpoints.py) with one kind of damage: random JSON
in 1-4 config fields (SpecForge or speculators layout), random bytes or JSON as a safetensors
header with a random declared length, a damaged shard index, a FIFO, a link out of the directory,
a sparse 256 MiB d2t. Both ``doctor --json`` and ``fix`` run in-process through click; a
traceback is an exception that is not click's exit, a "check-failed" finding is counted too,
a hang is a case over 20 s. Peak memory is this process's max RSS (the sparse-d2t case included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from benchmarks.support import draft_checkpoints as dc  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from eagle3scope.cli import main  # noqa: E402

FIELDS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
          "draft_vocab_size", "num_hidden_layers", "target_hidden_size", "tie_word_embeddings", "architectures",
          "eagle_config", "model_type", "num_aux_hidden_states", "bias", "rms_norm_eps", "norm_before_fc",
          "eagle_aux_hidden_state_layer_ids", "speculators_model_type", "transformer_layer_config",
          "speculators_config", "norm_before_residual", "eagle3scope_fix"]


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 6:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        keys = ["eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state", "a", "verifier", "architectures", "hidden_size"]
        return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(4))}
    if kind == 8:
        return [rng.randint(-2, 70) for _ in range(rng.randrange(5))]
    return [None, True, rng.randint(-2**70, 2**70), rng.randint(-3, 100), rng.random() * 1e6, "x" * rng.randrange(5)][kind]


def damage(root: Path, rng: random.Random, kind: str, tmp: Path) -> Path:
    layout = rng.choice(["specforge", "speculators"])
    config = dc.specforge_config() if layout == "specforge" else dc.speculators_config()
    weights = dc.tensors("midlayer." if layout == "specforge" else "layers.0.")
    if kind == "config":
        for _ in range(rng.randint(1, 4)):
            config[rng.choice(FIELDS)] = random_json(rng)
    draft = dc.write(root, weights, config, shards=2 if kind == "index" else 1)
    if kind == "header":
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(64))) if rng.random() < 0.5 else \
            json.dumps(random_json(rng)).encode()
        declared = rng.choice([len(body), rng.randrange(2**64), 0, len(body) + 1])
        (draft / "x.safetensors").write_bytes(struct.pack("<Q", declared) + body + b"\0" * rng.randrange(32))
    elif kind == "index":
        (draft / "model.safetensors.index.json").write_text(json.dumps({"weight_map": random_json(rng)}))
    elif kind == "fifo":
        os.mkfifo(draft / rng.choice(["extra.safetensors", "tokenizer.json", "model.safetensors.index.json"]))
    elif kind == "symlink":
        (tmp / "outside").write_text("secret")
        (draft / rng.choice(["tokenizer.json", "more.safetensors"])).symlink_to(rng.choice([tmp / "outside", Path("/dev/zero")]))
    elif kind == "sparse-d2t":
        rows = 32 << 20
        header = json.dumps({"d2t": {"dtype": "I64", "shape": [rows], "data_offsets": [0, rows * 8]}}).encode()
        header += b" " * (-len(header) % 8)
        with open(draft / "vocab.safetensors", "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header)
            f.truncate(8 + len(header) + rows * 8)
        del weights["d2t"]
        (draft / "model.safetensors").unlink()
        dc.write(draft, weights, {**dc.specforge_config(), "draft_vocab_size": rows})
    return draft


def run(cases: int, seed: int) -> dict:
    rng = random.Random(seed)
    kinds = ["config"] * 6 + ["header"] * 2 + ["index", "fifo", "symlink"]
    counts = {"cases": 0, "runs": 0, "tracebacks": 0, "check_failed": 0, "hangs": 0, "by_kind": {}}
    slowest = 0.0
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for i in range(cases):
            kind = "sparse-d2t" if i % 500 == 0 else rng.choice(kinds)
            counts["by_kind"][kind] = counts["by_kind"].get(kind, 0) + 1
            case = tmp / f"case{i}"
            draft = damage(case / "d", rng, kind, case)
            for args in (["doctor", str(draft), "--json", "--sglang-version", rng.choice(["0.5.10", "0.5.23"])],
                         ["fix", str(draft), "--out", str(case / "out"), "--for-sglang", rng.choice(["0.5.10", "0.5.23"])]):
                start = time.perf_counter()
                result = runner.invoke(main, args)
                slowest = max(slowest, time.perf_counter() - start)
                counts["runs"] += 1
                counts["hangs"] += time.perf_counter() - start > 20
                if result.exception is not None and not isinstance(result.exception, SystemExit):
                    counts["tracebacks"] += 1
                    print(kind, args[0], repr(result.exception)[:200], file=sys.stderr)
                if args[0] == "doctor" and result.output.startswith("{"):
                    counts["check_failed"] += sum(f["id"] == "check-failed" for f in json.loads(result.output)["findings"])
            counts["cases"] += 1
            shutil.rmtree(case, ignore_errors=True)
    counts["slowest_run_s"] = round(slowest, 2)
    counts["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return counts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    figures = run(args.cases, args.seed)
    figures["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(figures, indent=1))
