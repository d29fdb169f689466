"""The report's three plots (rolling acceptance over the run, acceptance per draft position, the
accept-length histogram), drawn with matplotlib when the ``[report]`` extra installed it.

matplotlib is imported only here and only when a report is written, with the Agg backend (no
display); without it the report is written with :data:`NO_PLOTS` in their place.
"""

from __future__ import annotations

import io

from eagle3scope.analysis.views import acceptance_view
from eagle3scope.report.build import Analysed

#: what the report says in place of its plots on an install without matplotlib (``[viewer]`` only)
NO_PLOTS = "Plots left out: matplotlib is not installed (pip install 'eagle3scope[report]')."


def plots_available() -> bool:
    """Whether matplotlib can be imported: the ``[report]`` extra; the report is written without plots else."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw(a: Analysed) -> dict[str, object]:
    """name -> matplotlib Figure (Agg backend: no display needed); {} without matplotlib."""
    if not plots_available():
        return {}
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    summary, acc = a.result["summary"], a.state.acceptance
    figures = {}
    history = list(acc.history)
    if history:
        fig = Figure(figsize=(7, 2.8), layout="constrained")
        ax = fig.add_subplot()
        t0 = history[0][1]
        seconds = [(t - t0) / 1e9 for _, t, _ in history]
        ax.plot(seconds, [m for _, _, m in history], lw=1.2, color="#1f77b4")
        for mark in acceptance_view(a.state).marks:  # where a later aux-layer configuration took over
            ax.axvline(seconds[mark], color="#888888", lw=0.8, ls="--")
        ax.set_xlabel("seconds into the recording")
        ax.set_ylabel("acceptance length")
        ax.set_ylim(bottom=min(1.0, min(m for _, _, m in history)) - 0.05, top=acc.k + 1.05 if acc.k else None)
        ax.set_title(f"Rolling mean acceptance length (last {acc.window_size} request-steps)", fontsize=10)
        ax.grid(alpha=0.3)
        figures["acceptance-over-time"] = fig
    rates = summary["per_position"]
    if rates:
        fig = Figure(figsize=(4.5, 2.8), layout="constrained")
        ax = fig.add_subplot()
        positions = list(range(1, len(rates) + 1))
        ax.bar(positions, [r or 0.0 for r in rates], color="#2ca02c")
        for x, r in zip(positions, rates):
            ax.annotate("-" if r is None else f"{r:.2f}", (x, r or 0.0), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(positions)
        ax.set_ylim(0, 1.1)
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate")
        ax.set_title("Acceptance per draft position", fontsize=10)
        figures["per-position"] = fig
    hist = summary["histogram"]
    if hist:
        fig = Figure(figsize=(4.5, 2.8), layout="constrained")
        ax = fig.add_subplot()
        lengths = [j + 1 for j in range(len(hist))]
        ax.bar(lengths, hist, color="#ff7f0e")
        ax.set_xticks(lengths)
        ax.set_xlabel("tokens committed per request-step (accepted drafts + 1)")
        ax.set_ylabel("request-steps")
        ax.set_title("Accept-length histogram", fontsize=10)
        figures["accept-length-histogram"] = fig
    return figures


def svg(fig) -> str:
    """``fig`` as an ``<svg>`` element to inline in the HTML report."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline in HTML
