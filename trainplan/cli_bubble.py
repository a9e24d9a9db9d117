"""`trainplan bubble`: simulate one pipeline schedule and show its bubble, memory and timeline."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.pipeline import bubble_paper_s, simulate
from trainplan.tools.perf.pipeline_closed_form import StageTimes
from trainplan.tools.perf.pipeline_render import render_ascii, render_mermaid
from trainplan.tools.core.enums import Schedule


def _seconds(flag: str, text: str | None) -> float | list[float] | None:
    """'1.5' -> 1.5; '1,1.2,1,1' -> one value per stage."""
    if text is None:
        return None
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"{flag} takes seconds, one number or one per stage separated by commas: got '{text}'") from None
    return values[0] if len(values) == 1 else values


def stage_times(forward: str = "1.0", backward: str = "2.0", weight_grad: str | None = None) -> StageTimes:
    """The --forward, --backward and --weight-grad options as the simulator's StageTimes."""
    return StageTimes(forward_s=_seconds("--forward", forward), backward_s=_seconds("--backward", backward),
                      weight_grad_s=_seconds("--weight-grad", weight_grad))


def bubble_report(schedule: str | None, pp: int, microbatches: int, vpp: int = 1,
                  stages: StageTimes = StageTimes(), p2p: float = 0.0, timeline: bool = True):
    """Resolve the default schedule (tools/config/contract.py) (1f1b; interleaved when vpp>1) and simulate."""
    if schedule is None:
        schedule = Schedule.interleaved.value if vpp > 1 else Schedule.one_f_one_b.value
    return simulate(schedule, pp, microbatches, vpp=vpp, stages=stages, p2p_s=p2p, record_timeline=timeline)


def register(app: typer.Typer) -> None:
    @app.command("bubble")
    def bubble_command(
        pp: Annotated[int, typer.Option("--pp", help="pipeline-parallel size (ranks)")],
        microbatches: Annotated[int, typer.Option("--microbatches", help="micro-batches per step per pipeline")],
        schedule: Annotated[Optional[str], typer.Option(
            "--schedule", help="gpipe, 1f1b, interleaved, zb-h1, dualpipe (default 1f1b; interleaved when vpp>1)")] = None,
        vpp: Annotated[int, typer.Option("--vpp", help="virtual pipeline stages per rank (interleaved)")] = 1,
        forward: Annotated[str, typer.Option(
            "--forward", help="forward seconds per micro-batch per stage: one number or one per stage, comma-separated")] = "1.0",
        backward: Annotated[str, typer.Option("--backward", help="full backward (B+W) seconds, as --forward")] = "2.0",
        weight_grad: Annotated[Optional[str], typer.Option(
            "--weight-grad", help="the W part of --backward (default half); used by zb-h1 and dualpipe")] = None,
        p2p: Annotated[float, typer.Option("--p2p", help="seconds per activation/gradient hop between ranks")] = 0.0,
        width: Annotated[int, typer.Option("--width", help="columns of the ASCII timeline")] = 100,
        mermaid: Annotated[bool, typer.Option("--mermaid", help="print a Mermaid gantt block instead of ASCII")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="print the result object as JSON")] = False,
        timeline: Annotated[Optional[bool], typer.Option(
            "--timeline/--no-timeline",
            help="record and print the timeline (default: on for text, off for --json, which would embed every event)")] = None,
    ) -> None:
        """Simulate a pipeline schedule over its dependency graph: bubble, peak in-flight micro-batches, timeline."""
        if timeline is None:
            timeline = not as_json
        stages = stage_times(forward, backward, weight_grad)
        result = bubble_report(schedule, pp, microbatches, vpp, stages, p2p, timeline or mermaid)
        if as_json:
            print(json.dumps(result.to_dict(include_timeline=timeline), indent=2))
            return
        closed = result.closed_form_bubble_fraction
        print(f"schedule {result.schedule}  pp={result.pp}  microbatches={result.num_microbatches}  vpp={result.vpp}")
        line = f"bubble_fraction: {result.bubble_fraction:.4f}"
        if closed is not None:
            form = "(p-1)/(v*m+p-1)" if result.schedule == "interleaved" else "(p-1)/(m+p-1)"
            line += f"  (closed form {form} = {closed:.4f}, equal stages, no p2p)"
        print(line)
        fwd, bwd, wgt = stages.forward_s, stages.backward_s, stages.weight_grad_s
        if result.schedule in ("zb-h1", "dualpipe") and all(not isinstance(x, list) for x in (fwd, bwd, wgt)):
            paper = bubble_paper_s(result.schedule, pp, fwd, bwd, wgt)
            idle = result.makespan_s - sum(result.stage_busy_s) / pp
            print(f"bubble per rank: {idle:.4g} s  (paper's formula: {paper:.4g} s, for equal stages and no p2p)")
        print(f"makespan_s: {result.makespan_s:.6g}")
        print(f"stage_busy_s: {[round(b, 6) for b in result.stage_busy_s]}")
        print(f"peak_inflight_microbatches: {[round(x, 4) for x in result.peak_inflight_microbatches]}")
        if mermaid:
            print(render_mermaid(result))
        elif timeline:
            print(render_ascii(result, width=width))
