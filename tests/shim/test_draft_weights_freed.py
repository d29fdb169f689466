"""The load watch holds nothing SGLang frees after loading: after ``load_weights`` SGLang deletes the
draft's own embedding (and head) and shares the target's (0.5.23 ``models/llama.py`` ``set_embed``,
``models/kimi_k25_eagle3.py`` ``set_embed_and_head``, called from ``eagle_worker_v2.py``
``init_lm_head``); a reference kept by the shim would keep GBs allocated on every GPU."""

from __future__ import annotations

import gc
import weakref

import pytest

from eagle3scope_shim import hooks, loadreport


class Param:
    """A parameter as the loader sees it: an object SGLang may give a ``weight_loader``."""


class Layer:
    def __init__(self) -> None:
        self.weight = Param()


class Inner:
    def __init__(self) -> None:
        self.embed_tokens, self.fc, self.norm = Layer(), Layer(), Layer()


def default_weight_loader(param, loaded_weight) -> None:
    """What ``load_weights`` calls for a parameter without its own loader (the watch looks it up
    in the draft class's module, as in SGLang)."""
    param.data = loaded_weight


class LlamaEagle3Draft:
    """SGLang 0.5.23's EAGLE-3 Llama draft as the load and the swap after it treat it."""

    def __init__(self) -> None:
        self.model, self.lm_head = Inner(), Layer()

    def named_parameters(self):
        for name, layer in (("model.embed_tokens", self.model.embed_tokens), ("model.fc", self.model.fc),
                            ("model.norm", self.model.norm), ("lm_head", self.lm_head)):
            if hasattr(layer, "weight"):
                yield f"{name}.weight", layer.weight

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        for name, loaded in weights:
            param = params.get(name)
            if param is not None:
                getattr(param, "weight_loader", default_weight_loader)(param, loaded)

    def set_embed(self, embed):  # models/llama.py, less the device's empty_cache/synchronize
        del self.model.embed_tokens.weight
        self.model.embed_tokens.weight = embed

    def set_embed_and_head(self, embed, head):  # models/llama.py / kimi_k25_eagle3.py
        del self.model.embed_tokens.weight
        del self.lm_head.weight
        self.model.embed_tokens.weight = embed
        self.lm_head.weight = head


CHECKPOINT = ["model.embed_tokens.weight", "model.fc.weight", "lm_head.weight", "t2d"]


@pytest.mark.parametrize("swap", ["set_embed", "set_embed_and_head"])
def test_draft_weights_sglang_replaces_after_load_are_collectable(shim, monkeypatch, swap):
    draft = LlamaEagle3Draft()
    hooks.FACTORIES["draft_load"](shim, "llama_eagle3.load")(LlamaEagle3Draft.load_weights, draft,
                                                       iter((name, 0) for name in CHECKPOINT))
    (watch,) = shim.load.draft_loads.values()
    report = loadreport.weights_facts(watch, draft)
    assert report == {"consumed": CHECKPOINT[:3], "skipped": [], "unwritten": ["model.norm.weight"], "ignored": ["t2d"]}
    old = [weakref.ref(draft.model.embed_tokens.weight), weakref.ref(draft.lm_head.weight)]
    target_embed, target_head = Param(), Param()
    if swap == "set_embed":
        draft.set_embed(target_embed)
        old = old[:1]
    else:
        draft.set_embed_and_head(target_embed, target_head)
    gc.collect()
    assert [ref() for ref in old] == [None] * len(old)  # freed: nothing the shim saw at load holds them
    assert loadreport.weights_facts(watch, draft) == report and shim.seams.disabled == set()
