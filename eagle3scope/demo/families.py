"""Demo model families: which scenarios each offers and how its models are built (cached).

``llama`` is the Llama demo (``models.py``); ``deepseek`` the seeds' family (``deepseek.py``: a
DeepseekV3 target with MLA + MoE, also served as Kimi-K2.5, and ``deepseek_mla.py``: its MLA draft,
cached on its own). Pure Python, like the modules it names.
"""

from __future__ import annotations

from pathlib import Path

from eagle3scope.demo.scenarios import SCENARIOS, Scenario

FAMILIES = ("llama", "deepseek")
#: Workload temperatures where a family cannot take the demo's default mix. DeepseekV3 requests
#: reach SGLang 0.5.23's top-k renormalisation in the sampling verify (``eagle_utils.eagle_sample``),
#: whose kernel is None on CPU (no stand-in yet): the scheduler dies on the first sampled round.
TEMPERATURES = {"deepseek": (0.0,)}


def scenarios_of(family: str) -> dict[str, Scenario]:
    """The family's scenarios by name."""
    if family == "deepseek":
        from eagle3scope.demo.deepseek import SCENARIOS as DEEPSEEK
        from eagle3scope.demo.deepseek_mla import SCENARIOS as MLA

        return {**DEEPSEEK, **MLA}
    if family != "llama":
        raise KeyError(f"unknown demo family {family!r}; known: {', '.join(FAMILIES)}")
    return SCENARIOS


def ensure_models(family: str, cache_dir: Path | str | None = None, progress=None, python: Path | str | None = None):
    """The family's built models (a ``ModelPaths``), building them once in the engine venv."""
    if family == "deepseek":
        from eagle3scope.demo.deepseek_mla import ensure_models as ensure  # the target's models, then the MLA draft
    else:
        from eagle3scope.demo.models import ensure_demo_models as ensure
    return ensure(cache_dir, progress=progress, python=python)
