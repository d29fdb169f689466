"""Clock-and-order figures (RELIABILITY.md): replay pacing after one bad ``t``, duplicated ``n``, an impossible jump
of ``n``, and a publisher restarted under the same ``src`` (what ``check`` and a seek make of it).

``.venv/bin/python benchmarks/backbone/bench_clock_order.py``; with ``PYTHONPATH`` at an older checkout for
the "before" figures (only APIs that checkout has are used).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the checkout: benchmarks.support

from click.testing import CliRunner  # noqa: E402

from benchmarks.support.analysis_streams import H, session  # noqa: E402
from eagle3scope.analysis import analyse  # noqa: E402
from eagle3scope.cli import main as cli  # noqa: E402
from eagle3scope.store import SessionWriter  # noqa: E402
from eagle3scope.store.replayer import Replayer  # noqa: E402
from eagle3scope.wire import Frame, encode_frame  # noqa: E402

INT64_MAX = (1 << 63) - 1


def _record(path: Path, frames) -> str:
    with SessionWriter(path) as w:
        for f in frames:
            w.add(encode_frame(f.kind, f.body, src=f.src, n=f.n, t=f.t), f)
    return str(path)


def _shift(frames, dt, **hello):
    return [Frame(f.kind, f.src, f.n, f.t + dt, {**f.body, **hello} if f.kind == "hello" else f.body) for f in frames]


def pacing(tmp: Path) -> str:
    frames = _shift(session(400, bs=1), 10**13)  # a step per ms
    steps = [i for i, f in enumerate(frames) if f.kind == "step"]
    out = []
    for name, t in (("INT64_MAX", INT64_MAX), ("0", 0), ("1 h back", None)):
        bad = list(frames)
        at = steps[100]
        if t is None:
            bad[at:] = [Frame(f.kind, f.src, f.n, f.t - 3600 * 10**9, f.body) for f in bad[at:]]
        else:
            bad[at] = Frame(bad[at].kind, bad[at].src, bad[at].n, t, bad[at].body)
        now = [0.0]
        r = Replayer(_record(tmp / f"p{len(out)}.e3s", bad), clock=lambda: now[0])
        burst, unpaced = 0, 0
        while not r.finished and now[0] < 600:
            got = sum(f.kind == "step" for f in r.due())
            burst = max(burst, got)
            unpaced += got if got > 8 else 0
            now[0] += 0.005
        r.close()
        out.append(f"t={name}: {unpaced} of 300 later steps delivered unpaced (largest burst {burst}), "
                   f"replay {now[0]:.1f} s for 0.4 s of stream")
    return "; ".join(out)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print("pacing:", pacing(tmp))
        frames = session(300, bs=2)
        one = json.loads(CliRunner().invoke(cli, ["check", _record(tmp / "a.e3s", frames), "--json"]).stdout)["summary"]
        two = json.loads(CliRunner().invoke(cli, ["check", _record(tmp / "b.e3s", [f for f in frames for _ in (0, 1)]),
                                                  "--json"]).stdout)["summary"]
        print(f"duplicated n: steps {one['steps']} -> {two['steps']} with every frame twice, "
              f"duplicates reported: {two.get('duplicate_frames', 'not reported')}")
        jumped = frames[:50] + [Frame(f.kind, f.src, f.n + (1 << 62), f.t, f.body) for f in frames[50:]]
        loss = analyse(jumped).publishers["r0"].loss
        print(f"n jump of 2^62: {loss.lost_in_transit:,} frames reported lost, resets {getattr(loss, 'resets', '-')}")
        broken = dict(accept_p=0.0, algorithm="EAGLE", step_kw={"feature_width": H, "fc": False,
                                                                "capture": {"on": False, "layers": None}})
        restarted = session(300, bs=2, accept_p=0.8) + _shift(session(300, bs=2, **broken), 60 * 10**9, started=2)
        path = _record(tmp / "r.e3s", restarted)
        result = json.loads(CliRunner().invoke(cli, ["check", path, "--json"]).stdout)
        v = next(v for v in result["violations"] if v["id"] == "aux-capture-off")
        state = analyse(restarted)
        runs = [state.ended_runs[0], state.publishers["r0"]] if hasattr(state, "ended_runs") else [state.publishers["r0"]]
        means = ", ".join(f"{p.acceptance.mean_accept_length:.2f}" for p in runs)
        r = Replayer(path)
        idx = r.seek_step(v["first_seq"] or 100)
        r.close()
        half = len(restarted) // 2
        print(f"restart under the same src: runs {len(runs)}, mean acceptance per run {means}; aux-capture-off "
              f"on run {v.get('run', '-')}; seek to its step by number lands at record {idx} "
              f"({'run 1' if idx < half else 'run 2'}; run 2 starts at record {half})")


if __name__ == "__main__":
    main()
