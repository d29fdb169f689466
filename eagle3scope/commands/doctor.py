"""``eagle3scope doctor DRAFT_DIR``: check a draft checkpoint against an SGLang or vLLM release before serving it.

Reads safetensors headers only (no full load, no torch). Says who wrote the checkpoint and every
convention it assumed, and in one line which target layers each engine captures for its ids.
``--engine vllm`` predicts what vLLM does with it, ``both`` checks both. Exit status: 0 clean,
1 warnings, 2 errors.
"""

from __future__ import annotations

import json
import textwrap

import click
from eagle3scope.wire.aux_layers import Engine
from eagle3scope.wire.untrusted import json_line, lines, terminal

WIDTH = 80


def _fmt(value: object, limit: int = 120) -> str:
    """One evidence value, short: lists of names summarised by module, long values cut (--json has all)."""
    from eagle3scope.doctor.weight_checks import summary_text

    if isinstance(value, list) and len(value) > 4 and all(isinstance(v, str) for v in value):
        return summary_text(value)
    text = json.dumps(value, separators=(", ", ":")) if isinstance(value, (list, dict)) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def wrap(text: str, indent: str = "", first: str | None = None) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent if first is None else first, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False) or [first or indent]


def what_to_do(report: dict) -> list[str]:
    """The next steps, most important first."""
    steps = []
    fixable = report["fixable"]
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if errors and not report["refusals"]:
        parts = (["key renames"] if fixable["renames"] else []) + (["config"] if fixable["config_edits"] else []) \
            + (["d2t"] if fixable["d2t_to_offsets"] else [])
        for_vllm = " --for-vllm" if report.get("engine") == "vllm" else ""
        steps.append(f"eagle3scope fix {report['draft']} --out NEW_DIR{for_vllm}: repairs all of it "
                     f"({', '.join(parts)}), then checks the copy")
    elif report["refusals"]:
        steps += [f"{f['fix']}" for f in errors if f["fix"] and "eagle3scope fix" not in f["fix"]][:3]
        if any(fixable.values()):
            steps.append("after that, `eagle3scope fix` can repair the rest")
    elif any(f["severity"] == "warning" for f in report["findings"]):
        steps += [f["fix"] for f in report["findings"] if f["severity"] == "warning" and f["fix"]][:2]
    return list(dict.fromkeys(steps))


def render(report: dict) -> str:
    """Verdict and what to do first, then producer, assumptions and findings, at 80 columns."""
    errors = sum(f["severity"] == "error" for f in report["findings"])
    warnings = sum(f["severity"] == "warning" for f in report["findings"])
    rows = wrap(report["headline"])
    verdict = {"clean": "CLEAN", "warnings": "WARNINGS", "broken": "BROKEN"}[report["verdict"]]
    engine = Engine(report.get("engine") or Engine.SGLANG).label
    rows += wrap(f"{verdict} for {engine} {report.get('engine_version') or report['sglang_version']}: {errors} error(s), "
                 f"{warnings} warning(s); "
                  f"{report['tensors']} tensors in {report['draft']}")
    steps = what_to_do(report)
    if steps:
        rows.append("what to do:")
        for i, step in enumerate(steps, 1):
            rows += wrap(step, "     ", f"  {i}. ")
    said = " ".join(steps)
    refusals = [why for why in report["refusals"] if why not in said]  # a step already says it
    for why in refusals[:4]:
        rows += wrap(why, "     ", "  fix would refuse: ")
    if len(refusals) > 4:
        rows.append(f"  ... {len(refusals) - 4} more (--json lists all)")
    producer = report.get("producer")
    if producer:
        rows += [""] + wrap(f"producer: {producer['label']}" + (f" ({'; '.join(producer['signs'])})"
                                                                  if producer["signs"] else ""), "  ")
    for assumption in report.get("assumptions", []):
        rows += wrap(assumption, "    ", "  assumed: ")
    for note in report.get("notes", []):
        rows += wrap(note, "    ", "  note: ")
    rows += wrap(f"loader: {engine} {report['loader']}", "  ")
    if report.get("numbering"):
        rows += wrap(report["numbering"], "    ", "  ")
    for f in report["findings"]:
        rows += [""] + wrap(f"{f['id']}: {f['title']}", "        ", f"{f['severity'].upper():7} ")
        for i, (k, v) in enumerate(f["evidence"].items()):
            rows += wrap(f"{k}={_fmt(v)}", "            ", "        evidence: " if i == 0 else "          ")
        if f["fix"]:
            rows += wrap(f["fix"], "          ", "        fix: ")
    fixable = report["fixable"]
    repairs = [f"{len(fixable['renames'])} key rename(s)"] if fixable["renames"] else []
    repairs += ["d2t absolute ids -> offsets"] if fixable["d2t_to_offsets"] else []
    repairs += fixable["config_edits"]
    if repairs:
        rows += [""] + wrap("`eagle3scope fix` would: " + "; ".join(repairs), "  ")
    return lines(rows)


@click.command(help=__doc__)
@click.argument("draft_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--target", "target_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Target model directory (its config.json): family, layer count, hidden size, vocabulary.")
@click.option("--engine", type=click.Choice(["sglang", "vllm", "both"]), default="sglang", show_default=True,
              help="Engine to predict for; both: one report each, and the numbering difference in one line.")
@click.option("--sglang-version", default=None, help="SGLang release to check against (default: installed, else 0.5.23).")
@click.option("--vllm-version", default=None, help="vLLM release to check against (default: 0.32.0, the one read).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (everything, unabridged).")
@click.pass_context
def command(ctx: click.Context, draft_dir: str, target_dir: str | None, engine: str, sglang_version: str | None,
            vllm_version: str | None, as_json: bool) -> None:
    from eagle3scope.doctor import missing_extra

    if missing_extra():
        click.echo(terminal(f"Error: {missing_extra()}"), err=True)
        ctx.exit(2)
    from eagle3scope.doctor.engines import ENGINES, numbering_line

    wanted = [Engine.SGLANG, Engine.VLLM] if engine == "both" else [Engine(engine)]
    versions = {Engine.SGLANG: sglang_version, Engine.VLLM: vllm_version}
    diagnoses = {}
    for name in wanted:
        try:
            diagnoses[name] = ENGINES[name].diagnose(draft_dir, version=versions[name], target_dir=target_dir)
        except ValueError as exc:
            raise click.BadParameter(terminal(str(exc)), param_hint=f"--{name.value}-version") from None
    first = next(iter(diagnoses.values()))
    sglang_release = diagnoses[Engine.SGLANG].sglang_version if Engine.SGLANG in diagnoses else \
        ENGINES[Engine.SGLANG].facts.releases[0]
    line = numbering_line(first.checkpoint.config, first.target_class or "LlamaForCausalLM",
                          (first.target or {}).get("num_hidden_layers"), sglang_release)
    reports = {name.value: {**dx.to_dict(), "numbering": line} for name, dx in diagnoses.items()}
    if as_json:
        report = dict(reports[wanted[0].value])
        if len(reports) > 1:
            report["engines"] = reports
        click.echo(json_line(report))
    elif len(reports) > 1:
        texts = [render({**r, "numbering": None}) for r in reports.values()]
        click.echo("\n\n".join(texts) + "\n\n" + lines(wrap(line)))
    else:
        click.echo(render(reports[wanted[0].value]))
    ctx.exit(max(dx.exit_code for dx in diagnoses.values()))
