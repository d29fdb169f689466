"""Mutation testing of the core modules with mutmut: how many small bugs the fast suite catches.

Not part of CI (minutes per module). Each module is mutated on its own, in a scratch copy of this
checkout, against only the fast tests that exercise it (``-m "not engine"``, the map in MODULES), so
a run fits a small shared machine; mutmut then runs, per mutant, just the tests that reach the
mutated function (its per-test coverage). Prints per module: mutants in scope, tested, killed (a
test failed or timed out), survived, not reached by any selected test, and the score = killed /
(tested - judged equivalent) with its standard error. The mutants judged equivalent (no behaviour
can tell them apart) are listed in EQUIVALENT with the reason and in TESTING.md; they are matched by
their diff, so a renumbering after an edit does not lose them.

    .venv/bin/pip install -e '.[mutation]'
    nice -n 19 .venv/bin/python benchmarks/mutation/mutation.py [MODULE ...] [--jobs 2] [--sample N | --budget S]
                                                      [--seed N] [--survivors] [--json FILE]

A full run takes hours on a small shared machine, so ``--sample N`` tests N mutants per module and
``--budget S`` as many as S seconds allow; both draw them in a random order from a fresh seed each
run (printed; ``--seed`` repeats a draw). A sample's score carries the binomial error
sqrt(p(1-p)/n), shrunk by the finite-population factor sqrt((N-n)/(N-1)).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Target:
    path: str | tuple[str, ...]  # the module(s) mutated, as paths in this checkout
    tests: tuple[str, ...]  # the fast tests that exercise it
    functions: tuple[str, ...] = ()  # mutant-name globs (mutmut's x_<function> / xǁ<Class>ǁ<method>); () = all
    deselect: str = ""  # pytest -k expression for slow tests whose job other tests do faster


ANALYSIS = ("tests/analysis/test_analysis.py", "tests/rules/test_rules_non_eagle3.py", "tests/rules/test_rules_evidence.py",
            "tests/analysis/test_state_bounds.py", "tests/analysis/test_facts.py", "tests/shim/test_topology.py", "tests/wire/test_wire_bounds.py")
CONTROL = ("tests/control/test_control_protocol.py", "tests/control/test_control_client.py", "tests/aux/test_aux_control.py", "tests/hostile/test_hostile_control.py", "tests/aux/test_aux_tp.py", "tests/reliability/test_promises.py")
SHIM_TESTS = ("tests/shim/test_shim_unit.py", "tests/shim/test_shim_cost.py", "tests/shim/test_graph_evidence.py", "tests/shim/test_topology.py",
              "tests/wire/test_clock_order.py")
DOCTOR = ("tests/doctor/test_doctor.py", "tests/doctor/test_doctor_d2t.py", "tests/doctor/test_doctor_2026.py", "tests/doctor/test_doctor_hostile.py",
          "tests/doctor/test_doctor_producers.py", "tests/doctor/test_doctor_texts.py")
WIRE = ("tests/wire/test_wire.py", "tests/wire/test_wire_contract.py", "tests/wire/test_wire_bodies.py", "tests/reliability/test_promises.py", "tests/hostile/test_hostile_frames.py", "tests/wire/test_wire_bounds.py")
STORE = ("tests/store/test_store.py", "tests/store/test_store_boundaries.py", "tests/store/test_salvage_accounting.py",
         "tests/hostile/test_hostile_recordings.py",
         "tests/cli/test_record_loss.py")

# module -> what is mutated and the fast tests that exercise it (a test file outside the list cannot kill)
MODULES: dict[str, Target] = {
    "analysis-rules": Target("eagle3scope/analysis/rules.py", (*ANALYSIS, "tests/cli/test_check.py")),
    "analysis-state": Target("eagle3scope/analysis/state.py", (*ANALYSIS, "tests/shim/test_graph_evidence.py")),
    "analysis-stats": Target("eagle3scope/analysis/stats.py", ("tests/analysis/test_stats_reference.py", *ANALYSIS,
                                                             "tests/analysis/test_advisor.py")),
    "analysis-views": Target("eagle3scope/analysis/views.py", (*ANALYSIS, "tests/shim/test_graph_evidence.py")),
    "wire-codec": Target("eagle3scope/wire/schema.py", (*WIRE, "tests/analysis/test_state_bounds.py")),
    "wire-validation": Target("eagle3scope/wire/bodies.py", (*WIRE, "tests/wire/test_clock_order.py")),
    "wire-loss": Target("eagle3scope/wire/loss.py", ("tests/wire/test_loss_accounting.py", "tests/reliability/test_promises.py", "tests/cli/test_record_loss.py",
                                                     "tests/shim/test_shim_cost.py", "tests/live/test_transport.py")),
    "store-format": Target("eagle3scope/store/format.py", STORE),
    "store-index-seek": Target(
        "eagle3scope/store/reader.py", ("tests/store/test_store.py", "tests/store/test_store_boundaries.py"),
        functions=tuple(f"*xǁ{name}__mutmut_*" for name in (
            "SessionReaderǁrefresh", "SessionReaderǁ_batch_at", "SessionReaderǁframes",
            "SessionReaderǁ_first_matching", "SessionReaderǁseek_seq", "SessionReaderǁseek_time",
            "SessionReaderǁstate_at")),
        deselect="not replayer"),
    "store-index-write": Target(
        "eagle3scope/store/writer.py", ("tests/store/test_store.py", "tests/store/test_store_boundaries.py"),
        functions=tuple(f"*xǁ{name}__mutmut_*" for name in ("SessionWriterǁadd", "SessionWriterǁflush")),
        deselect="not replayer"),
    "store-replayer": Target("eagle3scope/store/replayer.py", ("tests/store/test_replay_pacing.py", "tests/store/test_store.py",
                                                              "tests/wire/test_clock_order.py",
                                                              "tests/cli/test_cli_backbone.py")),
    "store-salvage": Target("eagle3scope/store/salvage.py", STORE),
    "exporter": Target(("eagle3scope/exporter/metrics.py", "eagle3scope/exporter/fleet.py",
                        "eagle3scope/exporter/service.py"),
                       ("tests/exporter/test_exporter.py", "tests/exporter/test_dashboard.py", "tests/wire/test_wire_bounds.py",
                        "tests/wire/test_clock_order.py", "tests/analysis/test_facts.py")),
    "gate": Target(("eagle3scope/gate/decide.py", "eagle3scope/gate/result.py", "eagle3scope/gate/junit.py", "eagle3scope/commands/gate.py"),
                   ("tests/gate/test_gate_judge.py", "tests/gate/test_gate.py", "tests/cli/test_check.py", "tests/reliability/test_promises.py",
                    "tests/hostile/test_hostile_frames.py")),
    "doctor-diagnosis": Target("eagle3scope/doctor/weight_checks.py", DOCTOR),
    "doctor-config": Target("eagle3scope/doctor/config_checks.py", DOCTOR),
    "shim-hooks": Target("instrumentation/eagle3scope_shim/hooks.py", (*SHIM_TESTS, "tests/aux/test_aux_control.py",
                                                                     "tests/aux/test_aux_tp.py")),
    "shim-state": Target("instrumentation/eagle3scope_shim/shim_state.py", SHIM_TESTS),
    "control-protocol": Target("eagle3scope/wire/control_protocol.py", CONTROL),
    "control-client": Target("eagle3scope/control/client.py", CONTROL),
    "control-shim": Target("instrumentation/eagle3scope_shim/aux_channel.py", CONTROL),
}

# Tests that cannot pass under mutmut at all: its trampolined copy of a module holds every mutant's
# source, so a test that bounds a child's memory measures mutmut's copy (the doctor's 3,000 mutants
# took a `doctor` child from under 200 MiB to 355 MiB) and fails mutmut's stats pass, which then
# leaves every mutant "not run". Deselected from every mutation run (they still run in the suite).
# A wall-clock bound fails the same way: under mutmut's trampolines at load 8 a 3 ms busy loop in a
# hook measured 35 ms, past the 20 ms round it must stay below.
NOT_UNDER_MUTMUT = ("tests/doctor/test_doctor_hostile.py::test_sparse_giant_d2t_is_not_loaded",
                    "tests/shim/test_shim_cost.py::test_a_hook_that_burns_a_known_time_shows_up_in_the_next_heartbeat_as_a_delta")

# Survivors judged equivalent, per module: (a line of the mutant's diff, why no test can tell).
_SQL_CASE = "SQL keywords are case-insensitive"
_PASS_NET = ("unreachable: _check_pass's inline test refuses exactly what the Pass fields' own checkers refuse, "
             "and they raise first, naming the field")
EQUIVALENT: dict[str, list[tuple[str, str]]] = {
    "control-client": [
        ("sock.close(None)", "LINGER is set to 0 on the socket: close(None) uses it, as close(0) does"),
        ("sock.close(1)", "a 1 ms linger on a REQ socket closed after its answer or its timeout: nothing is left to send"),
        ("def __init__(self, endpoint: str, token: str, *, timeout_s: float = 6.0) -> None:",
         "every construction goes through from_options, which passes timeout_s: the default is never used"),
    ],
    "control-protocol": [
        ('return hmac.new(token.encode("UTF-8"), pack({"fields": fields}), hashlib.sha256).hexdigest()',
         "Python's codec names are case-insensitive: UTF-8 is utf-8"),
    ],
    "analysis-stats": [
        ("def add_step(self, seq: int, t_ns: int, accepted: list[int], bonus: list[int], depth: int = 1,",
         "every caller (analysis/state.py) passes depth: the default is never used"),
        ("if budget is not None and budget >= self.k_budget:", "at equality it sets k_budget to the value it has"),
        ("return span if span >= 0 else None", "both callers test the span's truth: 0, like None, gives no rate"),
    ],
    "analysis-state": [
        ('self.capture: dict | None = ""', "SessionState.capture is written, never read (views read each publisher's)"),
        ("def add(self, seq: int, width, fc, n: int, replayed: bool = True) -> bool:",
         "both callers (SessionState._step) pass replayed: the default is never used"),
        ("self.acceptance = AcceptanceStats(window, None)",
         "the first publisher's stats replace it at its first step, before any step is added: its history stays empty"),
        ('self.segments.append(ConfigSegment(layers.configured, "startup", seq, None, layers.captured))',
         "the startup segment's src is never read: only a config segment's src names the MAX_SEGMENTS note"),
    ],
    "analysis-views": [
        ("longest = max(map(len, parts.values()), default=1)",
         "the default is used only with no publishers, where range(1, longest) and the loop are empty for 0 and 1"),
        ("if s.start_step is not None and 0 <= s.start_step - first_step <= len(history)]",
         "a segment's start_step is a step already in history (at most n_steps - 1): never len(history) past its first"),
    ],
    "wire-codec": [
        ("obj = msgpack.unpackb(data, raw=False, ext_hook=_refuse_ext, **limits)",
         "strict_map_key=True is msgpack's default since 1.0 (pyproject requires >= 1.0.8)"),
        ("obj = msgpack.unpackb(data, strict_map_key=True, ext_hook=_refuse_ext, **limits)",
         "raw=False is msgpack's default since 1.0 (pyproject requires >= 1.0.8)"),
        ("-use_bin_type=True, -) +)", "use_bin_type=True is msgpack's default since 1.0 (pyproject requires >= 1.0.8)"),
        ("obj = msgpack.unpackb(data, raw=None, strict_map_key=True, ext_hook=_refuse_ext, **limits)",
         "unpackb's raw is a C bint: None converts to false"),
    ],
    "wire-validation": [
        ('_fail(path, "\'n\' must be an integer >= 1", )', _PASS_NET),
        ('_fail(path, f"must be a list of at most {max_len} maps" + (" or null" if (optional) or True else ""), value)',
         "every _maps checker is optional (Step.passes, the one MapList(optional=False), is check_step's own)"),
    ],
    "shim-hooks": [
        ('step.prefill = extend or bool(getattr(batch, "is_extend_in_batch", None))',
         "read only through bool(): None and False are both false"),
        ("    width = None", "read only as `and width` (a tree path needs draft tokens), where None and 0 are both false"),
        ('if (getattr(worker, "topk", 2) or 1) > 1:', "EAGLEWorkerV2 sets topk in __init__ (eagle_worker_v2.py 0.5.23, line 1317): the default is never read"),
        ('step.path = snap(snapshots, step, "PATH", getattr(result, "accept_index", None))',
         "the field name only keys the ring's buffers of a step: \"PATH\" is as unique a key as \"path\""),
        ('step.verify = ("v1", list(counts), snap(shim.snapshots, step, None, tokens))',
         "the field name only keys the ring's buffers of a step, and None is as unique a key there as \"ids\""),
        ('step.verify = ("v1", list(counts), snap(shim.snapshots, step, "XXidsXX", tokens))',
         "the field name only keys the ring's buffers of a step: \"XXidsXX\" is as unique a key as \"ids\""),
        ("return around(shim, seam, pre, post, hot=True, in_step=True, traceable=None)",
         "around reads traceable only as `traceable and _compiling()`: None is False there"),
        ("return around(shim, seam, pre, post, hot=True, traceable=None)",
         "around reads traceable only as `traceable and _compiling()`: None is False there"),
        ("observe(shim, step, result, None)", "no observer _timed is given (the draft's, v1's verify) reads the worker it is handed"),
        ("idle, extend = None", "the TypeError goes to _asked_once, which answers from the same memo: the same (idle, extend)"),
        ('n = getattr(worker, "speculative_num_steps", 3) - 1 if mode == "decode" else 1',
         "every worker whose draft call is hooked (EAGLEWorker, EagleDraftWorker, 0.5.10-0.5.23) sets "
         "speculative_num_steps in __init__: the default is never read"),
        ('n = getattr(worker, "speculative_num_steps", None) - 1 if mode == "decode" else 1',
         "every worker whose draft call is hooked (EAGLEWorker, EagleDraftWorker, 0.5.10-0.5.23) sets "
         "speculative_num_steps in __init__: the default is never read"),
    ],
    "shim-state": [
        ('if os.environ.get(env.ENABLE, "XXXX").strip() in ("1", "true", "yes", "on"):',
         "an unset EAGLE3SCOPE read as \"XXXX\" is no spelling of on, as \"\" is not"),
        ('self.src = ""', "start_publisher sets src before any frame is sent; nothing reads it before"),
        ("self.dropped = None", "Step.dropped is only truth-tested (if step.dropped): None is False there"),
        ('self._capture_key = ""', "only compared with capture_now's tuple key, which equals neither None nor \"\""),
        ('self.scheduler = ""', "read only as getattr(shim.scheduler, \"forward_ct\", None): None for both"),
        ('self.siblings: list[str] | None = ""', "read only into the hello, which is built after start_publisher sets it"),
        ('self.capture: dict | None = ""', "capture_now assigns shim.capture before it returns it (the first key "
         "never equals the initial _capture_key None), and nothing else reads it"),
    ],
    "store-index-seek": [
        ('after = self.batches[-1].id if self.batches else -2', "batch ids are SQLite rowids >= 1: id > -2 = id > -1"),
    ],
    "doctor-diagnosis": [
        ('optional = {"model.embed_tokens.weight"} | (set() if (own_head) and False else {"lm_head.weight"})  # shared from the target',
         "with its own head, lm_head.weight is in params already: also optional changes neither what is written "
         "nor what is missing (params - written)"),
    ],
    "doctor-config": [
        ("text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)".replace("default=str", "default=None"),
         "_short only shows values json.loads made, which json.dumps writes without a default"),
    ],
    "store-salvage": [
        ("for bid in _ids_with_holes(sorted(found), None):",
         "report is only used for a negative id, and probe_batch_ids(con) returns ids > -1 only"),
        ('     report.batches_lost.append((bid, "negative batch id"))\n-            continue\n+            break',
         "unreachable: probe_batch_ids(con) returns ids > -1 only"),
        ('-            report.batches_lost.append((bid, "negative batch id"))',
         "unreachable: probe_batch_ids(con) returns ids > -1 only"),
        ("value = json.loads(row[0]) if (row) or True else []",
         "without a row, row[0] raises TypeError, which _endpoints catches and answers [] as the else does"),
    ],
    "store-format": [
        ('last: Exception | None = ""',
         "every attempt that fails sets last before the message reads it (attempts is never empty)"),
        ('attempts = ("mode=ro", "mode=ro&immutable=1") if Path(f"{path}-wal").exists() else ("XXmode=ro&immutable=1XX",)',
         "SQLite ignores the unknown XXmode and reads immutable=1XX as true (its boolean parse is atoi): still an "
         "immutable open, which takes no lock and writes nothing, as the reader writes nothing"),
        ('con = sqlite3.connect(f"{uri}?{flags}", uri=None, isolation_level=None, check_same_thread=False)',
         "this build's SQLite (3.40, SQLITE_USE_URI=1) reads a file: name as a URI without the flag; not equivalent "
         "on a build without it"),
        ('con = sqlite3.connect(f"{uri}?{flags}", isolation_level=None, check_same_thread=False)',
         "as uri=None: this build's SQLite reads URIs without the flag"),
        ("raws = msgpack.unpackb(bytes(out), max_bin_len=MAX_FRAME_BYTES, max_array_len=MAX_BATCH_FRAMES,",
         "raw=False is msgpack's default (since 1.0; pyproject wants msgpack>=1.0)"),
    ],
    "store-index-write": [
        ("if seq >= self._seq_hi:", "a seq equal to the running maximum sets it to the value it has"),
        ("-    self._sources_dirty = False\n+    self._sources_dirty = None", "only truth-tested: None is False"),
        ("-    self._sources_dirty = False\n+    self._sources_dirty = True",
         "after a flush, every later batch rewrites the meta row `sources` with the value it holds already: a cost"),
    ],
    "store-replayer": [
        ("if self._batch_pos - 1 >= len(self.reader.batches):",
         "past the last batch _fill leaves no frames, so _peek returns None two positions later; position reads "
         "count() for any _batch_pos >= len(batches) and nothing else reads it before a seek reloads"),
        ("if pace is None or 1 <= frame.t - pace <= self._max_gap_ns or not self._lone(frame):",
         "a gap of 0 sets _pace_t to the value it has already"),
        ("-    self._batch_pos = 0\n+    self._batch_pos = 1", "__init__'s _load(0) sets _batch_pos before anything reads it"),
        ("if not 0 < gap <= self._max_gap_ns:", "a gap of 0 taken into the clamp comes out 0 on both of its branches"),
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
    setup_s: float = 0.0  # mutant generation and the coverage pass

    @property
    def error(self) -> float:
        """Standard error of the score as an estimate of the whole population's (0 for a full run)."""
        n, big_n, p = self.considered, self.population, self.score
        if not n or n >= big_n:
            return 0.0
        return math.sqrt(p * (1 - p) / n * (big_n - n) / max(big_n - 1, 1))

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


SHIM = "instrumentation/eagle3scope_shim"


def paths(target: Target) -> tuple[str, ...]:
    """The mutated files as mutmut sees them: the shim's package sits at the top of the scratch copy."""
    named = (target.path,) if isinstance(target.path, str) else target.path
    return tuple(p.replace(SHIM, "eagle3scope_shim", 1) for p in named)


def configure(work: Path, targets: list[Target]) -> None:
    # mutmut names a mutant's module by its path and puts mutants/ first on sys.path: the shim (an
    # `instrumentation/` package) is copied to the top so that `import eagle3scope_shim` finds the mutant
    shutil.copytree(work / SHIM, work / "eagle3scope_shim")
    selection = [*dict.fromkeys(t for target in targets for t in target.tests), "-m", "not engine",
                 *(arg for test in NOT_UNDER_MUTMUT for arg in ("--deselect", test))]
    if len(targets) == 1 and targets[0].deselect:
        selection += ["-k", targets[0].deselect]
    config = {
        "source_paths": ["eagle3scope", "eagle3scope_shim"],
        "only_mutate": list(dict.fromkeys(p for target in targets for p in paths(target))),
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q", "-x"],
        "pytest_add_cli_args_test_selection": selection,
        # mutmut copies only the sources and tests/ into mutants/: the files tests read (themes/ for
        # the TUI, examples/, README.md) come too, else its coverage pass fails and nothing is tested
        "also_copy": sorted(p.name for p in work.iterdir()
                            if p.name not in ("eagle3scope", "eagle3scope_shim", "tests", "mutants", "pyproject.toml")),
    }
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    with open(work / "pyproject.toml", "a") as f:
        f.write("\n".join(lines) + "\n")


def mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "mutmut"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([str(exe), *args], cwd=work, capture_output=True, text=True, env=env, timeout=timeout)


def diff_of(work: Path, mutant: str, source: str) -> str:
    """The mutant's diff, rendered in this process (a `mutmut show` per survivor costs seconds each)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    here = os.getcwd()
    try:
        os.chdir(work)
        return get_diff_for_mutant(mutant, path=source)
    except Exception:  # noqa: BLE001 - an internal of mutmut's changed: ask the command
        return mutmut(work, "show", mutant).stdout
    finally:
        os.chdir(here)


def run_modules(names: list[str], jobs: int, sample: int | None, seed: int, budget: float | None = None,
                progress=None) -> list[Score]:
    """Mutate `names` in one scratch copy over the union of their tests: mutmut collects its per-test
    coverage once, then each mutant runs only the tests that reach its function. Mutants are drawn in
    turn from each module's random order, so a --budget spreads over every module."""
    from mutmut.stats import status_by_exit_code

    started = time.monotonic()
    targets = [MODULES[name] for name in names]
    with tempfile.TemporaryDirectory(prefix=f"mutation-{'+'.join(names)[:60]}-") as tmp:
        work = Path(tmp)
        scratch_copy(work)
        configure(work, targets)
        metas = {name: [work / "mutants" / (p + ".meta") for p in paths(MODULES[name])] for name in names}
        # first pass: generate the mutants and the test-coverage stats, test none (no name matches)
        done = mutmut(work, "run", "--max-children", str(jobs), "no-such-mutant")
        if not all(meta.exists() for group in metas.values() for meta in group):
            raise RuntimeError(f"mutmut generated nothing\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        if not (work / "mutants" / "mutmut-stats.json").exists():  # a selected test failed: nothing can run
            raise RuntimeError(f"mutmut's stats pass failed\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
        rng = random.Random(seed)
        population = {name: in_scope(metas[name], MODULES[name]) for name in names}
        orders = {name: rng.sample(pop, len(pop))[:sample] for name, pop in population.items()}
        setup_s = time.monotonic() - started
        chosen: set[str] = set()

        def tally() -> list[Score]:
            codes = {k: v for group in metas.values() for meta in group
                     for k, v in json.loads(meta.read_text())["exit_code_by_key"].items()}
            scores = []
            for name in names:
                score = Score(name, population=len(population[name]), setup_s=setup_s,
                              seconds=time.monotonic() - started)
                for mutant in sorted(chosen.intersection(population[name])):
                    code = codes.get(mutant)
                    score.statuses[mutant] = "not run" if code is None else status_by_exit_code[code]
                scores.append(score)
            return scores

        chunk = max(jobs, 3)
        while any(orders.values()) and (budget is None or time.monotonic() - started < budget):
            batch = []
            for name in names:
                take, orders[name] = orders[name][:chunk], orders[name][chunk:]
                batch += [m for m in take if m not in chosen]
            if budget is None:
                batch += [m for order in orders.values() for m in order if m not in chosen]
                orders = {name: [] for name in names}
            if batch:
                mutmut(work, "run", "--max-children", str(jobs), *batch)
                chosen.update(batch)
                if progress:
                    progress(tally(), final=False)

        scores = tally()
        source_of = {m: str(meta.relative_to(work / "mutants"))[:-len(".meta")] for group in metas.values()
                     for meta in group for m in json.loads(meta.read_text())["exit_code_by_key"]}
        for score in scores:
            name = score.module
            for mutant, status in score.statuses.items():
                if status in ("survived", "no tests", "not run"):
                    score.diffs[mutant] = diff_of(work, mutant, source_of[mutant])
                    reason = _equivalent(name, score.diffs[mutant])
                    if reason:
                        score.equivalent[mutant] = reason
            if progress:
                progress([score], final=True)
    return scores


def in_scope(metas: list[Path], target: Target) -> list[str]:
    return sorted(m for meta in metas for m in json.loads(meta.read_text())["exit_code_by_key"]
                  if not target.functions or any(_glob(m, pattern) for pattern in target.functions))


def _glob(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(name, pattern)


_SQL_WORD = re.compile(r'^"\s*(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|CREATE|PRAGMA|ORDER|WHERE|FROM|AND|VALUES|INTO|LIMIT)\b',
                       re.IGNORECASE)


def _sql_case_only(diff: str) -> bool:
    """One line changed, and only in the letter case of string literals that are SQL statements."""
    minus = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    plus = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    if len(minus) != 1 or len(plus) != 1 or minus == plus or minus[0].lower() != plus[0].lower():
        return False
    pairs = list(zip(re.findall(r'"[^"]*"', minus[0]), re.findall(r'"[^"]*"', plus[0])))
    return all(_SQL_WORD.match(old) for old, new in pairs if old != new) and any(old != new for old, new in pairs)


def _equivalent(module: str, diff: str) -> str | None:
    """The reason a survivor is judged equivalent: a needle equals one added line of its diff; or (for a
    mutant that only deletes, whose added line says nothing) the whole change, "-old -old +new" with
    each line stripped; or, where one added line is too common ("break"), a run of diff lines (with
    "\n", or one removed line "-...": any change of that line). SQL-case-only store mutants by rule."""
    if module.startswith("store-") and _sql_case_only(diff):
        return _SQL_CASE
    lines = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    changed = [line[1:].strip() for line in lines if line.startswith("+")]
    whole = " ".join(line[0] + line[1:].strip() for line in lines)
    for needle, reason in EQUIVALENT.get(module, []):
        if needle == whole or any(needle == line for line in changed) or (
                ("\n" in needle or needle.startswith("-")) and needle in diff):
            return reason
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE", help="any of " + ", ".join(MODULES) + " (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested in parallel")
    parser.add_argument("--survivors", action="store_true", help="print every surviving mutant's diff")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--sample", type=int, help="test only this many mutants per module, drawn at random")
    parser.add_argument("--budget", type=float, help="per module: test mutants (in random order) for this many seconds")
    parser.add_argument("--together", action="store_true",
                        help="all MODULEs in one mutmut session (one coverage pass over the union of their tests); "
                             "--budget is then the whole run's, shared in turn between the modules")
    parser.add_argument("--seed", type=int, help="seed of the random draw (default: a fresh one, printed)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    unknown = set(args.modules) - set(MODULES)
    if unknown:
        parser.error(f"unknown module(s): {', '.join(sorted(unknown))}")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    print(f"mutmut over the fast suite; commit {commit}{' (modified)' if dirty else ''}, seed {seed}; "
          f"machine: {os.cpu_count()} CPUs, {load}")
    print(f"{'module':<18} {'in scope':>8} {'tested':>6} {'killed':>6} {'survived':>8} {'unreached':>9} {'equiv':>5} "
          f"{'score':>6} {'error':>6} {'time':>7}")
    report = {"_run": {"commit": commit, "modified": bool(dirty), "seed": seed, "load": load}}
    names = args.modules or list(MODULES)

    def show(scores: list[Score], final: bool) -> None:
        for s in scores:
            if final:
                show_one(s)
            else:  # a long run keeps what it has measured so far
                report.setdefault("_partial", {})[s.module] = {
                    "in_scope": s.population, "tested": len(s.statuses), "killed": s.killed, "statuses": s.statuses}
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))

    def show_one(s: Score) -> None:
        report.get("_partial", {}).pop(s.module, None)
        print(f"{s.module:<18} {s.population:>8} {len(s.statuses):>6} {s.killed:>6} {s.count('survived'):>8} "
              f"{s.count('no tests', 'not run'):>9} {len(s.equivalent):>5} {s.score:>6.1%} {s.error:>6.1%} "
              f"{s.seconds:>6.0f}s", flush=True)
        report[s.module] = {"in_scope": s.population, "tested": len(s.statuses), "killed": s.killed,
                            "survived": s.count("survived"), "unreached": s.count("no tests", "not run"),
                            "equivalent": s.equivalent, "score": s.score, "error": s.error,
                            "seconds": round(s.seconds), "setup_seconds": round(s.setup_s),
                            "statuses": s.statuses,
                            "survivors": {m: d for m, d in s.diffs.items() if m not in s.equivalent}}
        if args.json:  # after each module: a long run keeps what it has measured
            args.json.write_text(json.dumps(report, indent=2))
        if args.survivors:
            for mutant, diff in s.diffs.items():
                if mutant not in s.equivalent:
                    print(f"--- {mutant} ({s.statuses[mutant]})\n{diff}")

    groups = [names] if args.together else [[name] for name in names]
    for group in groups:
        run_modules(group, args.jobs, args.sample, seed, args.budget, progress=show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
