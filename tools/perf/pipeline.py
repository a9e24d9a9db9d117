"""Event-driven pipeline schedule simulator: gpipe, 1f1b, interleaved, zb-h1 and dualpipe.

Each rank's op order is built the way the schedule's reference implementation issues it; then a
list simulation runs every rank's list in order and starts each op as soon as the rank is free
and its inputs have arrived over the real dependency graph (no closed forms):

    F(mb, s) after F(mb, s-1) + p2p            the activation arrives from the previous stage
    B(mb, s) after B(mb, s+1) + p2p, F(mb, s)  the gradient arrives from the next stage
    W(mb, s) after B(mb, s)                    weight gradient of the same stage (split backward)

p2p_s is added only when the two ops sit on different ranks. Each rank runs one op at a time.

Schedules and sources:
- gpipe: all forwards, then all backwards (Huang et al. 2019, GPipe). Bubble (p-1)/(m+p-1).
- 1f1b: PipeDream-Flush; p-s-1 warm-up forwards on stage s, then one forward one backward
  (Narayanan et al. 2021, SC21 "Efficient Large-Scale Language Model Training on GPU Clusters").
- interleaved: Megatron's interleaved 1F1B (same paper, §2.2.2): rank r holds vpp chunks, chunk c
  is virtual stage c*p + r; chunk-major groups of p micro-batches; warm-up (p-r-1)*2 + (v-1)*p.
  Bubble (p-1)/(v*m+p-1), i.e. the paper's (1/v)(p-1)/m of the compute time.
- zb-h1: Qi et al. 2024 "Zero Bubble Pipeline Parallelism" (ICLR 2024), handcrafted ZB-H1: the
  backward is split into B (input gradient, on the critical path) and W (weight gradient); stage s
  keeps 1F1B's p-s-1 warm-up forwards and holds back s W's, which fill the cool-down bubbles.
  Bubble time per rank (p-1)(F+B-2W), B being the full backward.
- dualpipe: DeepSeek-V3 technical report §3.2.1 and deepseek-ai/DualPipe `DualPipe.step`, whose
  eight phases are replayed op by op. Rank r holds model stage r (chunk 0, fed from rank 0) and
  model stage p-1-r (chunk 1, fed from rank p-1); micro-batches 0..m/2-1 enter at rank 0 and
  m/2..m-1 at rank p-1. In the steady state a forward chunk and a full backward chunk of other
  micro-batches run as one overlapped op 'FB'. Paper's bubble (p/2-1)(F&B+B-3W).

Conventions:
- forward_s[s] and backward_s[s] are the times of one micro-batch through model stage s (all its
  layers); backward_s = B + W. An interleaved chunk takes 1/vpp of its rank's stage time. For dualpipe,
  stage s runs on ranks s and p-1-s, so a rank's work per micro-batch equals 1F1B's.
- The overlapped FB op of dualpipe takes F + B (compute does not get faster; DualPipe's gain of
  hiding all-to-all and p2p traffic behind compute is outside this model); both its forward
  output and its input gradient are sent at the end of the op.
- Megatron's combined 1F1B (moe_a2a_overlap; combined_1f1b.py): with paired_s, the 1f1b (pp=1) and
  interleaved orders run one more warm-up forward and then their steady state as FB ops of
  paired_s (the two micro-batches' all-to-all hidden under each other's compute); both outputs are
  sent at the end of the op (TransformerModelChunkSchedulePlan.run sends after its last layer).
- bubble_fraction = 1 - mean(stage busy time) / makespan; with equal stages and p2p=0 it is
  idle / (idle + busy) of every rank, which is the closed forms' definition.
- peak_inflight_microbatches: per rank, the most micro-batches whose forward activations are held,
  from the start of the forward to the end of the op that frees them (B, or W when the backward is
  split, since W needs the layer inputs). Interleaved chunks count 1/vpp each (a full stage's
  micro-batch = 1); a dualpipe chunk is a whole model stage and counts 1, so DualPipe reports
  p+1 on rank 0 (the paper's PP+1: inside an FB op the new forward and the old backward coexist).
  zb-h1 reports p on every stage: the W's held back keep their inputs alive, and p is 1F1B's peak.
  Megatron's combined 1F1B holds its one extra warm-up chunk, and its combined step, which runs the
  forward's layer i beside the backward's layer L-1-i, frees as it fills: the peak of interleaved
  1F1B (Megatron-Core's guide: the forward-backward pairing "does not add the same activation-memory
  penalty" as pairing like phases), up to a layer the chunk granularity does not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.pipeline_closed_form import StageTimes, _schedule, bubble_closed_form, bubble_paper_s
from trainplan.tools.perf.pipeline_orders import (
    _F, _I, _X, _order_1f1b, _order_dualpipe, _order_gpipe, _order_interleaved, _order_zb_h1, combined_steps,
)
from trainplan.tools.core.enums import Schedule
from trainplan.tools.config.schedule_rules import (SIMULATE_MAX_UNITS, TIMELINE_MAX_UNITS, dualpipe_batch_ok,
                                                    interleaved_batch_ok, simulated_units)
from trainplan.tools.perf.pipeline_events import PipelineEvent, PipelineResult
from trainplan.tools.perf.pipeline_program import Program, Shape, cached_program, compile_program, replay

__all__ = ["bubble_closed_form", "bubble_paper_s", "check_schedule", "combined_steps", "simulate"]

# Op kinds (pipeline_orders): forward, full backward (B+W), input-grad backward only, weight grad, F + full B.
_KIND_NAME = ("F", "B", "B", "W", "FB")


# ----------------------------------------------------------------------------------------------


MAX_CACHED_UNITS = 2**21
"""Units (pp x micro-batches x vpp, two ops each) of the compiled shapes (pipeline_program.py) kept in memory
at once, about 28 bytes an op (about 120 MB at most); the least recently used shape is dropped first."""

MAX_STAGE_S = 1e6
"""Longest time one micro-batch may take on one stage (11 days; a step of a real run takes seconds), so that
a makespan of millions of them stays finite."""


def _per_stage(name: str, value: float | Sequence[float], pp: int) -> list[float]:
    values = [float(value)] * pp if isinstance(value, (int, float)) else [float(x) for x in value]
    if len(values) != pp:
        raise InputError(f"{name} has {len(values)} values but pp={pp}: give one per stage or a single number")
    if not all(math.isfinite(x) and x >= 0 for x in values):
        raise InputError(f"{name} must be finite and >= 0 seconds, got {values}")
    if max(values) > MAX_STAGE_S:
        raise InputError(f"{name}={max(values):g} s is more than {MAX_STAGE_S:g} s (11 days) for one micro-batch on "
                         "one stage: give seconds per micro-batch, e.g. 2")
    return values


# --- what a schedule accepts (one definition: the simulator, layout.resolve_config and the search) ---

def _validate(s: Schedule, pp: int, m: int, vpp: int, record_timeline: bool = False) -> None:
    for name, value in (("pp", pp), ("num_microbatches", m), ("vpp", vpp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be an integer >= 1, got {value!r}")
    if s is Schedule.interleaved:
        if vpp < 2:
            raise InputError("schedule=interleaved needs vpp >= 2 (virtual stages per rank); vpp=1 is 1f1b")
        if not interleaved_batch_ok(pp, m):
            raise InputError(f"schedule=interleaved needs microbatches divisible by pp (Megatron): "
                             f"microbatches={m}, pp={pp}; use a multiple of {pp}")
    elif vpp != 1:
        raise InputError(f"vpp={vpp} is only used by the interleaved schedule: use schedule interleaved or vpp 1")
    if s is Schedule.dualpipe and not dualpipe_batch_ok(pp, m):
        raise InputError(f"schedule=dualpipe needs an even pp >= 2 and an even number of micro-batches "
                         f">= 2*pp (DualPipe.step asserts it): pp={pp}, microbatches={m}")
    units = simulated_units(pp, m, vpp)
    if units > SIMULATE_MAX_UNITS:
        raise InputError(f"pp*microbatches*vpp={pp}*{m}*{vpp}={units:,} is over the {SIMULATE_MAX_UNITS:,} the "
                         f"simulator runs: use fewer micro-batches (the bubble depends on microbatches/pp, so "
                         f"e.g. microbatches={max(1, SIMULATE_MAX_UNITS // (pp * vpp))} keeps the picture)")
    if record_timeline and units > TIMELINE_MAX_UNITS:
        raise InputError(f"pp*microbatches*vpp={units:,} is over the {TIMELINE_MAX_UNITS:,} whose timeline is "
                         f"recorded: use --no-timeline (record_timeline=False), or fewer micro-batches")


def check_schedule(schedule: str | Schedule, pp: int, num_microbatches: int, vpp: int = 1) -> None:
    """The simulator's refusals of a schedule's shape (InputError), without simulating it (the search's scalar
    reference asks this of a layout it does not time)."""
    _validate(_schedule(schedule), pp, num_microbatches, vpp)


# --- the simulation ------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What the list simulation runs: every op's duration (seconds, by Program.duration index: f_d, b_d, i_d,
    w_d per virtual stage, then the overlapped ops') and the shape's program (pipeline_program.py)."""

    seconds: list[float]
    program: Program


def _orders(s: Schedule, pp: int, m: int, vpp: int, combined: bool) -> tuple[tuple[tuple, ...], ...]:
    """Each rank's op order, as the schedule's reference implementation issues it (pipeline_orders.py)."""
    if s is Schedule.dualpipe:
        orders = [_order_dualpipe(pp, m, r) for r in range(pp)]
    elif s is Schedule.interleaved:
        orders = [_order_interleaved(pp, m, vpp, r, combined) for r in range(pp)]
    elif s is Schedule.one_f_one_b:
        orders = [_order_1f1b(pp, m, r, combined) for r in range(pp)]
    else:
        build = {Schedule.gpipe: _order_gpipe, Schedule.zb_h1: _order_zb_h1}[s]
        orders = [build(pp, m, r) for r in range(pp)]
    return tuple(tuple(order) for order in orders)


def _owner(s: Schedule, pp: int, m: int, vpp: int) -> list[int]:
    """owner[mb * V + vs]: the rank that runs virtual stage vs of micro-batch mb (module doc, Conventions)."""
    if s is Schedule.dualpipe:   # the first half enters at rank 0, the rest at rank pp-1
        return [vs if mb < m // 2 else pp - 1 - vs for mb in range(m) for vs in range(pp)]
    return [vs % pp for vs in range(pp * vpp)] * m   # virtual stage vs is chunk vs // pp of rank vs % pp


def _shape(s: Schedule, pp: int, m: int, vpp: int, combined: bool) -> Program:
    """The schedule's program and held-activation peaks: a pure function of its shape, compiled once while
    it stays cached (pipeline_program.MAX_CACHED_UNITS); the search simulates one shape with many durations."""
    key = (s, pp, m, vpp, combined)
    program = cached_program(key)
    if program is None:
        orders = _orders(s, pp, m, vpp, combined)
        dualpipe = s is Schedule.dualpipe
        program = compile_program(key, Shape(orders, _owner(s, pp, m, vpp), pp if dualpipe else pp * vpp,
                                             combined,
                                             _held_peaks(orders, combined, 1 if dualpipe else vpp)), MAX_CACHED_UNITS)
    return program


def _plan(s: Schedule, pp: int, m: int, vpp: int, fwd: list[float], bwd: list[float],
          wgt: list[float], paired: list[float] | None = None) -> _Plan:
    """Durations and program of a schedule (module doc, Conventions). paired: per stage, a combined step of
    Megatron's combined 1F1B (1f1b or interleaved); DualPipe's FB op takes F + B (module doc)."""
    combined = paired is not None and s is not Schedule.dualpipe
    if s is Schedule.dualpipe:
        # Every micro-batch passes all pp model stages (a rank's chunk is a whole model stage).
        num_virtual, f_d, b_d, w_d = pp, fwd, bwd, wgt
    else:
        # pp * vpp virtual stages; virtual stage vs is chunk vs // pp of rank vs % pp, 1/vpp of its stage.
        num_virtual = pp * vpp
        f_d = [fwd[vs % pp] / vpp for vs in range(num_virtual)]
        b_d = [bwd[vs % pp] / vpp for vs in range(num_virtual)]
        w_d = [wgt[vs % pp] / vpp for vs in range(num_virtual)]
    program = _shape(s, pp, m, vpp, combined)
    i_d = [b - w for b, w in zip(b_d, w_d)]
    x_d = ([paired[vs % pp] / vpp for vs in range(num_virtual)] if combined
           else [f_d[vs] + b_d[vs2] for vs, vs2 in program.pairs])
    return _Plan(f_d + b_d + i_d + w_d + x_d, program)


def _run(plan: _Plan, pp: int, p2p_s: float, record_timeline: bool) -> tuple[list[float], list[float], list[list[tuple]]]:
    """The list simulation (module doc), replayed over the shape's program (pipeline_program.py): each op
    starts as soon as its rank is free and its inputs have arrived. Returns each rank's finishing time, its
    busy seconds and, with record_timeline, its ops (kind, mb, vs, mb2, vs2, start, end) in issue order."""
    starts: list[float] | None = [] if record_timeline else None
    free, busy, end = replay(plan.program, pp, plan.seconds, p2p_s, starts)
    raw: list[list[tuple]] = [[] for _ in range(pp)]
    if starts is not None:
        flat = [op for order in _orders(*plan.program.key) for op in order]
        for r, op_id, start, stop in zip(plan.program.rank, plan.program.op_id, starts, end):
            raw[r].append((*flat[op_id], start, stop))
    return free, busy, raw


def _held_peaks(orders: tuple[tuple[tuple, ...], ...], combined: bool, unit: int) -> tuple[float, ...]:
    """Per rank: the most micro-batches whose forward activations are held at once (module doc), counting
    `unit` chunks as one micro-batch; walked in each rank's op order, so it depends on the order alone."""
    peak = []
    for order in orders:
        held, top = 0, 0
        for kind, *_ in order:
            if kind == _X and combined:
                # Megatron's combined step frees the backward's layers as the forward fills its own (forward
                # layer i beside backward layer L-1-i): at chunk granularity the held count does not rise.
                continue
            if kind == _F or kind == _X:
                held += 1
                top = max(top, held)
            if kind != _F and kind != _I:    # B, W and FB free a micro-batch's activations
                held -= 1
        peak.append(top / unit)
    return tuple(peak)


def _events(s: Schedule, pp: int, m: int, raw: list[list[tuple]]) -> list[PipelineEvent]:
    """The recorded ops as PipelineEvents, rank by rank."""
    def chunk(mb: int, vs: int) -> int:
        return int(mb >= m // 2) if s is Schedule.dualpipe else vs // pp

    return [PipelineEvent(r, _KIND_NAME[kind], mb, chunk(mb, vs), start, end,
                          mb2 if kind == _X else None, chunk(mb2, vs2) if kind == _X else None)
            for r in range(pp) for kind, mb, vs, mb2, vs2, start, end in raw[r]]


def simulate(schedule: str | Schedule, pp: int, num_microbatches: int, vpp: int = 1,
             stages: StageTimes = StageTimes(), p2p_s: float = 0.0, record_timeline: bool = True) -> PipelineResult:
    """Simulate one training step's pipeline schedule; see the module docstring for the model.

    stages (StageTimes): forward_s, backward_s per model stage (one number for all, or pp numbers), one
    micro-batch; weight_grad_s: the W part of backward_s (default backward_s/2); only zb-h1 and dualpipe run W
    apart; paired_s: Megatron's combined 1F1B (moe_a2a_overlap): per stage, one combined step of a forward and
    a backward of two micro-batches; the steady state runs such 'FB' ops after one more warm-up
    forward (warmup_forwards). Interleaved, or 1f1b without pipelining, as Megatron runs it.
    p2p_s: latency + transfer of one activation or gradient between adjacent ranks.
    Sizes are bounded: pp x num_microbatches x vpp <= SIMULATE_MAX_UNITS (TIMELINE_MAX_UNITS with
    the timeline).
    """
    forward_s, backward_s, weight_grad_s, paired_s = (stages.forward_s, stages.backward_s, stages.weight_grad_s,
                                                      stages.paired_s)
    s = _schedule(schedule)
    _validate(s, pp, num_microbatches, vpp, record_timeline)
    m = num_microbatches
    fwd = _per_stage("forward_s", forward_s, pp)
    bwd = _per_stage("backward_s", backward_s, pp)
    wgt = [b / 2 for b in bwd] if weight_grad_s is None else _per_stage("weight_grad_s", weight_grad_s, pp)
    if any(w > b for w, b in zip(wgt, bwd)):
        raise InputError(f"weight_grad_s {wgt} is the W part of backward_s {bwd}: it cannot exceed it")
    if not any(fwd) and not any(bwd):
        raise InputError("forward_s and backward_s are all 0: give the stages some work")
    if not (math.isfinite(p2p_s) and p2p_s >= 0):
        raise InputError(f"p2p_s must be finite and >= 0 seconds, got {p2p_s}")

    paired = None
    if paired_s is not None:
        if not (s is Schedule.interleaved or (s is Schedule.one_f_one_b and pp == 1)):
            raise InputError(f"paired_s (Megatron's combined 1F1B) runs with schedule interleaved, or 1f1b with pp=1; "
                             f"got {s.value} with pp={pp}")
        paired = _per_stage("paired_s", paired_s, pp)
    plan = _plan(s, pp, m, vpp, fwd, bwd, wgt, paired)
    free, busy, raw = _run(plan, pp, p2p_s, record_timeline)
    peak = list(plan.program.held_peaks)
    makespan = max(free)
    return PipelineResult(
        schedule=s.value, pp=pp, num_microbatches=m, vpp=vpp, makespan_s=makespan,
        bubble_fraction=max(0.0, 1.0 - sum(busy) / pp / makespan), stage_busy_s=busy,  # clamp float noise
        peak_inflight_microbatches=peak, timeline=_events(s, pp, m, raw) if record_timeline else [],
    )
