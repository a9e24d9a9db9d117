"""Pipeline schedules in closed form: the papers' bubble formulas, and a vectorised makespan that
follows the event-driven simulator (pipeline.simulate) for the layout search.

makespan_closed_form, for rows of layouts (schedule code, m, vpp, p2p_s: shape (n,); per-stage
forward F, backward B (= B_input + W) and weight-gradient W seconds: shape (n, pp)), with the
slowest stage X = max(F + B) and the sum over stages; each reduces to the paper's form for equal
stages (bubble_paper_s):
    1f1b          (m-1) X + sum(F + B)                       [(m + p - 1)(F + B)]
    gpipe         (m-1) max F + sum F + (m-1) max B + sum B  [(m + p - 1)(F + B)]
    interleaved   m X + (sum(F + B) - X) / v                  [(m + (p-1)/v)(F + B)]
    zb-h1         max over stages s of: forwards before s, m(F + B) on s, then the input gradients
                  back to stage 0 behind the W's s still owes       [m(F + B) + (p-1)(F + B - 2W)]
    dualpipe      max(m max_r (X_r + X_{p-1-r})/2,
                      m mean_r (X_r + X_{p-1-r})/2 + (p/2-1) mean(F + 2B - 3W))
plus the p2p time c times a per-schedule count of exposed hops, read off the simulator on equal
stages (d makespan / d p2p_s): gpipe 2(p-1); 1f1b (2 - 2/p) m + 2(p-2); interleaved 2(v p - 1);
zb-h1 4(p-1); dualpipe (1 - 1/p) m + 1.5(p-1). tests/test_search.py checks them against the
simulator within 4% with unequal stages and p2p. Megatron's combined 1F1B (moe_a2a_overlap) has its
own form, combined_makespan (within 5% of the simulator; tests/test_combined_1f1b.py).
"""

from __future__ import annotations

import difflib

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.core.errors import InputError
from trainplan.tools.core.enums import Schedule

_GPIPE, _INTER, _ZB, _DUAL = (SCHEDULE_CODES[s] for s in (Schedule.gpipe, Schedule.interleaved, Schedule.zb_h1,
                                                          Schedule.dualpipe))


def _schedule(schedule: str | Schedule) -> Schedule:
    try:
        return Schedule(schedule)
    except ValueError:
        known = [s.value for s in Schedule]
        close = difflib.get_close_matches(str(schedule).lower(), known, n=2, cutoff=0.4)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise InputError(f"unknown schedule '{schedule}': {hint}known: {', '.join(known)}") from None


def bubble_closed_form(schedule: str | Schedule, pp: int, m: int, vpp: int = 1) -> float | None:
    """Closed-form bubble fraction for equal stages and p2p=0, or None when there is none.

    gpipe, 1f1b (Huang et al. 2019; Narayanan et al. 2021): (p-1)/(m+p-1).
    interleaved (Narayanan et al. 2021 §2.2.2): bubble time (p-1)(tf+tb)/v over compute m(tf+tb),
    so as a fraction of the makespan (p-1)/(v*m+p-1).
    zb-h1 and dualpipe: the papers give bubble *times* that depend on F, B and W: see bubble_paper_s.
    """
    s = _schedule(schedule)
    if s in (Schedule.gpipe, Schedule.one_f_one_b):
        return (pp - 1) / (m + pp - 1)
    if s is Schedule.interleaved:
        return (pp - 1) / (vpp * m + pp - 1)
    return None


def bubble_paper_s(schedule: str | Schedule, pp: int, forward_s: float, backward_s: float,
                   weight_grad_s: float | None = None, vpp: int = 1) -> float:
    """Per-rank idle time from the papers' tables, for equal stages and no p2p.

    DeepSeek-V3 report Table 2 (F forward chunk, B full backward, W weight-grad part, F&B an
    overlapped forward+backward, here F+B): 1F1B (p-1)(F+B); ZB1P (p-1)(F+B-2W);
    DualPipe (p/2-1)(F&B+B-3W). GPipe equals 1F1B; interleaved is 1F1B's over vpp (SC21).
    """
    s = _schedule(schedule)
    f, b = forward_s, backward_s
    w = b / 2 if weight_grad_s is None else weight_grad_s
    if s in (Schedule.gpipe, Schedule.one_f_one_b):
        return (pp - 1) * (f + b)
    if s is Schedule.interleaved:
        return (pp - 1) * (f + b) / vpp
    if s is Schedule.zb_h1:
        return (pp - 1) * (f + b - 2 * w)
    return (pp / 2 - 1) * ((f + b) + b - 3 * w)


def warmup_forwards(interleaved, pp, m, vpp, r, combined: bool = False):
    """Forwards rank r runs before its first backward (1f1b and interleaved; numpy-friendly).
    Megatron's get_pp_rank_microbatches: p - r - 1, or with interleaving 2(p - r - 1) + (v - 1) p;
    with the combined 1F1B of moe_a2a_overlap one more, "to ensure the forward and backward
    computations are independent in all 1f1b steps" (its pp = 1 form,
    combined_1f1b_schedule_for_no_pipelining, runs the first forward alone). At most all m x vpp."""
    warm = np.where(interleaved, (pp - r - 1) * 2 + (vpp - 1) * pp, pp - r - 1)
    return np.minimum(warm + int(combined), m * vpp)


def combined_makespan(pp, m, vpp, forward_s, backward_s, paired_s, p2p_s) -> np.ndarray:
    """The simulator's makespan of Megatron's combined 1F1B (moe_a2a_overlap: interleaved, or pp = 1),
    rows as makespan_closed_form's, paired_s (n, pp) the combined step of each stage. Rank r runs
    W_r = warmup_forwards warm-up forwards and as many cool-down backwards alone and the rest as
    combined steps, so it is busy T_r = (W_r (F + B) + (m v - W_r) P) / v, and it cannot start before
    the forwards of the ranks before it nor end before their backwards: max_r T_r + sum_{s<r}(F + B)/v.
    p2p: the interleaved count 2(v p - 1), plus one hop per combined step of the last rank, since a
    combined step waits for the backward of the same step on the next rank (simulator, equal stages)."""
    f, b, y = forward_s, backward_s, paired_s
    x = f + b
    m = m.astype(float)[:, None]
    v = vpp.astype(float)[:, None]
    ranks = np.arange(pp)[None, :]
    warm = warmup_forwards(pp > 1, pp, m, v, ranks, combined=True)
    busy = (warm * x + (m * v - warm) * y) / v
    ideal = (busy + (np.cumsum(x, axis=1) - x) / v).max(axis=1)
    steps_last = m[:, 0] * v[:, 0] - warm[:, -1]
    hops = np.where(pp > 1, 2 * (v[:, 0] * pp - 1) + steps_last - 1, 0.0)
    return ideal + hops * p2p_s


@dataclass(frozen=True)
class StageTimes:
    """One micro-batch's seconds on each pipeline stage. For the simulator (pipeline.simulate): one number for
    every stage or pp numbers; weight_grad_s, the W part of backward_s, None: backward_s / 2. For the closed form
    (rows of layouts): arrays of shape (n, pp), weight_grad_s given. paired_s: a combined 1F1B step of a forward
    and a backward (Megatron's combined 1F1B, combined_makespan), for the layouts that run it, else None."""

    forward_s: float | Sequence[float] | np.ndarray = 1.0
    backward_s: float | Sequence[float] | np.ndarray = 2.0
    weight_grad_s: float | Sequence[float] | np.ndarray | None = None
    paired_s: float | Sequence[float] | np.ndarray | None = None


def makespan_closed_form(schedule, pp, m, vpp, stages: StageTimes, p2p_s) -> np.ndarray:
    """The simulator's makespan in closed form, for rows of layouts sharing one pp (module doc).

    schedule, m, vpp, p2p_s: shape (n,); the stage times StageTimes."""
    if stages.paired_s is not None:
        return combined_makespan(pp, m, vpp, stages.forward_s, stages.backward_s, stages.paired_s, p2p_s)
    p = float(pp)
    f, b, w = stages.forward_s, stages.backward_s, stages.weight_grad_s
    x = f + b
    x_max, x_sum = x.max(axis=1), x.sum(axis=1)
    m = m.astype(float)
    v = vpp.astype(float)
    if pp == 1:
        return m * x_max
    one_f_one_b = (m - 1) * x_max + x_sum
    gpipe = (m - 1) * f.max(axis=1) + f.sum(axis=1) + (m - 1) * b.max(axis=1) + b.sum(axis=1)
    interleaved = m * x_max + (x_sum - x_max) / v
    # zb-h1: stage s starts after the forwards of the stages before it, runs m(F + B), and then
    # the last input gradient walks back to stage 0 (sum of B - W, then W on stage 0), behind the
    # min(s + 1, m) weight gradients stage s still owes after its last input gradient.
    stages = np.arange(pp)
    head = np.cumsum(f, axis=1) - f
    tail = np.cumsum(b - w, axis=1) - (b - w) + w[:, :1]
    held = np.minimum(stages[None, :] + 1, m[:, None]) * w
    zb = (head + m[:, None] * x + np.maximum(0.0, tail - held)).max(axis=1)
    # dualpipe: rank r runs m/2 micro-batches through stages r and p-1-r. Equal ranks: the paper's
    # bubble on the mean rank; one dominant rank pair hides its bubble behind the others' slack.
    pair = (x + x[:, ::-1]) / 2
    dual = np.maximum(m * pair.max(axis=1),
                      m * pair.mean(axis=1) + max(p / 2 - 1, 0) * np.maximum(x + b - 3 * w, 0).mean(axis=1))
    ideal = np.select([schedule == _GPIPE, schedule == _INTER, schedule == _ZB, schedule == _DUAL],
                      [gpipe, interleaved, zb, dual], one_f_one_b)
    hops = np.select([schedule == _GPIPE, schedule == _INTER, schedule == _ZB, schedule == _DUAL],
                     [np.full_like(m, 2 * (p - 1)), 2 * (v * p - 1), np.full_like(m, 4 * (p - 1)),
                      (1 - 1 / p) * m + 1.5 * (p - 1)],
                     (2 - 2 / p) * m + 2 * (p - 2))
    return ideal + hops * p2p_s
