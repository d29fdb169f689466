"""Checkpoint doctor: what a given SGLang or vLLM release will silently do with a draft, before serving it."""

import importlib.util


def missing_extra() -> str | None:
    """A message when the ``doctor`` extra (safetensors, numpy) is not installed, else None."""
    if all(importlib.util.find_spec(m) for m in ("safetensors", "numpy")):
        return None
    return "the checkpoint doctor needs safetensors and numpy: pip install 'eagle3scope[doctor]'"
