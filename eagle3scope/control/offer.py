"""Which presets a live server will take now, from its ``list`` reply: one answer for ``aux list``,
``aux cycle`` and the TUI's aux screen.

A preset's own ``available`` says whether its ids fit the target (:func:`eagle3scope.wire.aux_layers.presets`);
the server may still refuse every change: its capture is off or its loader is not one the shim can
change (``why_not``), or it replays CUDA graphs that a change must recapture. Such presets are
offered as unavailable with that reason, instead of as "ok" and then refused.
"""

from __future__ import annotations

from dataclasses import replace

from eagle3scope.wire.aux_layers import Preset

GRAPHS_NEED_RECAPTURE = ("this server replays CUDA graphs captured with the current aux set: a change must recapture "
                         "them (aux set/cycle --recapture, TUI key g; serving pauses for each capture)")


def change_refusal(info: dict, *, recapture: bool = False) -> str:
    """Why the server refuses any change now ("" when a change may go ahead), ``recapture`` or not."""
    if not info.get("changeable"):
        return str(info.get("why_not") or "the server refuses live changes")
    if (info.get("graphs") or {}).get("captured") and not recapture:
        return GRAPHS_NEED_RECAPTURE
    return ""


def offered(presets: list[Preset], info: dict, *, recapture: bool = False) -> list[Preset]:
    """``presets`` with every available one marked unavailable, with the reason, when the server refuses changes."""
    why = change_refusal(info, recapture=recapture)
    return [replace(p, available=False, reason=why) if why and p.available else p for p in presets]
