"""Pipeline timelines as text: an ASCII rank x time grid and a Mermaid gantt block."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import InputError

if TYPE_CHECKING:
    from .pipeline import PipelineEvent, PipelineResult

_FILL = {"F": "F", "B": "B", "W": "W", "FB": "X"}


def render_ascii(result: PipelineResult, width: int = 100) -> str:
    """A rank x time grid: F forward, B backward, W weight gradient, X overlapped F&B, '.' idle.
    Each op starts with its capital letter, then its micro-batch id where there is room (X shows
    the forward's), then lower-case fill, so adjacent ops stay apart."""
    if not result.timeline:
        raise InputError("render_ascii needs a timeline: simulate with record_timeline=True")
    label = max(len(f"rank {result.pp - 1} |"), 8)
    cols = max(10, width - label - 1)
    scale = cols / result.makespan_s
    rows = []
    grid = [["."] * cols for _ in range(result.pp)]
    for e in result.timeline:
        c0 = min(cols - 1, int(round(e.start_s * scale)))
        c1 = min(cols, max(c0 + 1, int(round(e.end_s * scale))))
        letter, cells = _FILL[e.kind], c1 - c0
        tag = f"{letter}{e.microbatch}"
        head = tag if len(tag) <= cells else letter
        grid[e.stage][c0:c1] = head + letter.lower() * (cells - len(head))
    for r, row in enumerate(grid):
        rows.append(f"{f'rank {r}':<{label - 1}}|" + "".join(row) + "|")
    axis = f"0 s{'':<{max(0, cols - 14)}}{result.makespan_s:>10.4g} s"
    rows.append(" " * label + axis)
    rows.append(" " * label + "F forward  B backward  W weight grad  X overlapped F&B  . idle")
    if len(result.timeline) > result.pp * cols:
        rows.append(" " * label + "(more ops than columns: a column shows the last op in it)")
    return "\n".join(rows)


def render_mermaid(result: PipelineResult, max_events: int = 2000) -> str:
    """A ```mermaid gantt block (one section per rank) for Markdown reports. Times are integers
    in the unit named in the title (ms, us or ns, whichever keeps the makespan >= 1000 units)."""
    if not result.timeline:
        raise InputError("render_mermaid needs a timeline: simulate with record_timeline=True")
    unit, scale = "ns", 1e9
    for name, factor in (("ms", 1e3), ("us", 1e6)):
        if result.makespan_s * factor >= 1000:
            unit, scale = name, factor
            break
    lines = ["```mermaid", "gantt",
             f"    title {result.schedule} pp={result.pp} microbatches={result.num_microbatches}"
             f" vpp={result.vpp}, bubble {result.bubble_fraction:.1%} (time in {unit})",
             "    dateFormat x", "    axisFormat %L"]
    by_rank: dict[int, list[PipelineEvent]] = {}
    for e in result.timeline[:max_events]:
        by_rank.setdefault(e.stage, []).append(e)
    for r in sorted(by_rank):
        lines.append(f"    section rank {r}")
        for e in by_rank[r]:
            name = f"{e.kind}{e.microbatch}" + (f"/B{e.backward_microbatch}" if e.kind == "FB" else "")
            if result.vpp > 1:
                name += f" c{e.chunk}"
            start, end = round(e.start_s * scale), round(e.end_s * scale)
            lines.append(f"    {name} : {start}, {max(end, start + 1)}")
    if len(result.timeline) > max_events:
        lines.append(f"    %% {len(result.timeline) - max_events} more events left out")
    lines.append("```")
    return "\n".join(lines)
