"""Pipeline timelines as text: an ASCII rank x time grid and a Mermaid gantt block."""

from __future__ import annotations

import math

from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.pipeline_events import PipelineEvent, PipelineResult

_FILL = {"F": "F", "B": "B", "W": "W", "FB": "X"}


def render_ascii(result: PipelineResult, width: int = 100, max_width: int = 160) -> str:
    """A rank x time grid: F forward, B backward, W weight gradient, X overlapped F&B, '.' idle.
    Each op starts with its capital letter and its micro-batch id (X shows the forward's), then
    lower-case fill, so adjacent ops stay apart. The grid widens from `width` up to `max_width`
    columns so that every id fits; where one still does not, the op shows its letter alone and a
    line under the grid says so (an id is never cut to fewer digits)."""
    if not result.timeline:
        raise InputError("render_ascii needs a timeline: simulate with record_timeline=True")
    label = max(len(f"rank {result.pp - 1} |"), 8)
    cols = max(10, width - label - 1)
    tags = [(e, f"{_FILL[e.kind]}{e.microbatch}") for e in result.timeline]
    # Columns for every tag: one more than its length per op, since a rounded edge can take a cell.
    needed = max(((len(tag) + 1) * result.makespan_s / (e.end_s - e.start_s) for e, tag in tags
                  if e.end_s > e.start_s), default=0.0)
    cols = max(cols, min(math.ceil(needed), max(cols, max_width - label - 1)))
    scale = cols / result.makespan_s
    grid = [["."] * cols for _ in range(result.pp)]
    ids_left_out = False
    for e, tag in tags:
        c0 = min(cols - 1, int(round(e.start_s * scale)))
        c1 = min(cols, max(c0 + 1, int(round(e.end_s * scale))))
        letter, cells = _FILL[e.kind], c1 - c0
        head = tag if len(tag) <= cells else letter
        ids_left_out |= head != tag
        grid[e.stage][c0:c1] = head + letter.lower() * (cells - len(head))
    rows = [f"{f'rank {r}':<{label - 1}}|" + "".join(row) + "|" for r, row in enumerate(grid)]
    axis = f"0 s{'':<{max(0, cols - 14)}}{result.makespan_s:>10.4g} s"
    rows.append(" " * label + axis)
    rows.append(" " * label + "F forward  B backward  W weight grad  X overlapped F&B  . idle")
    if ids_left_out:
        rows.append(" " * label + "(an op narrower than its micro-batch id shows its letter alone)")
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
