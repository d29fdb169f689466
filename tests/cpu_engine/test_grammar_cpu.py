"""Grammar-constrained verify on the CPU engine: SGLang's own masks (xgrammar's matcher over the draft
tree, xgrammar's CPU bitmask function) with this project's verify kernels. The checks run in the
engine venv, in one subprocess (engine_side/grammar_checks.py), with Triton's interpreter so that the
Triton kernel SGLang's CUDA path masks with runs on CPU beside the CPU function."""

import json
import os

import pytest
from support.engine import run_engine_python

from eagle3scope.demo.server import checkout_pythonpath

pytestmark = pytest.mark.engine

CHECKS = ["bitmask_matches_the_cuda_paths_kernel", "greedy_verify_commits_only_what_the_grammar_accepts",
          "sampled_verify_commits_only_what_the_grammar_accepts"]


@pytest.fixture(scope="module")
def grammar_results(engine_python):
    env = {**checkout_pythonpath(os.environ), "TRITON_INTERPRET": "1", "SGLANG_USE_CPU_ENGINE": "1"}
    done = run_engine_python(engine_python, "tests/engine_side/grammar_checks.py", timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("check", CHECKS)
def test_constrained_verify_on_cpu(grammar_results, check):
    assert grammar_results.get(check) == "ok", grammar_results.get(check, "not checked")
