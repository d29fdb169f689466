"""``doctor --json`` pinned whole on a table of checkpoints: every finding's id, severity, title,
evidence and fix, the headline, verdict, refusals, assumptions and notes. These texts are an
interface (README "doctor": the title says what SGLang will do, the fix the next step), so a changed
word is a change to review: the expected reports are in ``data/doctor_reports.json``; after a
deliberate change, rewrite it with ``EAGLE3SCOPE_REWRITE_PINNED=1 pytest tests/doctor/test_doctor_texts.py``
and review its diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from benchmarks.support import draft_checkpoints as dc
from support.cli import invoke

PINNED = Path(__file__).parent / "data" / "doctor_reports.json"


def _weights(**change) -> dict:
    """dc.tensors() with tensors replaced (a value) or removed (None)."""
    weights = dc.tensors()
    for name, value in change.items():
        if value is None:
            weights.pop(name, None)
        else:
            weights[name] = value
    return weights


def _narrow_fc() -> np.ndarray:
    return dc.tensors()["fc.weight"][:, : 2 * dc.H]


def _other_target(root: Path, **fields) -> Path:
    other = root / "other-target"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**dc.llama_fields(), "architectures": ["LlamaForCausalLM"],
                                                   "num_hidden_layers": dc.TARGET_LAYERS, **fields}))
    return other


def _fixed_with_a_flag(root: Path) -> Path:
    """speculators' norm_before_residual, through `fix`: the copy's record keeps the flag."""
    config = {**dc.speculators_config(), "norm_before_residual": True}
    draft = dc.write(root / "d", dc.tensors("layers.0."), config)
    assert invoke("fix", str(draft), "--out", str(root / "fixed")).exit_code == 0
    return root / "fixed"


def _d2t_disagreeing() -> dict:
    t2d = np.zeros(dc.TARGET_VOCAB, bool)
    t2d[1::2] = True  # d2t as offsets says 0, 2, 4, ...; as ids 0..31; t2d says 1, 3, 5, ...
    return _weights(d2t=np.arange(dc.DRAFT_VOCAB, dtype=np.int64), t2d=t2d)


def _pickled(root: Path) -> Path:
    pickled = root / "p"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not opened")
    (pickled / "config.json").write_text(json.dumps(dc.specforge_config()))
    return pickled


def _missing_shard(root: Path) -> Path:
    draft = dc.write(root / "d", dc.tensors(), dc.specforge_config(), shards=2)
    (draft / "model-00002-of-00002.safetensors").unlink()
    return draft


def _q_norm() -> dict:
    weights = dc.tensors("layers.0.")
    weights["layers.0.self_attn.q_norm.weight"] = np.ones(dc.HEAD_DIM, np.float16)
    return weights


def _d2t_absolute() -> dict:
    weights = dc.tensors()
    weights["d2t"] = weights["d2t"] + np.arange(len(weights["d2t"]))
    return weights


def _mla(**change) -> dict:
    """dc.modelopt_mla_tensors() with tensors replaced (a value) or removed (None)."""
    weights = dc.modelopt_mla_tensors()
    for name, value in change.items():
        weights.pop(name) if value is None else weights.__setitem__(name, value)
    return weights


def _fc_norms() -> dict:
    """SpecForge's EAGLE-3.1 layout (qwen3-30B-A3B-eagle3.1.json): fc_norm and norm_output tensors."""
    weights = dc.tensors()
    for i in range(3):
        weights[f"fc_norm.{i}.weight"] = np.ones(dc.H, np.float16)
    return weights


def _duplicated(root: Path) -> Path:
    """One tensor in two files (no index): which copy SGLang loads is an accident."""
    from safetensors.numpy import save_file

    draft = dc.write(root / "d", dc.tensors(), dc.specforge_config())
    save_file({"norm.weight": dc.tensors()["norm.weight"]}, str(draft / "extra.safetensors"))
    return draft


def _with_config(root: Path, config: object) -> Path:
    """A directory holding only config.json (``config`` as JSON)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    return root


def _speculators(**layer) -> dict:
    """speculators' config with fields of its transformer_layer_config replaced."""
    config = dc.speculators_config()
    return {**config, "transformer_layer_config": {**config["transformer_layer_config"], **layer}}


def _link_out(root: Path) -> Path:
    """A draft directory with a link to a file outside it (never followed)."""
    draft = dc.specforge(root / "d")
    (root / "outside.json").write_text("{}")
    (draft / "extra.json").symlink_to(root / "outside.json")
    return draft


# name -> (draft directory builder(root), doctor's arguments builder(root)); "T": the test target
SCENARIOS = {
    **{f"{producer}-{version}": (lambda root, p=producer: dc.producer_layout(p, root)[0],
                                 lambda root, p=producer, v=version: ["--sglang-version", v, "--target", str(
                                     root / ("ds-target" if "kimi" in p or "mla" in p else "llama-target"))])
       for producer in ("speculators", "specforge", "modelopt-2-layers", "midlayer-N", "modelopt-mla", "eagle",
                        "specforge-kimi") for version in ("0.5.10", "0.5.23")},
    "aux-capture-off": (lambda root: dc.specforge(root / "d", eagle_config={
        "eagle_aux_hidden_state_layer_ids": dc.AUX_IDS, "use_aux_hidden_state": False}), lambda root: []),
    "aux-layers-mismatch": (lambda root: dc.specforge(root / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}),
                            lambda root: ["--target", str(dc.target(root / "t"))]),
    "aux-layers-out-of-range": (lambda root: dc.specforge(root / "d", eagle_config={
        "eagle_aux_hidden_state_layer_ids": [1, 3, 7]}), lambda root: ["--target", str(dc.target(root / "t"))]),
    "config-field-invalid": (lambda root: dc.write(root / "d", dc.tensors("layers.0."), {
        **dc.speculators_config(), "transformer_layer_config": 5}), lambda root: ["--sglang-version", "0.5.23"]),
    "config-missing": (lambda root: dc.write(root / "d", dc.tensors(), None), lambda root: []),
    "pickle-weights": (_pickled, lambda root: []),
    "missing-shard": (_missing_shard, lambda root: []),
    "embed-random": (lambda root: dc.write(root / "d", _weights(**{"fc.weight": np.zeros((dc.H, 6 * dc.H), np.float16),
                                                                   "embed_tokens.weight": None}),
                                           dc.specforge_config(target_hidden_size=2 * dc.H)), lambda root: []),
    "weights-dropped-0.5.23": (lambda root: dc.write(root / "d", _q_norm(), dc.specforge_config()),
                               lambda root: ["--sglang-version", "0.5.23"]),
    "fc-shape": (lambda root: dc.write(root / "d", _weights(**{"fc.weight": _narrow_fc()}), dc.specforge_config()),
                 lambda root: ["--target", str(dc.target(root / "t"))]),
    "fc-shape-wide-target": (lambda root: dc.write(root / "d", _weights(**{"fc.weight": np.zeros((dc.H, 6 * dc.H), np.float16)}),
                                                   dc.specforge_config()), lambda root: ["--target", str(_other_target(root, hidden_size=2 * dc.H))]),
    "lm-head-from-target": (lambda root: dc.write(root / "d", _weights(**{"lm_head.weight": None, "d2t": None, "t2d": None}),
                                                  dc.specforge_config(draft_vocab_size=None)), lambda root: []),
    "no-eagle3": (lambda root: dc.specforge(root / "d"), lambda root: ["--sglang-version", "0.4.4"]),
    "shape-mismatch": (lambda root: dc.write(root / "d", _weights(**{
        "midlayer.mlp.down_proj.weight": dc.tensors()["midlayer.mlp.down_proj.weight"][:, :16]}), dc.specforge_config()),
        lambda root: []),
    "t2d-invalid": (lambda root: dc.write(root / "d", _weights(t2d=np.ones(5, bool)), dc.specforge_config()), lambda root: []),
    "d2t-absolute": (lambda root: dc.write(root / "d", _d2t_absolute(), dc.specforge_config()), lambda root: []),
    "weights-crash-0.4.8": (lambda root: dc.speculators(root / "d"), lambda root: ["--sglang-version", "0.4.8"]),
    "d2t-missing": (lambda root: dc.write(root / "d", _weights(d2t=None, t2d=None), dc.specforge_config()), lambda root: []),
    "d2t-missing-0.4.8": (lambda root: dc.write(root / "d", _weights(d2t=None, t2d=None), dc.specforge_config(draft_vocab_size=None)),
                          lambda root: ["--sglang-version", "0.4.8"]),
    "eagle-config-ignored": (lambda root: dc.write(root / "d", dc.tensors(), dc.specforge_config(norm_before_fc=True)),
                             lambda root: ["--sglang-version", "0.5.11"]),
    "fc-norm-0.5.10": (lambda root: dc.write(root / "d", _fc_norms(), dc.specforge_config(fc_norm=True, norm_output=True)),
                       lambda root: ["--sglang-version", "0.5.10"]),
    "mla-embed-0.5.23": (lambda root: dc.write(root / "d", _mla(**{"embed_tokens.weight": np.ones((dc.TARGET_VOCAB, dc.H),
                                                                                                   np.float16)}),
                                               dc.modelopt_mla_config()), lambda root: ["--sglang-version", "0.5.23"]),
    "mla-unpaired-0.5.23": (lambda root: dc.write(root / "d", _mla(**{"layers.0.self_attn.kv_a_proj_with_mqa.weight": None}),
                                                  dc.modelopt_mla_config()), lambda root: ["--sglang-version", "0.5.23"]),
    "fc-3-config-4-0.5.10": (lambda root: dc.specforge(root / "d", eagle_config={
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4], "use_aux_hidden_state": True}),
        lambda root: ["--sglang-version", "0.5.10"]),
    "vocab-mismatch": (lambda root: dc.specforge(root / "d"),
                       lambda root: ["--target", str(_other_target(root, vocab_size=2 * dc.TARGET_VOCAB))]),
    "target-unreadable": (lambda root: dc.specforge(root / "d"), lambda root: ["--target", str(root)]),  # no config.json
    "d2t-mismatch": (lambda root: dc.write(root / "d", _d2t_disagreeing(), dc.specforge_config()),
                     lambda root: ["--sglang-version", "0.5.23"]),
    "lm-head-tied": (lambda root: dc.specforge(root / "d", tie_word_embeddings=True), lambda root: []),
    "lm-head-tied-no-head": (lambda root: dc.write(root / "d", _weights(**{"lm_head.weight": None}),
                                                   dc.specforge_config(tie_word_embeddings=True)), lambda root: []),
    "producer-flag-ignored": (_fixed_with_a_flag, lambda root: ["--sglang-version", "0.5.23"]),
    "mla-extra-0.5.23": (lambda root: dc.write(root / "d", _mla(**{"layers.0.extra.weight": np.ones(4, np.float16)}),
                                               dc.modelopt_mla_config()), lambda root: ["--sglang-version", "0.5.23"]),
    "d2t-invalid": (lambda root: dc.write(root / "d", _weights(d2t=-np.arange(dc.DRAFT_VOCAB, dtype=np.int64), t2d=None),
                                          dc.specforge_config()), lambda root: []),
    "d2t-outside": (lambda root: dc.write(root / "d", _weights(d2t=np.full(dc.DRAFT_VOCAB, 10 * dc.TARGET_VOCAB, np.int64),
                                                           t2d=None), dc.specforge_config()), lambda root: []),
    "no-weights": (lambda root: _with_config(root / "d", dc.specforge_config()), lambda root: []),
    "fix-record-9-notes": (lambda root: dc.specforge(root / "d", eagle3scope_fix={"notes": [f"note {i}" for i in range(9)]}),
                           lambda root: []),
    "duplicate-tensors": (_duplicated, lambda root: []),
    "target-not-an-object": (lambda root: dc.specforge(root / "d"),
                             lambda root: ["--target", str(_with_config(root / "t", [1, 2]))]),
    "fc-norm-one-0.5.10": (lambda root: dc.write(root / "d", {**dc.tensors(), "fc_norm.0.weight": np.ones(dc.H, np.float16)},
                                                 dc.specforge_config(fc_norm=True)), lambda root: ["--sglang-version", "0.5.10"]),
    "fc-four-aux-0.5.10": (lambda root: dc.write(root / "d", _weights(**{"fc.weight": np.zeros((dc.H, 4 * dc.H), np.float16)}),
                                                 dc.specforge_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4],
                                                                                   "use_aux_hidden_state": True})),
                           lambda root: ["--sglang-version", "0.5.10"]),
    "fc-odd-width": (lambda root: dc.write(root / "d", _weights(**{"fc.weight": np.zeros((dc.H, 5 * dc.H // 2), np.float16)}),
                                           dc.specforge_config()), lambda root: []),
    "d2t-empty": (lambda root: dc.write(root / "d", _weights(d2t=np.zeros(0, np.int64), t2d=None), dc.specforge_config()),
                  lambda root: []),
    "d2t-empty-no-vocab": (lambda root: dc.write(root / "d", _weights(d2t=np.zeros(0, np.int64), t2d=None),
                                                 dc.specforge_config(draft_vocab_size=None)), lambda root: []),
    "hidden-size-2^40": (lambda root: dc.specforge(root / "d", hidden_size=1 << 40), lambda root: []),
    "hidden-size-text": (lambda root: dc.specforge(root / "d", hidden_size="big"), lambda root: []),
    "target-hidden-null": (lambda root: dc.write(root / "d", dc.tensors(), {**dc.specforge_config(), "target_hidden_size": None}),
                           lambda root: []),
    "target-without-architectures": (lambda root: dc.specforge(root / "d"), lambda root: [
        "--target", str(_with_config(root / "t", {k: v for k, v in dc.llama_fields().items() if k != "architectures"}))]),
    "qwen3-layer": (lambda root: dc.write(root / "d", dc.tensors("layers.0."), _speculators(model_type="qwen3")),
                    lambda root: ["--sglang-version", "0.5.23"]),
    "speculators-flags": (lambda root: dc.write(root / "d", dc.tensors("layers.0."), {
        **_speculators(_attn_implementation="sdpa"), "norm_before_residual": True, "fc_norm": True}),
        lambda root: ["--sglang-version", "0.5.23"]),
    "link-out": (_link_out, lambda root: []),
    "draft-is-a-target": (lambda root: dc.write(root / "d", dc.tensors(), {**dc.specforge_config(),
                                                                           "architectures": ["LlamaForCausalLM"]}),
                          lambda root: []),
    "d2t-2d": (lambda root: dc.write(root / "d", _weights(d2t=np.zeros((4, 8), np.int64), t2d=None), dc.specforge_config()),
               lambda root: []),
    "heads-not-dividing": (lambda root: dc.specforge(root / "d", num_attention_heads=3), lambda root: []),
    "architecture-foo": (lambda root: dc.write(root / "d", dc.tensors(), {**dc.specforge_config(), "architectures": ["FooEagle"]}),
                         lambda root: ["--sglang-version", "0.5.23"]),
}


#: finding ids the table reaches (so that an edit of a scenario cannot silently drop one)
REACHED = {"architecture", "architecture-unsupported", "aux-capture-off", "aux-layers-era", "aux-layers-mismatch",
           "aux-layers-out-of-range", "config-field-invalid", "config-incomplete", "config-missing",
           "config-speculators-format", "d2t-absolute", "d2t-invalid", "d2t-mismatch", "d2t-missing",
           "duplicate-tensors", "eagle-config-ignored", "embed-random", "fc-shape", "fc-width-unsupported",
           "hidden-width-mismatch", "layer-type-unsupported", "lm-head-from-target", "lm-head-mismatch",
           "lm-head-tied", "multi-layer-draft", "no-eagle3", "no-weights", "not-modelled", "pickle-weights",
           "producer-flag-ignored", "shape-mismatch", "t2d-invalid", "target-hidden-null", "target-unreadable",
           "unsafe-entry", "vocab-mismatch", "weights-crash", "weights-dropped", "weights-unreadable",
           "weights-unused", "weights-unwritten"}


def _report(root: Path, name: str) -> dict:
    build, args = SCENARIOS[name]
    draft = build(root)
    result = invoke("doctor", str(draft), "--json", *args(root))
    text = result.output.replace(str(root), "<root>")
    return {"exit": result.exit_code, **{k: v for k, v in json.loads(text).items() if k not in ("draft", "tensors")}}


def test_doctor_reports_are_pinned_whole(tmp_path):
    got = {}
    for name in SCENARIOS:
        (tmp_path / name).mkdir()
        got[name] = _report(tmp_path / name, name)
    if os.environ.get("EAGLE3SCOPE_REWRITE_PINNED"):
        PINNED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    pinned = json.loads(PINNED.read_text())
    assert sorted(got) == sorted(pinned)
    assert {f["id"] for report in got.values() for f in report["findings"]} >= REACHED  # the table still reaches them
    for name in SCENARIOS:  # one scenario at a time: a failure names it
        assert got[name] == pinned[name], name
