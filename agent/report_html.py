"""`trainplan plan --html FILE`: the plan as one self-contained HTML page, with charts.

The charts are drawn by matplotlib (`pip install "trainplan[html]"`) as inline SVG:

- memory per GPU on the most loaded rank, stacked by part, against the GPU's capacity;
- the step time by part (compute, each exposed communication, bubble, optimizer);
- the pipeline timeline: the ops the report's gantt draws, one row per pipeline rank;
- the plan's GPU-count table (agent/tradeoffs.py) as days against dollars, with its Pareto front.

The text is the full Markdown report, rendered by markdown-it-py (the parser rich uses) with raw HTML
disabled, so nothing in it becomes markup (the LLM's prose is neutralised before that, agent/prose.py).
The page loads nothing: a Content-Security-Policy allows no script and no fetch.
"""

from __future__ import annotations

import html
import io
import re

from trainplan.tools.core.errors import InputError

from .report import MEMORY_COMPONENTS, PlanReport

KIND_COLOURS = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b", "FB": "#b279a2"}
"""pipeline op kind -> bar colour (forward, backward, weight gradient, DualPipe's paired forward-backward)"""
MEMORY_COLOURS = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#bab0ac")
STYLE = ("body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
         "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem}"
         "pre{background:#f6f6f6;padding:.5rem;overflow-x:auto}figure{margin:1rem 0}"
         "svg{max-width:100%;height:auto}")
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InputError('--html draws its charts with matplotlib: pip install "trainplan[html]" '
                         '(or pip install matplotlib)') from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "trainplan", "font.size": 9})
    import matplotlib.pyplot as plt

    return plt


def _svg(fig, plt) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def memory_chart(report: PlanReport, plt) -> str:
    """One stacked bar: each memory part in GiB, and the capacity as a line."""
    memory = report.recommended["memory_gib"]
    fig, ax = plt.subplots(figsize=(7, 1.6))
    left = 0.0
    for part, colour in zip(MEMORY_COMPONENTS, MEMORY_COLOURS):
        value = memory.get(part, 0.0)
        ax.barh([0], [value], left=left, color=colour, label=f"{part} {value:.2f}")
        left += value
    ax.axvline(memory["capacity"], color="black", linestyle="--", label=f"capacity {memory['capacity']:.2f}")
    ax.set_yticks([])
    ax.set_xlabel("GiB per GPU (most loaded rank)")
    ax.legend(ncol=3, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45), frameon=False)
    return _svg(fig, plt)


def time_chart(report: PlanReport, plt) -> str:
    """The step's parts in seconds, longest first."""
    rows = sorted((row for row in report.time_table if row.seconds > 0), key=lambda row: row.seconds)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 0.8))
    ax.barh([row.part for row in rows], [row.seconds for row in rows], color="#4c78a8")
    for i, row in enumerate(rows):
        ax.text(row.seconds, i, f" {row.seconds:.3g} s ({row.share:.1%})", va="center", fontsize=7)
    ax.set_xlabel("seconds per step (critical stage)")
    ax.margins(x=0.25)
    return _svg(fig, plt)


def timeline_chart(report: PlanReport, plt) -> str:
    """The gantt's ops, one row per pipeline rank, coloured by kind."""
    timeline = report.timeline
    fig, ax = plt.subplots(figsize=(8, 0.3 * timeline.pp + 1.0))
    for kind, colour in KIND_COLOURS.items():
        bars = [(start, end - start) for rank, k, start, end in timeline.bars if k == kind]
        ranks = [rank for rank, k, _, _ in timeline.bars if k == kind]
        for rank, bar in zip(ranks, bars):
            ax.broken_barh([bar], (rank - 0.4, 0.8), facecolor=colour, edgecolor="white", linewidth=0.4)
        if bars:
            ax.barh([0], [0], color=colour, label=kind)
    ax.set_yticks(range(timeline.pp), [f"rank {r}" for r in range(timeline.pp)])
    ax.invert_yaxis()
    ax.set_xlabel("seconds" + (f" (ops starting before {timeline.mermaid_window_s:.3g} s)"
                               if timeline.mermaid_window_s is not None else ""))
    ax.legend(ncol=4, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return _svg(fig, plt)


def tradeoff_chart(report: PlanReport, plt) -> str:
    """Each GPU count of the plan's table as days against dollars; the Pareto front joined, the plan's
    count ringed."""
    rows = sorted(report.tradeoffs, key=lambda row: row["days"])
    fig, ax = plt.subplots(figsize=(7, 3.2))
    front = [row for row in rows if row.get("pareto")]
    ax.plot([r["days"] for r in front], [r["cost_usd"] for r in front], color="#4c78a8", linewidth=1,
            label="Pareto front")
    ax.scatter([r["days"] for r in rows], [r["cost_usd"] for r in rows], color="#4c78a8", s=18, zorder=3)
    for row in rows:
        ax.annotate(f"{row['gpus']:,} GPUs, MFU {row['mfu']:.0%}", (row["days"], row["cost_usd"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
        if row.get("chosen"):
            ax.scatter([row["days"]], [row["cost_usd"]], s=120, facecolors="none", edgecolors="#e45756",
                       linewidths=1.5, zorder=4, label="the plan")
    ax.set_xlabel("days to train")
    ax.set_ylabel("dollars")
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig, plt)


def _markdown_html(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)


def to_html(report: PlanReport) -> str:
    """The self-contained page: charts first, then the full report."""
    plt = _pyplot()
    figures = []
    if report.recommended is not None:
        figures.append(("Memory per GPU", memory_chart(report, plt)))
        if report.time_table:
            figures.append(("Step time by part", time_chart(report, plt)))
        if report.timeline is not None and report.timeline.bars:
            figures.append(("Pipeline timeline", timeline_chart(report, plt)))
        if report.tradeoffs:
            figures.append(("GPU count against days and dollars", tradeoff_chart(report, plt)))
    title = html.escape(f"Training plan: {report.request.get('model')} on {report.request.get('gpus')} x "
                        f"{report.request.get('gpu')}")
    body = "".join(f'<figure><figcaption><strong>{html.escape(caption)}</strong></figcaption>{svg}</figure>'
                   for caption, svg in figures)
    text = _markdown_html(report.to_markdown())
    text = re.sub(r"<h1>.*?</h1>", "", text, count=1)      # the page's own h1 says it
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{STYLE}</style></head>\n"
            f"<body><h1>{title}</h1>\n{body}\n{text}</body></html>\n")
