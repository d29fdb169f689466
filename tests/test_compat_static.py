"""Every seam the shim's adapters name exists where they expect it, in every release of the compat
table, and each release gets the adapters its architecture calls for. Reads the cached wheels
(``scripts/fetch-sglang-wheels.sh``) with ``zipfile`` + ``ast``: nothing is installed, imported or
downloaded here.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from conftest import engine_missing
from eagle3scope.demo.server import cache_dir
from eagle3scope_shim import seams


def _wheel(version: str) -> Path | None:
    found = sorted((cache_dir() / "wheels").glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def _lookup(version: str):
    wheel = _wheel(version)
    if wheel is None:
        engine_missing(f"sglang {version} wheel not cached (make wheels: scripts/fetch-sglang-wheels.sh)")
    archive = zipfile.ZipFile(wheel)
    names, cache = set(archive.namelist()), {}

    def lookup(module: str, qualname: str) -> bool:
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            if path in names:
                if path not in cache:
                    cache[path] = seams.definitions(archive.read(path))
                return qualname in cache[path]
        return False

    return lookup


def _release(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in version.replace(".post", ".").split("."))


def _expected(version: str) -> dict[str, set[str]]:
    """What sglang-compat.md says each release has (tables A and B)."""
    v = _release(version)
    has_eagle3 = version != "0.4.4"  # EAGLE-3 first appears in 0.4.4.post2
    return {
        "process": {"scheduler"},
        # v1 only up to 0.5.3; v1 + v2 (EAGLEWorkerV2 from 0.5.4) until v1 is deleted in 0.5.13
        "worker": {"v1"} if v < (0, 5, 4) else {"v1", "v2"} if v < (0, 5, 13) else {"v2"},
        "draft_model": set() if not has_eagle3 else {"llama_eagle3"} | ({"kimi_k25_eagle3"} if v >= (0, 5, 12) else set()),
        # set_eagle3_layers_to_capture with EAGLE-3 (DeepseekV2's from 0.5.5); the shared call site from 0.5.16
        "aux": set() if not has_eagle3 else {"llama_set_eagle3"} | ({"deepseek_set_eagle3"} if v >= (0, 5, 5) else set())
        | ({"aux_call_site"} if v >= (0, 5, 16) else set()),
    }


@pytest.mark.parametrize("version", seams.COMPAT_RELEASES)
def test_adapter_choice_matches_the_release(version):
    chosen = seams.choose(_lookup(version))
    got: dict[str, set[str]] = {family: set() for family in _expected(version)}
    for adapter, _ in chosen:
        got[adapter.family].add(adapter.name)
    assert got == _expected(version)


@pytest.mark.parametrize("version", seams.COMPAT_RELEASES)
def test_every_seam_and_field_the_adapters_use_exists(version):
    lookup = _lookup(version)
    chosen = seams.choose(lookup)
    missing = [seam.name for _, resolved in chosen for seam, target in resolved if target is None]
    assert missing == []
    for adapter, _ in chosen:
        for modules, cls, fields in seams.FIELDS.get(adapter.name, ()):
            assert any(lookup(m, f"{cls}.{f}") for m in modules for f in fields), (adapter.name, cls, fields)


def test_v1_step_seam_follows_the_rename():
    """forward_batch_speculative_generation became forward_batch_generation in 0.5.3."""
    for version, name in (("0.5.1", "forward_batch_speculative_generation"), ("0.5.3", "forward_batch_generation")):
        (adapter, resolved), = [c for c in seams.choose(_lookup(version)) if c[0].name == "v1"]
        step = dict((s.name, t) for s, t in resolved)["v1.step"]
        assert step == ("sglang.srt.speculative.eagle_worker", f"EAGLEWorker.{name}")
