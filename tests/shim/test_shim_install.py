"""Programmatic ``install()``/``uninstall()`` inside the real SGLang 0.5.23 package: idempotent,
reversible, lazy for modules not imported yet, refused for an unknown release line; and the
plugin entry point stays inert unless the user asked for the shim.
"""

from __future__ import annotations

import json

import pytest
from support.engine import run_engine_python

pytestmark = pytest.mark.engine

SCRIPT = r"""
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
os.environ.pop("EAGLE3SCOPE_ENDPOINT", None)
import eagle3scope_shim
from eagle3scope_shim import plugin, seams
from eagle3scope_shim.instrumentor import INSTRUMENTOR

out = {}
plugin.load()  # no endpoint requested: must register nothing, build no shim
out["plugin_inert"] = INSTRUMENTOR.shim is None

import sglang.srt.models.llama as llama  # imported before install: patched at once
original = llama.LlamaForCausalLM.set_eagle3_layers_to_capture
out["installed"] = eagle3scope_shim.install("tcp://127.0.0.1:5999")
first = llama.LlamaForCausalLM.set_eagle3_layers_to_capture
out["install_patched"] = first is not original and first.__wrapped__ is original
out["install_again"] = eagle3scope_shim.install("tcp://127.0.0.1:5999")
out["idempotent"] = llama.LlamaForCausalLM.set_eagle3_layers_to_capture is first
out["env"] = os.environ.get("EAGLE3SCOPE_ENDPOINT")
import sglang.srt.models.llama_eagle3 as le3  # imported after install: patched on import
out["lazy_patched"] = hasattr(le3.LlamaModel.forward, "__wrapped__")
out["status"] = INSTRUMENTOR.shim.seams.status.get("llama_eagle3.forward")
eagle3scope_shim.uninstall()
out["restored"] = llama.LlamaForCausalLM.set_eagle3_layers_to_capture is original
out["restored_lazy"] = not hasattr(le3.LlamaModel.forward, "__wrapped__")
out["env_after"] = os.environ.get("EAGLE3SCOPE_ENDPOINT")
eagle3scope_shim.uninstall()
seams.sglang_version = lambda: "1.0.0"
out["refused"] = eagle3scope_shim.install("tcp://127.0.0.1:5999") is False
out["refused_unpatched"] = llama.LlamaForCausalLM.set_eagle3_layers_to_capture is original
print("RESULT " + json.dumps(out))
"""


def test_install_uninstall_idempotent_lazy_and_version_guarded(engine_python):
    done = run_engine_python(engine_python, "-c", SCRIPT, env={"SGLANG_USE_CPU_ENGINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result == {
        "plugin_inert": True, "installed": True, "install_patched": True, "install_again": True,
        "idempotent": True, "env": "tcp://127.0.0.1:5999", "lazy_patched": True, "status": "attached",
        "restored": True, "restored_lazy": True, "env_after": None, "refused": True, "refused_unpatched": True,
    }
    assert "not a release line this shim knows" in done.stdout


DETACH = r"""
import functools, json, os, sys
os.environ.pop("EAGLE3SCOPE_ENDPOINT", None)  # SGLang loads plugins on import: the shim's stays inert
from sglang.srt.plugins.hook_registry import HookRegistry
from eagle3scope_shim import patching
from eagle3scope_shim.shim_state import Shim
shim = Shim()
import sglang.srt.models.llama_eagle3 as le3
import sglang.srt.models.llama as llama
# in a dict: SGLang rebinds every module global that holds a function it wraps (_propagate_patch)
kept = {"forward": le3.LlamaModel.forward}
patching.register_with_hook_registry(shim)  # as the plugin does, SGLang then applies its hooks
HookRegistry.apply_hooks()
out = {"wrapped": le3.LlamaModel.forward is not kept["forward"] and le3.LlamaModel.forward.__wrapped__ is kept["forward"]}
out["detached"] = shim.seams.detach("llama_eagle3.forward")
out["original_back"] = le3.LlamaModel.forward is kept["forward"]
out["twice"] = shim.seams.detach("llama_eagle3.forward")
wrapper = llama.LlamaForCausalLM.set_eagle3_layers_to_capture
again = functools.wraps(wrapper)(lambda *a, **k: wrapper(*a, **k))  # another plugin wrapped it since
llama.LlamaForCausalLM.set_eagle3_layers_to_capture = again
out["rewrapped_left_alone"] = (shim.seams.detach("aux.llama_set_layers") is False
                               and llama.LlamaForCausalLM.set_eagle3_layers_to_capture is again)
out["status_kept"] = shim.seams.status["llama_eagle3.forward"]
print("RESULT " + json.dumps(out))
"""


def test_a_seam_registered_with_sglangs_hook_registry_detaches_only_its_own_wrapper(engine_python):
    """SeamTable.detach against SGLang 0.5.23's own HookRegistry (plugins/hook_registry.py): the AROUND
    wrapper that holds the shim's hook is replaced by the function it wraps, once; a wrapper that
    another plugin put around it since is left as it is."""
    done = run_engine_python(engine_python, "-c", DETACH, env={"SGLANG_USE_CPU_ENGINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result == {"wrapped": True, "detached": True, "original_back": True, "twice": False,
                      "rewrapped_left_alone": True, "status_kept": "attached"}
