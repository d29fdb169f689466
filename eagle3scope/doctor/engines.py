"""One adapter per serving engine: what the doctor runs for ``--engine`` (:data:`ENGINES`), and the
one line that says which target layers each engine captures for a draft's ids.

The facts each adapter predicts from are data in ``engine_facts``; the checks are ``run_checks``
(SGLang, per release) and ``vllm_checks`` (vLLM).
"""

from __future__ import annotations

from pathlib import Path

from eagle3scope.doctor.engine_facts import SGLANG, VLLM, vllm_ids
from eagle3scope.doctor.findings import Diagnosis
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.vllm_checks import diagnose_for_vllm
from eagle3scope.wire.aux_layers import Engine, captured_for, family_rule, vllm_captured


class SGLangAdapter:
    facts = SGLANG

    def diagnose(self, draft_dir: str | Path, *, version: str | None = None,
                 target_dir: str | Path | None = None) -> Diagnosis:
        return diagnose(draft_dir, sglang_version=version, target_dir=target_dir)


class VllmAdapter:
    facts = VLLM

    def diagnose(self, draft_dir: str | Path, *, version: str | None = None,
                 target_dir: str | Path | None = None) -> Diagnosis:
        return diagnose_for_vllm(draft_dir, vllm_version=version, target_dir=target_dir)


ENGINES = {Engine.SGLANG: SGLangAdapter(), Engine.VLLM: VllmAdapter()}


def numbering_line(config: dict | None, target_class: str, num_layers: int | None, sglang_version: str) -> str:
    """One line: which target layers each engine captures for this draft config's ids (lists written
    without spaces up to four ids so it fits 80 columns; longer ones with spaces, so they wrap)."""
    config = config if isinstance(config, dict) else {}
    eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    s_ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    s_ids = s_ids if isinstance(s_ids, list) and s_ids and all(type(i) is int for i in s_ids) else None
    v_ids, _ = vllm_ids(config)
    v_ids = v_ids if v_ids and all(type(i) is int for i in v_ids) else None
    rule = family_rule(target_class, sglang_version)
    n = num_layers or 0
    s_cap = None if rule is None or (s_ids is None and not n) else captured_for(s_ids, rule, n)
    v_cap = None if v_ids is None and not n else vllm_captured(v_ids, n)
    def short(layers) -> str:
        return "?" if layers is None else "[" + ("," if len(layers) <= 4 else ", ").join(map(str, layers)) + "]"

    same_ids = s_ids == v_ids
    s_text = f"SGLang captures {short(s_cap)}" + ("" if same_ids else f" from {short(s_ids) if s_ids else 'default'}")
    v_text = f"vLLM {short(v_cap)}" + ("" if same_ids else f" from {short(v_ids) if v_ids else 'default'}")
    if s_cap is not None and v_cap is not None and len(s_cap) == len(v_cap):
        shift = {v - s for s, v in zip(s_cap, v_cap)}
        verdict = "the same layers" if shift == {0} else \
            f"vLLM one layer {'lower' if shift == {-1} else 'higher'}" if shift in ({-1}, {1}) else "different layers"
    else:
        verdict = "pass --target to resolve defaults" if s_cap is None or v_cap is None else "different layers"
    ids = f"aux ids {short(s_ids)}" if same_ids and s_ids else "aux ids" if not same_ids else "no aux ids"
    return f"{ids}: {s_text}, {v_text} ({verdict})"
