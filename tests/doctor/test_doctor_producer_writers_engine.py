"""The doctor's prediction on each producer's written layout against what the real SGLang 0.5.23 CPU engine
does when it serves it: the demo's trained draft re-expressed as Model-Optimizer's export (its key names,
config and injected yarn rope scaling), AngelSlim's save (its class name, its top-level aux ids) and
SpecForge's export (no ids), served as written and as ``fix`` repairs them, one server at a time.

The accept length is SGLang's own: completion tokens over ``spec_verify_ct`` of a fixed greedy batch. The demo
draft is trained on SGLang's default layers, so AngelSlim's ids reaching ``eagle_config`` cannot show in its
acceptance here; test_doctor_producer_writers.py checks them in the fixed copy's config."""

from __future__ import annotations

import pytest

from benchmarks.support import draft_checkpoints as dc
from eagle3scope.demo.server import ServerError, SGLangServer
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.repair import fix_checkpoint

pytestmark = pytest.mark.engine

PROMPTS, NEW_TOKENS, PROMPT_SEED = 8, 48, 7
#: Served greedily in one batch, byte-identical weights accept identically; this bounds what the order of
#: float reductions can change, and stays below the injected rope's loss.
NOISE = 0.02
PRODUCERS = {"modelopt": "modelopt-default", "angelslim": "angelslim-custom-layers", "specforge": "specforge-default"}


def _findings(report: dict) -> dict[str, set[str]]:
    return {s: {f["id"] for f in report["findings"] if f["severity"] == s} for s in ("error", "warning")}


@pytest.fixture(scope="module")
def drafts(demo_models, tmp_path_factory) -> dict:
    """Per producer: the trained draft in its layout, the doctor's report on it, and fix's copy where the
    doctor names one."""
    root = tmp_path_factory.mktemp("producer-drafts")
    out = {}
    for producer, written in PRODUCERS.items():
        draft = dc.in_written_layout(demo_models.draft, dc.PRODUCER_WRITTEN / written, root / producer)
        report = diagnose(draft, sglang_version="0.5.23", target_dir=demo_models.target).to_dict()
        fixed = None
        if report["verdict"] == "broken":
            fixed = fix_checkpoint(draft, root / f"{producer}-fixed", sglang_version="0.5.23",
                                   target_dir=demo_models.target).out
        out[producer] = {"draft": draft, "report": report, "fixed": fixed}
    return out


@pytest.fixture(scope="module")
def served(demo_models, engine_python, tmp_path_factory):
    """draft dir -> SGLang's accept length on the fixed greedy batch, or the ServerError that refused it;
    each draft served once, one server at a time."""
    from eagle3scope.demo.models import demo_prompts

    logs = tmp_path_factory.mktemp("producer-servers")
    prompts = demo_prompts(PROMPTS, seed=PROMPT_SEED)
    done: dict = {}

    def serve(draft):
        if draft not in done:
            server = SGLangServer(demo_models.target, draft, python=engine_python, log_path=logs / f"{draft.name}.log")
            try:
                with server:
                    answers = server.generate(prompts, max_new_tokens=NEW_TOKENS)
            except ServerError as refused:
                done[draft] = refused
            else:
                tokens = sum(a["meta_info"]["completion_tokens"] for a in answers)
                done[draft] = tokens / sum(a["meta_info"]["spec_verify_ct"] for a in answers)
        return done[draft]

    return serve


def test_doctor_predicts_each_producers_layout(drafts):
    assert {p: (d["report"]["producer"]["name"], _findings(d["report"])) for p, d in drafts.items()} == {
        "modelopt": ("modelopt", {"error": {"rope-scaling-injected"}, "warning": {"producer-flag-ignored"}}),
        "angelslim": ("angelslim", {"error": {"architecture"}, "warning": set()}),
        "specforge": ("sglang", {"error": set(), "warning": set()}),
    }
    assert drafts["specforge"]["fixed"] is None


def test_angelslim_as_written_is_refused_at_start(drafts, served):
    refused = served(drafts["angelslim"]["draft"])
    assert isinstance(refused, ServerError), f"served at accept length {refused}"
    assert "'Eagle3LlamaForCausalLM' is not a registered model" in str(refused)  # SGLang's own words


def test_repaired_and_healthy_copies_accept_as_the_trained_draft(demo_models, drafts, served):
    baseline = served(demo_models.draft)
    assert isinstance(baseline, float) and baseline > 1.5, baseline
    accepts = {p: served(d["fixed"] or d["draft"]) for p, d in drafts.items()}
    assert all(isinstance(a, float) and abs(a - baseline) <= NOISE * baseline for a in accepts.values()), \
        (baseline, accepts)


def test_modelopt_injected_rope_accepts_lower_until_fixed(demo_models, drafts, served):
    baseline, as_written = served(demo_models.draft), served(drafts["modelopt"]["draft"])
    assert isinstance(as_written, float), as_written
    assert as_written < baseline * (1 - NOISE), (as_written, baseline)
