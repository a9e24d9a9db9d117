"""Per-rank op orders of the pipeline schedules, as their reference implementations issue them
(pipeline.py's module doc has the sources). An op is (kind, mb, vs, mb2, vs2): vs is the virtual
stage on the micro-batch's path (0..V-1); mb2/vs2 are the backward half of an overlapped 'FB' op
(DualPipe's, and the combined step of Megatron's combined 1F1B)."""

from __future__ import annotations

from collections import deque

from trainplan.tools.perf.pipeline_closed_form import warmup_forwards
from trainplan.tools.core.enums import Schedule

# Op kinds: forward, full backward (B+W), input-grad backward only, weight grad, overlapped F + full B.
_F, _B, _I, _W, _X = range(5)


def _order_gpipe(pp: int, m: int, r: int) -> list[tuple]:
    return [(_F, mb, r, -1, -1) for mb in range(m)] + [(_B, mb, r, -1, -1) for mb in range(m)]


def combined_steps(s: Schedule, pp: int, m: int, vpp: int, r: int) -> int:
    """Combined forward-and-backward steps of rank r under moe_a2a_overlap: its steady state, the
    m x vpp chunks less the warm-up forwards (and as many cool-down backwards) that run alone."""
    return m * vpp - int(warmup_forwards(s is Schedule.interleaved, pp, m, vpp, r, combined=True))


def _order_1f1b(pp: int, m: int, r: int, combined: bool = False) -> list[tuple]:
    warm = int(warmup_forwards(False, pp, m, 1, r, combined))
    ops = [(_F, mb, r, -1, -1) for mb in range(warm)]
    for k in range(m - warm):
        ops += [(_X, warm + k, r, k, r)] if combined else [(_F, warm + k, r, -1, -1), (_B, k, r, -1, -1)]
    ops += [(_B, mb, r, -1, -1) for mb in range(m - warm, m)]
    return ops


def _order_interleaved(pp: int, m: int, v: int, r: int, combined: bool = False) -> list[tuple]:
    """Megatron `forward_backward_pipelining_with_interleaving`: virtual micro-batch k runs chunk
    (k // p) % v (reversed for backward) on micro-batch (k // (p*v))*p + k % p. combined: the steady
    state's forward and backward run as one op (moe_a2a_overlap; combined_1f1b.py)."""
    total = m * v
    warm = int(warmup_forwards(True, pp, m, v, r, combined))

    def op(kind: int, k: int) -> tuple:
        chunk = (k // pp) % v
        if kind == _B:
            chunk = v - 1 - chunk
        return (kind, (k // (pp * v)) * pp + k % pp, chunk * pp + r, -1, -1)

    ops = [op(_F, k) for k in range(warm)]
    for k in range(total - warm):
        forward, backward = op(_F, warm + k), op(_B, k)
        ops += [(_X, *forward[1:3], *backward[1:3])] if combined else [forward, backward]
    ops += [op(_B, k) for k in range(total - warm, total)]
    return ops


def _order_zb_h1(pp: int, m: int, r: int) -> list[tuple]:
    """ZB-H1 (Qi et al. 2024 Fig. 3): 1F1B's order with B split from W; stage r keeps up to r W's
    waiting (so the last stage delays p-1 and stage 0 none) and flushes them at the end."""
    warm = min(pp - r - 1, m)
    ops = [(_F, mb, r, -1, -1) for mb in range(warm)]
    waiting: deque[int] = deque()

    def backward(mb: int) -> None:
        ops.append((_I, mb, r, -1, -1))
        waiting.append(mb)
        if len(waiting) > r:
            ops.append((_W, waiting.popleft(), r, -1, -1))

    for k in range(m - warm):
        ops.append((_F, warm + k, r, -1, -1))
        backward(k)
    for mb in range(m - warm, m):
        backward(mb)
    ops += [(_W, mb, r, -1, -1) for mb in waiting]
    return ops


def _order_dualpipe(pp: int, m: int, r: int) -> list[tuple]:
    """deepseek-ai/DualPipe `DualPipe.step`, steps 1-8, for rank r. A local phase is 0 for the
    rank's earlier stage and 1 for its later one; on the second half of the ranks phase 0 is the
    reverse direction (phase ^= is_in_second_half)."""
    half_ranks, half_m = pp // 2, m // 2
    half_rank = min(r, pp - 1 - r)
    second = int(r >= half_ranks)
    middle = half_rank == half_ranks - 1
    n_f, n_b = [0, 0], [0, 0]  # next micro-batch per direction (0: fed at rank 0, 1: at rank p-1)
    waiting: deque[tuple[int, int]] = deque()
    ops: list[tuple] = []

    def target(phase: int, counter: list[int]) -> tuple[int, int]:
        d = phase ^ second
        mb = counter[d] + d * half_m
        counter[d] += 1
        return mb, (r if d == 0 else pp - 1 - r)

    def fwd(phase: int) -> None:
        ops.append((_F, *target(phase, n_f), -1, -1))

    def bwd(phase: int, zb: bool = False) -> None:
        mb, vs = target(phase, n_b)
        ops.append((_I if zb else _B, mb, vs, -1, -1))
        if zb:
            waiting.append((mb, vs))

    def weight() -> None:
        ops.append((_W, *waiting.popleft(), -1, -1))

    def fwd_bwd(phase0: int, phase1: int) -> None:
        ops.append((_X, *target(phase0, n_f), *target(phase1, n_b)))

    for _ in range((half_ranks - half_rank - 1) * 2):  # step 1: nF0
        fwd(0)
    for _ in range(half_rank + 1):  # step 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(half_ranks - half_rank - 1):  # step 3: nB1W1F1 (zero bubble)
        bwd(1, zb=True)
        weight()
        fwd(1)
    for i in range(half_m - pp + half_rank + 1):  # step 4 (main): nF0B1F1B0
        if i == 0 and middle:  # the reference does not overlap these two on the middle ranks
            fwd(0)
            bwd(1)
        else:
            fwd_bwd(0, 1)
        fwd_bwd(1, 0)
    for _ in range(half_ranks - half_rank - 1):  # step 5: nB1F1B0
        bwd(1)
        fwd_bwd(1, 0)
    step_6, zb = half_rank + 1, False  # step 6: nB1B0, second half with zero bubble
    for i in range(step_6):
        if i == step_6 // 2 and half_rank % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == step_6 // 2 and half_rank % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(half_ranks - half_rank - 1):  # step 7: nWB0
        weight()
        bwd(0, zb=True)
    for _ in range(half_rank + 1):  # step 8: nW
        weight()
    return ops
