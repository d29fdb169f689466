"""The CPU engine distribution (cpu_engine/): kernel ops against references, plugin, torchvision stand-in.

All of it runs in the engine venv; the op checks live in engine_side/kernel_checks.py
and run in one subprocess.
"""

import json

import pytest

from support.engine import run_engine_python

pytestmark = pytest.mark.engine

# What SGLang 0.5.23's CPU path calls for a dense Llama target + EAGLE-3 draft (top-k 1 and trees;
# the sampling verify once the cpu_engine plugin enables it), and for a DeepseekV3 / Kimi-K2.5 target
# (MLA, MoE): the same ops, attention in the MLA layouts. Its MoE routing, fused experts, rope and MLA
# projection kernels (grouped_topk_cpu, fused_experts_cpu, ...) are reached only with AMX-packed weights,
# i.e. never while convert_weight_packed is absent (traced on a served tiny DeepseekV3).
CPU_PATH_OPS = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "decode_attention_cpu",
    "extend_attention_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "tree_speculative_sampling_target_only",
    "verify_tree_greedy_cpu",
]


@pytest.fixture(scope="module")
def kernel_results(engine_python):
    done = run_engine_python(engine_python, "tests/engine_side/kernel_checks.py", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("op", CPU_PATH_OPS)
def test_op_matches_reference(kernel_results, op):
    assert kernel_results.get(op) == "ok", kernel_results.get(op, "op not checked")


# Conventions pinned to SGLang 0.5.23's source and the sgl-kernel C++ checks (engine_side/kernel_checks.py).
CONVENTIONS = ["sliding_window", "kv_scales", "extend_reads_new_kv_from_the_pool", "extend_sinks_and_logit_cap",
               "index_dtypes"]


@pytest.mark.parametrize("name", CONVENTIONS)
def test_attention_convention(kernel_results, name):
    assert kernel_results.get(f"convention:{name}") == "ok", kernel_results.get(f"convention:{name}", "not checked")


@pytest.mark.parametrize("name", ["top_k_renorm_prob", "top_p_renorm_prob"])
def test_sampling_renorm_matches_flashinfer_semantics(kernel_results, name):
    """Sampled verify of a batch mixing greedy (top-k 1) and sampled requests renormalises by top-k /
    top-p; SGLang's CPU platform has no kernel for either, the cpu_engine plugin fills the slot."""
    assert kernel_results.get(f"renorm:{name}") == "ok", kernel_results.get(f"renorm:{name}", "not checked")


def test_ops_registered_for_both_call_paths_and_amx_packing_absent(kernel_results):
    # SGLang calls some ops as torch.ops.sgl_kernel.X and others as sgl_kernel.X.
    assert kernel_results["__registered__"] == sorted(CPU_PATH_OPS)
    # Without convert_weight_packed, cpu_has_amx_support() stays false: torch-native layers.
    assert kernel_results["__has_convert_weight_packed__"] is False


PLATFORM_PROBE = """
from sglang.srt.plugins import load_plugins
from sglang.srt.runtime_context import get_platform
from sglang.srt.utils.common import cpu_has_amx_support
load_plugins()
print(get_platform().has_amx, cpu_has_amx_support())
"""


@pytest.mark.parametrize("env, declared", [
    ({"SGLANG_USE_CPU_ENGINE": "1"}, "True"),
    ({"SGLANG_USE_CPU_ENGINE": "1", "EAGLE3SCOPE_CPU_AMX": "0"}, "False"),
])
def test_plugin_declares_amx_only_for_the_cpu_engine(engine_python, env, declared):
    done = run_engine_python(engine_python, "-c", PLATFORM_PROBE, env={"EAGLE3SCOPE_CPU_AMX": "", **env},
                             timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    has_amx, kernels_packed = done.stdout.split()[-2:]
    assert has_amx == declared
    assert kernels_packed == "False"


GPU_SYNC_PROBE = """
import torch
from sglang.srt.plugins import load_plugins
load_plugins()
print(torch.cuda.is_available(), torch.cuda.synchronize())
"""


def test_plugin_makes_gpu_sync_a_no_op_without_a_gpu(engine_python):
    # SGLang 0.5.23's MLA EAGLE-3 draft (kimi_k25_eagle3 set_embed) calls torch.cuda.synchronize() on any device.
    done = run_engine_python(engine_python, "-c", GPU_SYNC_PROBE, env={"SGLANG_USE_CPU_ENGINE": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["False", "None"]
    without = run_engine_python(engine_python, "-c", GPU_SYNC_PROBE, env={"SGLANG_USE_CPU_ENGINE": "0"}, timeout=300)
    assert without.returncode != 0 and "not compiled with CUDA" in without.stderr


def test_torchvision_standin_imports_like_transformers_needs_and_refuses_use(engine_python):
    probe = (
        "import transformers.image_utils\n"
        "from torchvision.transforms import InterpolationMode\n"
        "import torchvision.transforms.v2.functional as F\n"
        "print(InterpolationMode.NEAREST_EXACT.value)\n"
        "try:\n    F.resize(None, [2, 2])\nexcept RuntimeError as e:\n    print('refused:', e)\n"
    )
    done = run_engine_python(engine_python, "-c", probe, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "nearest-exact"
    assert lines[1].startswith("refused: torchvision.transforms.v2.functional.resize is unavailable")
