"""Mutation testing of the core pure modules with mutmut: how many small bugs the fast suite catches.

Not part of CI (minutes per module). Each module is mutated on its own, in a scratch copy of this
checkout, against only the fast tests that exercise it (``-m "not engine"``), so a run fits a small
shared machine; mutmut then runs, per mutant, just the tests that reach the mutated function.
Prints per module: mutants, killed (a test failed or timed out), survived, not reached by any
selected test, and the score = killed / (mutants - judged equivalent). The mutants judged
equivalent (no behaviour can tell them apart) are listed in EQUIVALENT with the reason and in
TESTING.md; they are matched by their diff, so a renumbering after an edit does not lose them.

    .venv/bin/pip install -e '.[mutation]'
    .venv/bin/python benchmarks/mutation.py [MODULE ...] [--jobs 2] [--sample N] [--survivors]

``--sample N`` tests N mutants per module drawn at random (fixed seed): on a loaded machine a full
run takes hours, and a sample's score carries a binomial error of about sqrt(p(1-p)/N).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    path: str  # the module mutated
    tests: tuple[str, ...]  # the fast tests that exercise it
    functions: tuple[str, ...] = ()  # mutant-name globs (mutmut's x_<function> / xǁ<Class>ǁ<method>); () = all
    deselect: str = ""  # pytest -k expression for slow tests whose job other tests do faster


MODULES: dict[str, Target] = {
    "analysis-rules": Target("eagle3scope/analysis/rules.py",
                             ("tests/test_analysis.py", "tests/test_rules_non_eagle3.py", "tests/test_rules_evidence.py")),
    "doctor-diagnosis": Target("eagle3scope/doctor/weight_checks.py",
                               ("tests/test_doctor.py", "tests/test_doctor_d2t.py")),
    "doctor-config": Target("eagle3scope/doctor/config_checks.py",
                            ("tests/test_doctor.py", "tests/test_doctor_2026.py", "tests/test_doctor_producers.py")),
    "store-index-seek": Target(
        "eagle3scope/store/reader.py", ("tests/test_store.py", "tests/test_store_boundaries.py"),
        functions=tuple(f"*xǁ{name}__mutmut_*" for name in (
            "SessionReaderǁrefresh", "SessionReaderǁ_batch_at", "SessionReaderǁframes",
            "SessionReaderǁ_first_matching", "SessionReaderǁseek_seq", "SessionReaderǁseek_time",
            "SessionReaderǁstate_at")),
        deselect="not replayer"),
    "store-index-write": Target(
        "eagle3scope/store/writer.py", ("tests/test_store.py", "tests/test_store_boundaries.py"),
        functions=tuple(f"*xǁ{name}__mutmut_*" for name in ("SessionWriterǁadd", "SessionWriterǁflush")),
        deselect="not replayer"),
    "wire-codec": Target("eagle3scope/wire/schema.py", ("tests/test_wire.py",)),
    "wire-validation": Target("eagle3scope/wire/validate.py", ("tests/test_wire.py",)),
}

# Survivors judged equivalent, per module: (a line of the mutant's diff, why no test can tell).
_SQL_CASE = "SQL keywords are case-insensitive"
EQUIVALENT: dict[str, list[tuple[str, str]]] = {
    "store-index-seek": [
        ('after = self.batches[-1].id if self.batches else -2', "batch ids are SQLite rowids >= 1: id > -2 = id > -1"),
        ('" order by idx desc limit 1",', _SQL_CASE),
    ],
    "store-index-write": [
        ('con.execute("begin")', _SQL_CASE),
        ('con.executemany("insert into state(idx, src, kind, key, frame) values (?, ?, ?, ?, ?)",', _SQL_CASE),
    ],
}


@dataclass
class Score:
    module: str
    population: int = 0  # mutants of the module in scope (a --sample tests a random subset of them)
    statuses: dict[str, str] = field(default_factory=dict)  # mutant name -> mutmut status
    equivalent: dict[str, str] = field(default_factory=dict)  # mutant name -> reason
    diffs: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def count(self, *statuses: str) -> int:
        return sum(1 for name, s in self.statuses.items() if s in statuses and name not in self.equivalent)

    @property
    def killed(self) -> int:
        return self.count("killed", "timeout", "segfault", "suspicious")

    @property
    def considered(self) -> int:
        return len(self.statuses) - len(self.equivalent)

    @property
    def score(self) -> float:
        return self.killed / self.considered if self.considered else float("nan")


def scratch_copy(dest: Path) -> None:
    """Tracked and new files of this checkout (what a commit would hold), nothing ignored."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def configure(work: Path, target: Target) -> None:
    selection = [*target.tests, "-m", "not engine"]
    if target.deselect:
        selection += ["-k", target.deselect]
    config = {
        "source_paths": ["eagle3scope"],
        "only_mutate": [target.path],
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", "-x"],
        "pytest_add_cli_args_test_selection": selection,
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    with open(work / "pyproject.toml", "a") as f:
        f.write("\n".join(lines) + "\n")


def mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "mutmut"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([str(exe), *args], cwd=work, capture_output=True, text=True, env=env, timeout=timeout)


def run_module(name: str, target: Target, jobs: int, sample: int | None, seed: int) -> Score:
    from mutmut.stats import status_by_exit_code

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutation-{name}-") as tmp:
        work = Path(tmp)
        scratch_copy(work)
        configure(work, target)
        meta = work / "mutants" / (target.path + ".meta")
        # first pass: generate the mutants and the test-coverage stats, test none (no name matches)
        done = mutmut(work, "run", "--max-children", str(jobs), "no-such-mutant")
        if not meta.exists():
            raise RuntimeError(f"{name}: mutmut generated nothing\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        chosen = [m for m in json.loads(meta.read_text())["exit_code_by_key"]
                  if not target.functions or any(_glob(m, pattern) for pattern in target.functions)]
        if sample is not None and sample < len(chosen):
            chosen = sorted(random.Random(seed).sample(chosen, sample))
        mutmut(work, "run", "--max-children", str(jobs), *chosen)
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        score = Score(name, population=len(chosen) if sample is None else sample_population(meta, target))
        for mutant in chosen:
            code = codes.get(mutant)
            score.statuses[mutant] = "not run" if code is None else status_by_exit_code[code]
        for mutant, status in score.statuses.items():
            if status in ("survived", "no tests", "not run"):
                score.diffs[mutant] = mutmut(work, "show", mutant).stdout
                reason = _equivalent(name, score.diffs[mutant])
                if reason:
                    score.equivalent[mutant] = reason
    score.seconds = time.monotonic() - started
    return score


def sample_population(meta: Path, target: Target) -> int:
    return sum(1 for m in json.loads(meta.read_text())["exit_code_by_key"]
               if not target.functions or any(_glob(m, pattern) for pattern in target.functions))


def _glob(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(name, pattern)


def _equivalent(module: str, diff: str) -> str | None:
    changed = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    for needle, reason in EQUIVALENT.get(module, []):
        if any(needle == line for line in changed):
            return reason
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE", help="any of " + ", ".join(MODULES) + " (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested in parallel")
    parser.add_argument("--survivors", action="store_true", help="print every surviving mutant's diff")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--sample", type=int, help="test only this many mutants per module, drawn at random")
    parser.add_argument("--seed", type=int, default=16, help="seed of the --sample draw")
    args = parser.parse_args(argv)
    unknown = set(args.modules) - set(MODULES)
    if unknown:
        parser.error(f"unknown module(s): {', '.join(sorted(unknown))}")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"mutmut over the fast suite; machine: {os.cpu_count()} CPUs, {load}")
    print(f"{'module':<18} {'in scope':>8} {'tested':>6} {'killed':>6} {'survived':>8} {'unreached':>9} {'equiv':>5} "
          f"{'score':>6} {'time':>7}")
    report = {}
    for name in args.modules or list(MODULES):
        s = run_module(name, MODULES[name], args.jobs, args.sample, args.seed)
        print(f"{name:<18} {s.population:>8} {len(s.statuses):>6} {s.killed:>6} {s.count('survived'):>8} "
              f"{s.count('no tests', 'not run'):>9} {len(s.equivalent):>5} {s.score:>6.1%} {s.seconds:>6.0f}s", flush=True)
        report[name] = {"in_scope": s.population, "tested": len(s.statuses), "killed": s.killed,
                        "survived": s.count("survived"),
                        "unreached": s.count("no tests", "not run"), "equivalent": s.equivalent, "score": s.score,
                        "seconds": round(s.seconds), "survivors": {m: d for m, d in s.diffs.items() if m not in s.equivalent}}
        if args.json:  # after each module: a long run keeps what it has measured
            args.json.write_text(json.dumps(report, indent=2))
        if args.survivors:
            for mutant, diff in s.diffs.items():
                if mutant not in s.equivalent:
                    print(f"--- {mutant} ({s.statuses[mutant]})\n{diff}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
