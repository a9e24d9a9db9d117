"""`trainplan search`: the best layouts for a job, every knob free unless pinned.

Exit codes: 0 with at least one feasible layout; 1 when none is feasible (the JSON still prints,
with "candidates": [], and the readable view lists the rejection counts and a hint); 2 for bad
input (one `error:` line, from main() in cli.py).
"""

from __future__ import annotations

import inspect
import json

import typer
from rich import box
from rich.columns import Columns
from rich.console import Console
from rich.table import Table

from trainplan import cli_common as opt
from trainplan.tools.search.driver import CALCULON_LAYOUTS_PER_S, label
from trainplan.tools.search.results import SearchResult

def _days(result: dict) -> str:
    return f"{result['training']['days']:.1f}" if "training" in result else "-"


def _cost(result: dict) -> str:
    return "$" + _compact(result["training"]["cost_usd"]) if "training" in result else "-"


def _compact(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def render_search(result: SearchResult, console: Console) -> None:
    """The top layouts as a table, the winner's memory and time, why the runner-up lost."""
    job = result.job
    console.print(f"[bold]{job.model}[/bold] on {job.gpus} x {job.gpu}"
                  + (f" (GPU counts tried: {', '.join(map(str, job.gpu_counts))})" if len(job.gpu_counts) > 1 else "")
                  + f": gbs {job.gbs}, seq {job.seq}, {job.precision}; objective {result.objective}; "
                  f"{job.headroom_gib:.1f} GiB kept free" + (f"; engine {job.engine}" if job.engine else ""))
    rate = result.layouts_per_s
    console.print(f"searched {result.evaluated:,} layouts in {result.wall_s:.2f} s ({rate:,.0f}/s, "
                  f"{rate / CALCULON_LAYOUTS_PER_S:,.0f}x Calculon's {CALCULON_LAYOUTS_PER_S:.0f}/s); "
                  f"{result.feasible:,} feasible")
    rejected = result.rejected
    if rejected:
        console.print("rejected:")
        for reason, count in sorted(rejected.items(), key=lambda item: -item[1]):
            console.print(f"  {count:>9,}  {reason}", overflow="ellipsis", no_wrap=True)
    candidates = result.candidates
    if not candidates:
        for note in result.notes:
            console.print(f"[red]{note}[/red]")
        return
    several = len(job.gpu_counts) > 1
    table = Table(title=f"Top {len(candidates)} layouts (GiB: most loaded GPU, 2^30 B)", box=box.SIMPLE_HEAD)
    for column in ("layout", *(["GPUs"] if several else []), "GiB", "step_s", "MFU", "tok/s", "days", "cost"):
        # The layout label wraps on a narrow terminal; the figures never do, so a cell is never cut to "…".
        table.add_column(column, justify="left" if column == "layout" else "right", no_wrap=column != "layout")
    for c in candidates:
        t = c["time"]
        table.add_row(label(c["config"]),
                      *([str(c["config"]["gpus"])] if several else []),
                      f"{c['memory_gib']['total']:.1f}", f"{t['step_s']:.3f}", f"{t['mfu']:.1%}",
                      _compact(t["tokens_per_s"]), _days(c), _cost(c))
    console.print(table)

    best = candidates[0]
    memory = Table(title="Winner: GiB per GPU")
    time = Table(title="Winner: step time")
    for t_ in (memory, time):
        t_.add_column("part")
        t_.add_column("value", justify="right")
    for key in ("weights", "gradients", "optimizer", "activations", "other", "total", "capacity"):
        memory.add_row(key, f"{best['memory_gib'][key]:.2f}")
    step = best["time"]
    for key, seconds in step["breakdown"].items():
        time.add_row(key, f"{seconds:.3f} s ({seconds / step['step_s']:.1%})")
    time.add_row("step_s", f"{step['step_s']:.3f} s")
    time.add_row("bubble_fraction", f"{step['bubble_fraction']:.1%}")
    console.print(Columns([memory, time]))
    console.print(f"MFU denominator: {step['mfu_denominator']}")
    for note in result.notes:
        console.print(note)
    if result.pareto:
        front = Table(title="Pareto front: days vs cost across GPU counts")
        for column in ("GPUs", "days", "cost", "GPU-hours", "layout"):
            front.add_column(column, justify="left" if column == "layout" else "right")
        for p in result.pareto:
            front.add_row(str(p.gpus), f"{p.days:.1f}", f"${p.cost_usd:,.0f}", f"{p.gpu_hours:,.0f}",
                          label(p.config))
        console.print(front)


def register(app: typer.Typer) -> None:
    def search_command(as_json: opt.Json = False, **fields) -> None:
        """The best layouts for a job: every knob searched unless pinned; exit 1 when none is feasible."""
        from trainplan.tools.search.driver import search

        result = search(**opt.given(fields))
        if as_json:
            print(json.dumps(result.model_dump(), indent=2))
        else:
            render_search(result, Console())
        if not result.candidates:
            raise typer.Exit(code=1)

    from trainplan.tools.config.contract import (SEARCH_CHOSEN_KNOBS, SEARCHED_KNOBS, Layout, search_chosen_description,
                                          search_fields)

    pins = {name: f"pin the {Layout.model_fields[name].description} (default: searched)" for name in SEARCHED_KNOBS}
    pins.update({name: search_chosen_description(name) for name in SEARCH_CHOSEN_KNOBS})
    parameters = opt.options(search_fields(), none=(*SEARCHED_KNOBS, *SEARCH_CHOSEN_KNOBS), helps=pins)
    json_option = inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=opt.Json, default=False)
    app.command("search")(opt.command(search_command, [*parameters, json_option]))
