"""``eagle3scope aux list|set|cycle|write``: which layers was this draft trained on?

``list``/``set``/``cycle`` talk to a server started with ``eagle3scope launch --control`` (the
endpoint and token file it printed, or ``EAGLE3SCOPE_CONTROL`` / ``EAGLE3SCOPE_CONTROL_TOKEN_FILE``);
``cycle`` also subscribes to the event stream to measure acceptance per preset and records the
result in the draft's profile. ``write`` edits a draft's config for the next launch, offline.
"""

from __future__ import annotations


import click

from eagle3scope.commands import connect_option
from eagle3scope.wire.endpoints import EndpointError, default_endpoint
from eagle3scope.wire.untrusted import json_line, terminal


def _client(control: str | None, token_file: str | None, timeout: float):
    from eagle3scope.control.client import ControlClient, ControlError
    from eagle3scope.wire.token import TokenError

    try:
        return ControlClient.from_options(control, token_file, timeout_s=timeout)
    except (ControlError, TokenError) as exc:
        raise click.ClickException(terminal(str(exc))) from None


def _channel_options(func):
    func = click.option("--timeout", default=5.0, show_default=True, help="Seconds to wait for an answer.")(func)
    func = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)
    func = click.option("--token-file", metavar="PATH", help="The token file `eagle3scope launch --control` created.")(func)
    return click.option("--control", metavar="ENDPOINT", help="Control endpoint (tcp://127.0.0.1:PORT or a port).")(func)


def _call(fn):
    from eagle3scope.control.client import ControlError

    try:
        return fn()
    except ControlError as exc:
        raise click.ClickException(terminal(f"refused: {exc}")) from None


def _ids(value) -> str:
    return "default" if value is None else "[" + ", ".join(map(str, value)) + "]"


@click.group(name="aux")
def command() -> None:
    """List, set or cycle a live server's aux-layer config; write ids into a draft."""


@command.command(name="list")
@_channel_options
def list_cmd(control, token_file, as_json, timeout) -> None:
    """Show the ids in effect, what the target captures, and every preset."""
    from eagle3scope.control import profiles
    from eagle3scope.control.offer import offered
    from eagle3scope.wire.aux_layers import Preset

    reply = _call(lambda: _client(control, token_file, timeout).list())
    reply.pop("ok", None)
    # as a set or cycle would meet them: unavailable, with the reason, while the server refuses every change
    reply["presets"] = [p.to_dict() for p in offered([Preset.from_dict(p) for p in reply["presets"]], reply)]
    profile = profiles.lookup(reply["draft_path"]) if reply.get("draft_path") else None
    if as_json:
        click.echo(json_line({**reply, "profile": profile}, indent=1))
        return
    click.echo(terminal(f"target: {reply['family']}, {reply['num_layers']} layers, id rule {reply['rule']}; "
               f"draft fc takes {reply['expected']} aux states"))
    click.echo(terminal(f"draft configured: {_ids(reply['configured'])}   in effect: {_ids(reply['current'])}   "
               f"captured: {reply['captured']} ({'on' if reply['capture_on'] else 'OFF'})"))
    if (reply.get("tp_size") or 1) > 1:
        click.echo(terminal(f"tensor parallel: {reply['tp_size']} ranks; a set is applied by all of them in the same iteration"))
    if not reply["changeable"]:
        click.echo(terminal(f"live changes refused: {reply['why_not']}"))
    elif (reply.get("graphs") or {}).get("captured"):
        last = reply["graphs"].get("last_pause_ms")
        click.echo(terminal("CUDA graphs captured: changes need --recapture (serving pauses while the target's graphs are "
                   "captured again)" + ("" if last is None else f"; last recapture paused {last:.0f} ms")))
    if reply.get("pending"):
        click.echo(terminal(f"pending request: {reply['pending']} (applies at the next step)"))
    click.echo("presets:")
    for p in reply["presets"]:
        state = "unavailable: " + p["reason"] if not p["available"] else ("= " + p["same_as"]) if p.get("same_as") else "ok"
        click.echo(terminal(f"  {p['name']:<20} {_ids(p['layers']):<14} captures {str(p['captured'] or '-'):<12} {state}"))
    if profile and profile.get("best"):
        b = profile["best"]
        click.echo(terminal(f"profile: best measured {_ids(b['layers'])} ({b['preset']}), mean accept length "
                   f"{b['mean_accept_length']:.3f} over {b['steps']} steps"))


_RECAPTURE_HELP = ("Where the server replays CUDA graphs, recapture them with the new set between two steps "
                   "(serving pauses for the capture; the pause is reported). Without it such a server refuses.")


def _paused(reply: dict) -> str:
    pause = reply.get("pause_ms")
    return "" if pause is None else f"; graphs recaptured, serving paused {pause:.0f} ms"


@command.command(name="set")
@click.argument("ids")
@click.option("--wait", "wait_s", default=None, type=float,
              help="Seconds the server waits for a step to apply it (default 2; 120 with --recapture).")
@click.option("--recapture", is_flag=True, help=_RECAPTURE_HELP)
@_channel_options
def set_cmd(ids, wait_s, recapture, control, token_file, as_json, timeout) -> None:
    """Apply IDS such as 1,3,4 (the draft config's numbering) at the server's next step."""
    from eagle3scope.wire.aux_layers import LayerError, parse_ids

    try:
        layers = parse_ids(ids)
    except LayerError as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="IDS") from None
    if wait_s is None:
        wait_s = 120.0 if recapture else 2.0
    reply = _call(lambda: _client(control, token_file, timeout).set(layers, wait_s=wait_s, recapture=recapture))
    if as_json:
        click.echo(json_line(reply))
    elif reply["status"] == "applied":
        click.echo(terminal(f"applied {_ids(reply['layers'])}: the target now captures {reply['captured']}{_paused(reply)}"))
        for r in reply.get("ranks") or ():  # a TP server: every rank applied it in the same iteration
            at = "" if r.get("forward_ct") is None else f" after SGLang's forward {r['forward_ct']}"
            click.echo(terminal(f"  TP rank {r['rank']}: captures {r['captured']}{at}"))
    else:
        click.echo(terminal(f"queued {_ids(reply['layers'])} (request {reply['id']}): no step ran yet; it applies at the next "
                   "step and a config event reports it"))


@command.command(name="cycle")
@connect_option()
@click.option("--steps", type=click.IntRange(1), default=None, help="Decode steps to measure per preset (default 40).")
@click.option("--seconds", type=click.FloatRange(0.1), default=None, help="Seconds to measure per preset.")
@click.option("--settle", type=click.IntRange(0), default=2, show_default=True, help="Decode steps skipped after a switch.")
@click.option("--presets", "only", default=None, help="Comma-separated preset names to cycle (default: all available).")
@click.option("--custom", default=None, metavar="IDS", help="Also measure this id list.")
@click.option("--keep", type=click.Choice(["restore", "best"]), default="restore", show_default=True,
              help="What stays applied afterwards: the ids in effect before, or the best preset.")
@click.option("--no-save", is_flag=True, help="Do not record the results in the draft's profile.")
@click.option("--recapture", is_flag=True, help=_RECAPTURE_HELP + " Each preset then pauses serving once.")
@_channel_options
def cycle_cmd(endpoints, steps, seconds, settle, only, custom, keep, no_save, recapture, control, token_file, as_json,
              timeout) -> None:
    """Apply each preset in turn and print its mean acceptance length from the live step stream."""
    from eagle3scope.control import profiles
    from eagle3scope.control.cycle import CycleError, best, run_cycle, wait_for_stream
    from eagle3scope.control.client import ControlError
    from eagle3scope.control.offer import change_refusal
    from eagle3scope.wire.aux_layers import LayerError, ids_for, parse_ids, presets
    from eagle3scope.live.subscriber import Subscriber

    client = _client(control, token_file, timeout)
    info = _call(client.list)
    refused = change_refusal(info, recapture=recapture)
    if refused:  # every preset would be unavailable for this reason (what `aux list` shows)
        raise click.ClickException(terminal(f"refused before any change: {refused}"))
    try:
        custom_ids = parse_ids(custom) if custom else None
    except LayerError as exc:
        raise click.BadParameter(terminal(str(exc)), param_hint="--custom") from None
    chosen = presets(info["num_layers"], info["expected"], info["rule"], info["configured"], custom=custom_ids)
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        unknown = set(names) - {p.name for p in chosen}
        if unknown:
            raise click.BadParameter(terminal(f"unknown preset(s) {', '.join(sorted(unknown))}"), param_hint="--presets")
        chosen = [p for p in chosen if p.name in names]
    if steps is None and seconds is None:
        steps = 40
    say = (lambda text: click.echo(terminal(text), err=True)) if as_json else click.echo

    def progress(m):
        mean = "-" if m.mean_accept_length is None else f"{m.mean_accept_length:.3f}"
        paused = "" if m.pause_ms is None else f"  (paused {m.pause_ms:.0f} ms)"
        say(f"  {m.preset:<20} {_ids(m.layers):<14} steps {m.steps:>4}  mean accept length {mean:>6}  "
            f"{m.status if m.status != 'measured' else ''} {m.note}".rstrip() + paused)

    restore = info["current"] if info["current"] is not None else ids_for(info["captured"], info["rule"])
    results: list = []
    try:
        sub = Subscriber(list(endpoints) or [default_endpoint()])
    except EndpointError as exc:
        raise click.ClickException(terminal(f"cannot subscribe to {', '.join(endpoints) or 'the default endpoint'}: {exc}")) from None
    with sub:
        try:
            wait_for_stream(sub)
            say(f"cycling {len(chosen)} presets ({f'{steps} steps' if steps else f'{seconds}s'} each, settle {settle}):")
            results = run_cycle(client, sub, chosen, steps=steps, seconds=seconds, settle=settle, progress=progress,
                                recapture=recapture)
        except CycleError as exc:
            raise click.ClickException(terminal(str(exc))) from None
        finally:
            top = best(results)
            final = top.layers if keep == "best" and top is not None else restore
            try:
                if final is not None:
                    client.set(final, wait_s=120.0 if recapture else 5.0, recapture=recapture)
            except ControlError as exc:
                say(f"warning: could not leave {_ids(final)} applied: {exc}")
    top = best(results)
    saved = None
    if not no_save and info.get("draft_path") and top is not None:
        saved = profiles.record(info["draft_path"], [
            {"preset": m.preset, "layers": m.layers, "captured": m.captured, "steps": m.steps,
             "mean_accept_length": m.mean_accept_length} for m in results if m.status == "measured"])
    if as_json:
        click.echo(json_line({"results": [m.to_dict() for m in results], "best": None if top is None else top.to_dict(),
                               "kept": keep, "profile": saved}, indent=1))
        return
    if top is None:
        raise click.ClickException("nothing measured: the server produced no decode steps (send it requests)")
    click.echo(terminal(f"best: {top.preset} {_ids(top.layers)} (captures {top.captured}) mean accept length "
               f"{top.mean_accept_length:.3f}" + (f"; write it for restarts: eagle3scope aux write DRAFT_DIR "
                                                 f"{','.join(map(str, top.layers))} --in-place" if top.layers != info["configured"] else "")))


@command.command(name="write")
@click.argument("draft_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("ids")
@click.option("--out", type=click.Path(), default=None, help="Write a copy of the draft here (must not exist).")
@click.option("--in-place", is_flag=True, help="Edit DRAFT_DIR/config.json (a timestamped backup is kept).")
@click.option("--target", "target_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="The target model directory: check the ids against its layers and id rule.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def write_cmd(draft_dir, ids, out, in_place, target_dir, as_json) -> None:
    """Set eagle_config.eagle_aux_hidden_state_layer_ids of DRAFT_DIR to IDS for the next launch."""
    from eagle3scope.control.draftwrite import write_aux_ids
    from eagle3scope.wire.aux_layers import LayerError, parse_ids

    try:
        result = write_aux_ids(draft_dir, parse_ids(ids), out=out, in_place=in_place, target_dir=target_dir)
    except (LayerError, ValueError, OSError) as exc:
        raise click.ClickException(terminal(str(exc))) from None
    if as_json:
        click.echo(json_line({"config": str(result.path), "old": result.old, "new": result.new,
                               "captured": result.captured, "backup": None if result.backup is None else str(result.backup),
                               "notes": list(result.notes)}))
        return
    click.echo(terminal(f"{result.path}: eagle_aux_hidden_state_layer_ids {_ids(result.old)} -> {_ids(result.new)}"
               + (f" (SGLang will capture {result.captured})" if result.captured else "")))
    if result.backup is not None:
        click.echo(terminal(f"backup: {result.backup}"))
    for note in result.notes:
        click.echo(terminal(f"note: {note}"))

