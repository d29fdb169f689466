"""What the doctor reports about one draft checkpoint: findings, and the facts ``fix`` needs.

The types every check reads and writes (``config_checks``, ``weight_checks``, ``aux_check``),
apart from the checks themselves and from ``diagnose``, which runs them, so no check module and
the orchestration import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3scope.doctor.checkpoint import Checkpoint
from eagle3scope.doctor.loader_layouts import LoaderLayout, Mapping
from eagle3scope.doctor.producers import Producer
from eagle3scope.wire.aux_layers import Engine
from eagle3scope.wire.severity import SEVERITY_ORDER

SGLANG_DRAFT_CLASS = "LlamaForCausalLMEagle3"
MLA_DRAFT_CLASS = "Eagle3DeepseekV2ForCausalLM"
#: Order of importance of error findings, for the headline and the listing.
PRIORITY = ("no-eagle3", "architecture-unsupported", "architecture", "eagle-config-ignored", "fc-width-unsupported",
            "aux-capture-unsupported", "aux-final-state-unsupported", "target-hidden-null", "lm-head-tied",
            "embed-random", "weights-dropped", "weights-crash", "aux-capture-off",
            "aux-layers-mismatch", "rope-scaling-injected", "aux-layers-out-of-range", "aux-layers-empty", "d2t-absolute", "d2t-mismatch",
            "lm-head-mismatch", "fc-shape", "hidden-width-mismatch", "weights-unwritten",
            "multi-layer-draft", "producer-flag-ignored", "layer-type-unsupported", "config-speculators-format")
#: Findings that say what the release does not do at all: the capture of aux layers was not checked.
UNCHECKED = ("aux-family-unknown", "aux-layers-unchecked")


@dataclass
class Finding:
    id: str
    severity: str  # "error" | "warning" | "info"
    title: str
    evidence: dict
    fix: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "title": self.title, "evidence": self.evidence, "fix": self.fix}


@dataclass
class Diagnosis:
    checkpoint: Checkpoint
    sglang_version: str
    layout: LoaderLayout
    given: str = ""  # the draft directory as the user wrote it (output shows it so)
    producer: Producer | None = None
    findings: list[Finding] = field(default_factory=list)
    config: dict | None = None  # the config SGLang will read once fix's config edits are applied
    config_edits: list[str] = field(default_factory=list)  # what fix changes in config.json, and why
    mappings: dict[str, Mapping] = field(default_factory=dict)  # per checkpoint name, after fix's renames
    renames: dict[str, str] = field(default_factory=dict)  # checkpoint name -> name this release loads
    unmappable: list[str] = field(default_factory=list)
    d2t_offsets: object = None  # numpy array to write instead of an absolute d2t (when unambiguous)
    refusals: list[str] = field(default_factory=list)  # why fix would have to guess
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # producer flags SGLang ignores, said on every fix
    target: dict | None = None
    target_class: str | None = None
    trained_capture: list[int] | None = None  # input-of-layer indices the draft was trained on
    trained_known: bool = False
    aux_ids: list[int] | None = None  # ids that make this release capture trained_capture
    aux_ids_reason: str = ""  # why aux_ids is None when a capture is known
    engine: str = "sglang"  # the engine predicted for ("sglang" | "vllm"); sglang_version names its release
    loader_text: str = ""  # the engine's loader in words, where ``layout`` (SGLang's) does not apply

    @property
    def engine_label(self) -> str:
        return Engine(self.engine).label

    def add(self, id: str, severity: str, title: str, evidence: dict, fix: str = "") -> None:
        self.findings.append(Finding(id, severity, title, evidence, fix))

    def refuse(self, why: str) -> None:
        if why not in self.refusals:
            self.refusals.append(why)

    @property
    def exit_code(self) -> int:
        severities = {f.severity for f in self.findings}
        return 2 if "error" in severities else 1 if "warning" in severities else 0

    def ordered(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 3),
                                                    PRIORITY.index(f.id) if f.id in PRIORITY else len(PRIORITY)))

    def to_dict(self) -> dict:
        ordered = self.ordered()
        return {
            "draft": self.given or str(self.checkpoint.path),
            "sglang_version": self.sglang_version if self.engine == Engine.SGLANG else None,
            "engine": self.engine,
            "engine_version": self.sglang_version,
            "loader": self.loader_text or (self.layout.label + (f" ({self.layout.note})" if self.layout.note else "")),
            "tensors": len(self.checkpoint.tensors),
            "verdict": {0: "clean", 1: "warnings", 2: "broken"}[self.exit_code],
            "headline": headline(self),
            "producer": self.producer.to_dict() if self.producer else None,
            "target_class": self.target_class,
            "assumptions": self.assumptions,
            "notes": self.notes,
            "findings": [f.to_dict() for f in ordered],
            "fixable": {"renames": self.renames, "d2t_to_offsets": self.d2t_offsets is not None,
                        "config_edits": self.config_edits},
            "refusals": self.refusals,
        }


def headline(dx: Diagnosis) -> str:
    ordered = dx.ordered()
    if ordered and ordered[0].severity != "info":
        return ordered[0].title
    if any(f.id in UNCHECKED for f in ordered):
        return (f"clean: {dx.engine_label} {dx.sglang_version} will load this draft; which target layers feed it was "
                "not checked")
    return f"clean: {dx.engine_label} {dx.sglang_version} will load and feed this draft as it was trained"
