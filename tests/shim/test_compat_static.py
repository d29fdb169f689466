"""Every seam the shim's adapters name exists where they expect it, in every release of the compat
table, and each release gets the adapters its architecture calls for. Reads the cached wheels
(``scripts/fetch-sglang-wheels.sh``) with ``zipfile`` + ``ast``: nothing is installed, imported or
downloaded here.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from support.engine import engine_missing
from eagle3scope.demo.server import cache_dir
from eagle3scope.wire.releases import parse_version
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


def _expected(version: str) -> dict[str, set[str]]:
    """What sglang-compat.md says each release has (tables A and B)."""
    v = parse_version(version)[:3]
    has_eagle3 = version != "0.4.4"  # EAGLE-3 first appears in 0.4.4.post2
    return {
        "process": {"scheduler"},
        # v1 only up to 0.5.3; v1 + v2 (EAGLEWorkerV2 from 0.5.4) until v1 is deleted in 0.5.13
        "worker": {"v1"} if v < (0, 5, 4) else {"v1", "v2"} if v < (0, 5, 13) else {"v2"},
        # EAGLE-1/2's llama_eagle and qwen2_eagle in every release, mistral_large_3_eagle from 0.5.10,
        # mistral_eagle from 0.5.11 (read in the wheels); EAGLE-3's from 0.4.4.post2
        "draft_model": {"llama_eagle", "qwen2_eagle"} | ({"mistral_large_3_eagle"} if v >= (0, 5, 10) else set())
        | ({"mistral_eagle"} if v >= (0, 5, 11) else set())
        | (set() if not has_eagle3 else {"llama_eagle3"} | ({"kimi_k25_eagle3"} if v >= (0, 5, 12) else set())),
        # set_eagle3_layers_to_capture with EAGLE-3 (DeepseekV2's from 0.5.5); the shared call site from 0.5.16
        "aux": set() if not has_eagle3 else {"llama_set_eagle3"} | ({"deepseek_set_eagle3"} if v >= (0, 5, 5) else set())
        | ({"aux_call_site"} if v >= (0, 5, 16) else set()),
        # the scheduler's v2 round settlement (sopm from 0.5.5, brp from 0.5.14; read in the 0.5.5, 0.5.6,
        # 0.5.8, 0.5.10, 0.5.12, 0.5.14 and 0.5.23 sources)
        "commit": {"commit"} if v >= (0, 5, 5) else set(),
        # SchedulerRequestReceiver in managers/scheduler_components/request_receiver.py (read in 0.5.12, 0.5.14-0.5.23)
        "broadcast": {"request_broadcast"} if v >= (0, 5, 14) else set(),
        # where a finished request's output is emitted once: the scheduler's mixin, then (0.5.23) its output
        # streamer (read in the 0.5.10 and 0.5.23 sources; the other releases are this test's to confirm)
        "finish": {"finish"},
        # CudaGraphRunner.capture up to 0.5.12, DecodeCudaGraphRunner.capture from 0.5.14 (read in the wheels)
        "graphs": {"target_graph_capture"},
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


# -- the doctor's loader model and the capture rules, against every wheel -------------------------------
# eagle3scope/doctor/loader_layouts.py (draft classes, fc width, EAGLE-3.x norms, head and embedding
# sharing) and eagle3scope/wire/aux_layers.py (which target classes capture, by which rule, wrappers
# included) are read back from each wheel's own source: a release that changes one of them fails here.

import ast  # noqa: E402
import functools  # noqa: E402
import re  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import List, Optional  # noqa: E402

from eagle3scope.doctor import loader_layouts as LL  # noqa: E402
from eagle3scope.wire import aux_layers as AUX  # noqa: E402

DOCTOR_RELEASES = sorted(set(seams.COMPAT_RELEASES) | set(LL.BOUNDARY_WHEELS), key=LL.parse_version)
#: Target classes aux_layers names (the wrappers by their own name).
NAMED_TARGETS = sorted(set(AUX._PLUS_ONE) | set(AUX._DEEPSEEK) | set(AUX.WRAPPED) | {"GptOssForCausalLM"})


class _Wheel:
    """One wheel's ``sglang/srt/models``: registered classes (``EntryClass``), class bases, and where
    ``set_eagle3_layers_to_capture`` is defined (a class defined in two modules: the registering one).
    Class heads and EntryClass are found by pattern and only files defining the method are parsed,
    so 30 wheels read in seconds."""

    def __init__(self, version: str):
        wheel = _wheel(version)
        if wheel is None:
            engine_missing(f"sglang {version} wheel not cached (make wheels: scripts/fetch-sglang-wheels.sh)")
        self.archive = zipfile.ZipFile(wheel)
        self.registered: dict[str, str] = {}  # class -> module file
        self.sources: dict[str, str] = {}
        heads: dict[str, list[tuple[str, list[str]]]] = {}
        self.methods: dict[tuple[str, str], ast.FunctionDef] = {}
        for path in self.archive.namelist():
            if not re.fullmatch(r"sglang/srt/models/[^/]+\.py", path):
                continue
            text = self.sources[path] = self.archive.read(path).decode("utf-8", "replace")
            for entry in re.findall(r"^EntryClass\b.*?(?=^\S|\Z)", text, re.M | re.S):
                for name in re.findall(r"[A-Za-z_]\w*", entry.split("=", 1)[1]):
                    self.registered.setdefault(name, path)
            for name, bases in re.findall(r"^class (\w+)(?:\(([^)]*)\))?:", text, re.M):
                heads.setdefault(name, []).append((path, [b.strip().split(".")[-1].split("[")[0]
                                                          for b in bases.split(",") if b.strip()]))
            if "def set_eagle3_layers_to_capture" in text:
                try:
                    tree = ast.parse(text)
                except SyntaxError:  # a file this Python cannot parse: not one of the classes named
                    continue
                for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
                    for f in node.body:
                        if isinstance(f, ast.FunctionDef) and f.name == "set_eagle3_layers_to_capture":
                            self.methods[(path, node.name)] = f
        self.classes = {name: next(((p, b) for p, b in found if self.registered.get(name) == p), found[0])
                        for name, found in heads.items()}

    def text(self, module: str) -> str | None:
        return self.sources.get(f"sglang/srt/models/{module}.py")

    def capture_method(self, cls: str, seen: tuple = ()) -> ast.FunctionDef | None:
        """``set_eagle3_layers_to_capture`` as the class resolves it (its own, else a base's)."""
        if cls not in self.classes:
            return None
        path, bases = self.classes[cls]
        own = self.methods.get((path, cls))
        if own is not None:
            return own
        return next((m for b in bases if b not in seen
                     for m in [self.capture_method(b, (*seen, cls))] if m is not None), None)

    def class_text(self, cls: str) -> str:
        path, _ = self.classes[cls]
        text = self.sources[path]
        start = text.index("\n", re.search(rf"^class {cls}\b", text, re.M).end())
        end = re.search(r"^\S", text[start:], re.M)
        return text[start: start + end.start()] if end else text[start:]


@functools.lru_cache(maxsize=None)
def _models(version: str) -> _Wheel:
    return _Wheel(version)


def _draft_module(wheel: _Wheel):
    text = wheel.text("llama_eagle3")
    return None if text is None else ast.parse(text)


def _self_attrs(tree, cls: str) -> set[str]:
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {t.attr for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


@pytest.mark.parametrize("version", DOCTOR_RELEASES)
def test_draft_classes_each_release_registers(version):
    """EAGLE-3 draft classes = the EntryClass of the model files whose loader reads ``d2t``; other
    runtimes' names for the Llama layout are registered by no release ('Cannot find model module')."""
    wheel = _models(version)
    drafts = {cls for cls, path in wheel.registered.items() if '"d2t"' in wheel.sources[path]}
    assert drafts == LL.registered_draft_classes(version)
    assert not set(LL.FOREIGN_DRAFT_CLASSES) & set(wheel.registered)
    assert LL.layout_for(version).has_eagle3 == ("LlamaForCausalLMEagle3" in drafts)


@pytest.mark.parametrize("version", [v for v in DOCTOR_RELEASES if LL.layout_for(v).has_eagle3])
def test_llama_eagle3_loader_facts_match_the_wheel(version):
    """llama_eagle3.py of the release: fc width, EAGLE-3.x norm modules and their config flags, legacy
    names, decoder module, the 1-layer check, the head from the target; llama.py: set_embed's rule."""
    wheel, layout = _models(version), LL.layout_for(version)
    tree, text = _draft_module(wheel), wheel.text("llama_eagle3")
    model = _self_attrs(tree, "LlamaModel")
    fc = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "fc" for t in n.targets))
    width = fc.args[0]
    fixed = width.right.value if isinstance(width, ast.BinOp) and isinstance(width.right, ast.Constant) else None
    assert fixed == layout.fc_aux_states
    assert {"fc_norm": "fc_norm" in model, "norm_before_fc": "input_norm" in model,
            "norm_output": "norm_output" in model} == {f: layout.has(f) for f in ("fc_norm", "norm_before_fc", "norm_output")}
    flags = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert {f for f in LL.NORM_FLAGS if f in flags} == {f for f, feat in LL.NORM_FLAGS.items() if layout.has(feat)}
    legacy = [ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "legacy_name_map" for t in n.targets)]
    assert (tuple(legacy[0].items()) if legacy else None) == (LL.LEGACY_RENAMES if layout.legacy_renames else None)
    assert ("midlayer" in model) == (layout.layer_module == "midlayer") and ("layers" in model) == (layout.layer_module == "layers")
    assert ("only supports 1 layer" in text) == layout.single_layer_only
    assert ("load_lm_head_from_target" in _self_attrs(tree, "LlamaForCausalLMEagle3")) == layout.has("head_from_target")
    assert ("d2t" in text and "hot_token_id = None" in text) == (not layout.d2t_required)
    # set_embed (llama.py): the target's embedding is shared unless target_hidden_size differs from hidden_size
    llama = ast.parse(wheel.text("llama"))
    set_embed = next(f for n in ast.walk(llama) if isinstance(n, ast.ClassDef) and n.name == "LlamaForCausalLM"
                     for f in n.body if isinstance(f, ast.FunctionDef) and f.name == "set_embed")
    assert "target_hidden_size" in ast.unparse(set_embed.body[0].test)


@pytest.mark.parametrize("version", DOCTOR_RELEASES)
def test_which_target_classes_capture_aux_states(version):
    """A named target class registered by the release has a capture rule exactly where the release
    gives it ``set_eagle3_layers_to_capture`` (its own or a base's); a wrapper delegates to the class
    its ``language_model`` is."""
    wheel = _models(version)
    if not LL.layout_for(version).has_eagle3:
        return
    for cls in (c for c in NAMED_TARGETS if c in wheel.registered):
        has = wheel.capture_method(cls) is not None
        assert (AUX.family_rule(cls, version) is not None) == has, (cls, version, has)
        if cls in AUX.WRAPPED and has:
            assert re.search(rf"self\.language_model = {AUX.WRAPPED[cls]}\(", wheel.class_text(cls)), cls


PP = SimpleNamespace(is_last_rank=True, is_first_rank=True)
#: Bodies that write per-layer flags or a model-level list the fake below does not model.
RULE_CASES = [None, [1, 29, 57], [2, 30, 58], [0, 4, 5], [1, 3, 60], [3, 31, 61], [-1, 3, 4], [1, 30, 61]]


def _fake(n: int) -> SimpleNamespace:
    model = SimpleNamespace(layers=[SimpleNamespace() for _ in range(n)])
    model.set_eagle3_layers_to_capture = lambda ids=None: setattr(model, "layers_to_capture", list(ids))
    config = SimpleNamespace(num_hidden_layers=n)
    config.text_config = config
    return SimpleNamespace(pp_group=PP, config=config, model=model, capture_aux_hidden_states=False,
                           language_model=SimpleNamespace())


def _compiled(node: ast.FunctionDef):
    namespace = {"Optional": Optional, "List": List, "get_pp_group": lambda: PP,
                 "get_parallel": lambda: SimpleNamespace(pp_group=PP)}
    exec(compile(ast.Module([node], []), "<wheel>", "exec"), namespace)
    return namespace[node.name]


@pytest.mark.parametrize("version", [v for v in DOCTOR_RELEASES if LL.parse_version(v) >= LL.parse_version("0.4.9")])
def test_capture_rules_match_each_release_s_own_method(version):
    """Each named class's own ``set_eagle3_layers_to_capture`` (from 0.4.9, where it takes ids), run on a
    stand-in model: the layers it captures are the ones ``captured_for`` predicts with the class's rule."""
    wheel, n, checked = _models(version), 61, 0
    for cls in (c for c in NAMED_TARGETS if c in wheel.registered):
        method = wheel.capture_method(cls)
        if method is None:
            continue
        inner = wheel.capture_method(AUX.WRAPPED[cls]) if cls in AUX.WRAPPED else None
        for ids in RULE_CASES:
            fake = _fake(n)
            if inner is not None:
                fake.language_model = _fake(n)
                fake.language_model.set_eagle3_layers_to_capture = \
                    lambda layer_ids=None, lm=fake.language_model: _compiled(inner)(lm, layer_ids)
            _compiled(method)(fake, ids)
            holder = fake.language_model if inner is not None or not hasattr(fake.model, "layers_to_capture") else fake
            got = (holder.model if hasattr(holder, "model") else holder).layers_to_capture
            assert got == AUX.captured_for(ids, AUX.family_rule(cls, version), n), (cls, version, ids)
        checked += 1
    assert checked >= 3


def _forward_fc_calls(source: bytes, qualname: str) -> list[bool]:
    """For each ``self.fc(...)`` call in the method ``qualname``: whether it runs on every pass (not
    under an ``if`` of the method)."""
    cls_name, method = qualname.split(".")
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)
    calls = []

    def walk(node, conditional: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == "fc" \
                    and isinstance(child.func.value, ast.Name) and child.func.value.id == "self":
                calls.append(not conditional)
            walk(child, conditional or isinstance(child, (ast.If, ast.IfExp)))

    walk(func, False)
    return calls


@pytest.mark.parametrize("version", seams.COMPAT_RELEASES)
def test_fc_always_names_exactly_the_draft_forwards_whose_fc_runs_on_every_pass(version):
    """seams.FC_ALWAYS (EAGLE-1/2: fc over cat(embeds, hidden) whatever the width) against SGLang's
    own draft forwards of this release: its seams call ``self.fc`` unconditionally, every other
    draft forward the shim hooks (EAGLE-3: fc iff the width differs from the embedding's) under an ``if``."""
    archive = zipfile.ZipFile(_wheel(version) or engine_missing(f"sglang {version} wheel not cached"))
    names = set(archive.namelist())
    checked = 0
    for adapter, resolved in seams.choose(_lookup(version)):
        if adapter.family != "draft_model":
            continue
        for seam, target in resolved:
            if seam.hook != "draft_forward" or target is None:
                continue
            module, qualname = target
            path = module.replace(".", "/") + ".py"
            assert path in names, path
            calls = _forward_fc_calls(archive.read(path), qualname)
            assert calls, (seam.name, "no self.fc call")
            assert all(calls) if seam.name in seams.FC_ALWAYS else not any(calls), (seam.name, calls)
            checked += 1
    assert checked >= 2
