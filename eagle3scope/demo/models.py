"""Demo models that really draft: a tiny Llama target and an EAGLE-3 draft trained on it, cached.

The recipe is split by job: its parameters (:mod:`~eagle3scope.demo.recipe`), the draft network
(:mod:`~eagle3scope.demo.llama_draft`), the training of both models (:mod:`~eagle3scope.demo.training`),
the acceptance replay whose figures go into the stamp (:mod:`~eagle3scope.demo.replay`) and the
files SGLang and vLLM load (:mod:`~eagle3scope.demo.model_files`). This module says where a build
lives, whether it is there, and runs it.

The draft trains short of convergence on purpose: on a language this small a fully trained draft
matches the target at every step (4 of 4), while a real draft stands where this one stops, right
on most first drafts and less often on later ones.

Everything is generated from fixed seeds and cached under
``$EAGLE3SCOPE_CACHE/models/<version>/`` (default ``~/.cache/eagle3scope``); the version is
the recipe's key (``cache.recipe_key``: this file's code less its docstrings and cache locators,
the recipe's modules, the ``tiny.py`` writers they use and ``language.py``), so a second call is
instant and a change that can alter the weights rebuilds. torch and transformers are imported
inside the functions that need them: ``import eagle3scope.demo`` stays light. Run
``python -m eagle3scope.demo.models --cache DIR`` with the engine venv's python to build from a shell.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3scope.demo import cache, language, llama_draft, model_files, recipe, replay, tiny, training
from eagle3scope.demo.cache import Progress
from eagle3scope.demo.language import prompts as demo_prompts  # noqa: F401  (the demo's prompts)
from eagle3scope.demo.recipe import AUX_LAYER_IDS, SEED, TARGET
from eagle3scope.demo.server import cache_dir as cache_root

#: The modules whose code decides the weights and the stamp's figures, beside this one's recipe part.
RECIPE_MODULES = (recipe, llama_draft, training, replay, model_files, language)


@dataclass(frozen=True)
class ModelPaths:
    """Where the built demo models live; every draft directory serves the same weights."""

    root: Path
    target: Path
    #: ``layers.0.*`` weight names (what speculators writes), SGLang/HF draft config.
    draft: Path
    #: ``midlayer.*`` weight names (what SpecForge and the EAGLE reference write).
    draft_midlayer: Path
    #: ``layers.0.*`` weights with a speculators-format ``config.json`` (vLLM reads it;
    #: SGLang 0.5.23 does not).
    draft_speculators: Path
    aux_layer_ids: tuple[int, ...]
    num_target_layers: int

    def stats(self) -> dict:
        """Build figures recorded in the stamp (times, training accuracy)."""
        return cache.stats(self.root)


#: Top-level names that only find, load or report the cache: they are not part of the recipe.
CACHE_LOCATORS = frozenset({"ModelPaths", "version", "cached", "ensure_demo_models", "build_demo_models",
                            "_paths", "main", "CACHE_LOCATORS", "RECIPE_MODULES"})


def version() -> str:
    """The recipe's key: this file's build code, the recipe's modules and the ``tiny.py`` writers."""
    return cache.recipe_key(sys.modules[__name__], apart=CACHE_LOCATORS,
                            uses=(*RECIPE_MODULES, tiny.vocab_maps, tiny.draft_config, tiny.write_draft))


def cached(cache_dir: Path | str | None = None) -> ModelPaths | None:
    """The built models for this version, or None when they still have to be built."""
    paths = _paths(Path(cache_dir or cache_root()) / "models" / version())
    return paths if cache.stamped(paths.root) else None


def ensure_demo_models(
    cache_dir: Path | str | None = None, progress: Progress | None = None, python: Path | str | None = None
) -> ModelPaths:
    """From any venv: the cached models, else a build in the engine venv (which has torch).

    Progress lines of the build are passed to ``progress`` as they come.
    """
    return cache.build_in_engine(sys.modules[__name__], cache_dir, progress, python)


def build_demo_models(cache_dir: Path | str | None = None, progress: Progress | None = None) -> ModelPaths:
    """Build (or find cached) target + healthy drafts; returns their paths."""
    say = progress or (lambda msg: None)
    paths = _paths(Path(cache_dir or cache_root()) / "models" / version())
    cache.build_once(paths.root, lambda tmp: _build(_paths(tmp), paths.target, say), version())
    say(f"demo models ready at {paths.root}")
    return paths


def _paths(root: Path) -> ModelPaths:
    return ModelPaths(
        root=root,
        target=root / "target",
        draft=root / "draft",
        draft_midlayer=root / "draft-midlayer",
        draft_speculators=root / "draft-speculators",
        aux_layer_ids=tuple(AUX_LAYER_IDS),
        num_target_layers=TARGET["num_hidden_layers"],
    )


def _build(paths: ModelPaths, final_target: Path, say: Progress) -> dict:
    import resource

    import torch

    torch.manual_seed(SEED)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    stats: dict = {}
    t0 = time.monotonic()
    say("training the target on the demo language ...")
    target = training.train_target(say, stats)
    stats["target_train_s"] = round(time.monotonic() - t0, 1)
    model_files.write_target(target, paths.target)
    t1 = time.monotonic()
    say("training the EAGLE-3 draft on the target's aux states and outputs ...")
    draft, draft_ids = training.train_draft(target, say, stats)
    stats["draft_train_s"] = round(time.monotonic() - t1, 1)
    stats.update(replay.replay_stats(target, draft, draft_ids, say))
    model_files.write_drafts(draft, draft_ids, paths, final_target)
    stats["build_s"] = round(time.monotonic() - t0, 1)
    stats["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="cache root (default $EAGLE3SCOPE_CACHE)")
    args = parser.parse_args(argv)
    paths = build_demo_models(args.cache, progress=lambda msg: print(msg, flush=True))
    print(json.dumps({k: str(v) for k, v in paths.__dict__.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
