"""`trainplan search`: the best layouts for a job, every knob free unless pinned.

Exit codes: 0 with at least one feasible layout; 1 when none is feasible (the JSON still prints,
with "candidates": [], and the readable view lists the rejection counts and a hint); 2 for bad
input (one `error:` line, from main() in cli.py).
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich import box
from rich.columns import Columns
from rich.console import Console
from rich.table import Table

from trainplan import cli_common as opt
from trainplan.tools.search import CALCULON_LAYOUTS_PER_S, Objective, explain_runner_up, label
from trainplan.tools.specs import Recompute, Schedule

TpPin = Annotated[Optional[int], typer.Option("--tp", help="pin the tensor-parallel size (default: searched)")]
PpPin = Annotated[Optional[int], typer.Option("--pp", help="pin the pipeline-parallel size (default: searched)")]
CpPin = Annotated[Optional[int], typer.Option("--cp", help="pin the context-parallel size (default: searched)")]
EpPin = Annotated[Optional[int], typer.Option("--ep", help="pin the expert-parallel size (default: searched)")]
VppPin = Annotated[Optional[int], typer.Option("--vpp", help="pin the virtual stages per rank (default: searched)")]
ZeroPin = Annotated[Optional[int], typer.Option("--zero", help="pin the ZeRO stage 0-3 (default: searched)")]
MbsPin = Annotated[Optional[int], typer.Option("--mbs", help="pin the micro-batch size (default: searched)")]
RecomputePin = Annotated[Optional[Recompute], typer.Option("--recompute", help="pin the recompute mode (default: searched)")]
SchedulePin = Annotated[Optional[Schedule], typer.Option("--schedule", help="pin the pipeline schedule (default: searched)")]
GbsRequired = Annotated[int, typer.Option("--gbs", help="global batch size, sequences")]
ObjectiveOpt = Annotated[Objective, typer.Option("--objective", help="rank by throughput, cost or time")]
TopK = Annotated[int, typer.Option("--top-k", help="how many layouts to show")]
MaxGpus = Annotated[Optional[int], typer.Option(
    "--max-gpus", help="also try GPU counts from this many down, halving, to the fewest that could hold the model")]
DeadlineDays = Annotated[Optional[float], typer.Option("--deadline-days", help="drop layouts that train the tokens in more days")]
Budget = Annotated[Optional[float], typer.Option("--budget", help="drop layouts that cost more dollars (budget_usd)")]
HeadroomGib = Annotated[float, typer.Option("--headroom-gib", help="GiB per GPU to keep free")]
Pareto = Annotated[bool, typer.Option("--pareto", help="report the days/cost front across GPU counts (needs --tokens)")]
CrossNodeTp = Annotated[bool, typer.Option("--allow-cross-node-tp", help="let tp span more than one node")]


def _days(result: dict) -> str:
    return f"{result['training']['days']:.1f}" if "training" in result else "-"


def _cost(result: dict) -> str:
    return "$" + _compact(result["training"]["cost_usd"]) if "training" in result else "-"


def _compact(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def render_search(result: dict, console: Console) -> None:
    """The top layouts as a table, the winner's memory and time, why the runner-up lost."""
    job = result["job"]
    console.print(f"[bold]{job['model']}[/bold] on {job['gpus']} x {job['gpu']}"
                  + (f" (GPU counts tried: {', '.join(map(str, job['gpu_counts']))})" if len(job["gpu_counts"]) > 1 else "")
                  + f": gbs {job['gbs']}, seq {job['seq']}, {job['precision']}; objective {result['objective']}")
    rate = result["layouts_per_s"]
    console.print(f"searched {result['evaluated']:,} layouts in {result['wall_s']:.2f} s ({rate:,.0f}/s, "
                  f"{rate / CALCULON_LAYOUTS_PER_S:,.0f}x Calculon's {CALCULON_LAYOUTS_PER_S:.0f}/s); "
                  f"{result['feasible']:,} feasible")
    rejected = result["rejected"]
    if rejected:
        console.print("rejected: " + "; ".join(f"{reason} {count:,}" for reason, count in rejected.items()))
    candidates = result["candidates"]
    if not candidates:
        for note in result.get("notes", []):
            console.print(f"[red]{note}[/red]")
        return
    several = len(job["gpu_counts"]) > 1
    table = Table(title=f"Top {len(candidates)} layouts (GiB: most loaded GPU, 2^30 B)", box=box.SIMPLE_HEAD)
    for column in ("layout", *(["GPUs"] if several else []), "GiB", "step_s", "MFU", "tok/s", "days", "cost"):
        table.add_column(column, justify="left" if column == "layout" else "right", no_wrap=True)
    for c in candidates:
        t = c["time"]
        name = label(c["config"]).split(" ")
        split = 3 + (c["config"]["cp"] > 1) + (c["config"]["ep"] > 1)   # sizes / schedule / the rest
        table.add_row("\n".join((" ".join(name[:split]), name[split], " ".join(name[split + 1:]))),
                      *([str(c["config"]["gpus"])] if several else []),
                      f"{c['memory_gib']['total']:.1f}", f"{t['step_s']:.3f}", f"{t['mfu']:.1%}",
                      _compact(t["tokens_per_s"]), _days(c), _cost(c))
    console.print(table)

    best = candidates[0]
    memory = Table(title="Winner: memory per GPU (GiB)")
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
    if len(candidates) > 1:
        console.print(explain_runner_up(best, candidates[1], result["objective"]))
    if result.get("pareto"):
        front = Table(title="Pareto front: days vs cost across GPU counts")
        for column in ("GPUs", "days", "cost", "GPU-hours", "layout"):
            front.add_column(column, justify="left" if column == "layout" else "right")
        for p in result["pareto"]:
            front.add_row(str(p["gpus"]), f"{p['days']:.1f}", f"${p['cost_usd']:,.0f}", f"{p['gpu_hours']:,.0f}",
                          label(p["config"]))
        console.print(front)


def register(app: typer.Typer) -> None:
    @app.command("search")
    def search_command(
        model: opt.Model, gpu: opt.Gpu, gpus: opt.Gpus, gbs: GbsRequired,
        seq: opt.Seq = None, tokens: opt.Tokens = None, price: opt.Price = None,
        precision: opt.PrecisionOpt = "bf16", objective: ObjectiveOpt = Objective.throughput, top_k: TopK = 5,
        max_gpus: MaxGpus = None, deadline_days: DeadlineDays = None, budget: Budget = None,
        headroom_gib: HeadroomGib = 0.0, pareto: Pareto = False, allow_cross_node_tp: CrossNodeTp = False,
        tp: TpPin = None, pp: PpPin = None, cp: CpPin = None, ep: EpPin = None, vpp: VppPin = None,
        zero: ZeroPin = None, mbs: MbsPin = None, recompute: RecomputePin = None, schedule: SchedulePin = None,
        goodput: opt.Goodput = None, gpus_per_node: opt.GpusPerNode = None,
        intra_node_bw: opt.IntraNodeBw = None, inter_node_bw: opt.InterNodeBw = None,
        as_json: opt.Json = False,
    ) -> None:
        """The best layouts for a job: every knob searched unless pinned; exit 1 when none is feasible."""
        from trainplan.tools.search import search

        result = search(
            model=model, gpu=gpu, gpus=gpus, gbs=gbs, seq=seq, tokens=tokens, price=price,
            precision=getattr(precision, "value", precision), objective=getattr(objective, "value", objective),
            top_k=top_k, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, zero=zero, mbs=mbs,
            recompute=getattr(recompute, "value", recompute), schedule=getattr(schedule, "value", schedule),
            max_gpus=max_gpus, deadline_days=deadline_days, budget_usd=budget, headroom_gib=headroom_gib,
            allow_cross_node_tp=allow_cross_node_tp, pareto=pareto, goodput=goodput,
            gpus_per_node=gpus_per_node, intra_node_bw=intra_node_bw, inter_node_bw=inter_node_bw,
        )
        if as_json:
            print(json.dumps(result, indent=2))
        else:
            render_search(result, Console())
        if not result["candidates"]:
            raise typer.Exit(code=1)
