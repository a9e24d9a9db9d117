"""A pipeline schedule's shape compiled once into a program the list simulation replays (pipeline.py).

The list simulation runs every rank's op list in order and starts each op as soon as the rank is free and its
inputs have arrived. Each op's times depend only on the dependency graph (its rank's previous op, and the ops
whose outputs it waits for), not on the order in which the ranks are visited:

    start = max(end of the rank's previous op, end of each input + p2p_s if it comes from another rank)
    end   = start + duration

so the graph is walked once per shape (schedule, pp, micro-batches, vpp, combined), the ops are laid out in an
order that runs each after its inputs, and each simulation replays that list in one flat loop: the same
additions and comparisons on the same floats as a walk that parks and wakes ranks, at a fraction of the cost
(the search simulates one shape with many durations). Dependencies (pipeline.py module doc):

    F(mb, s) after F(mb, s-1) + p2p            the activation arrives from the previous stage
    B(mb, s) after B(mb, s+1) + p2p, F(mb, s)  the gradient arrives from the next stage
    W(mb, s) after B(mb, s)                    weight gradient of the same stage (split backward)

An input made on the op's own rank (F before its B, B before its W) only orders the walk: the rank ran it
earlier, so it adds no time. An overlapped op (FB) has the F's input and the B's.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from trainplan.tools.perf.pipeline_orders import _B, _F, _I, _W, _X

__all__ = ["Program", "cached_program", "compile_program", "replay"]

_CACHE: OrderedDict[tuple, Program] = OrderedDict()


@dataclass(frozen=True)
class Program:
    """A shape's ops in an order that runs each after its inputs, as parallel int arrays by op: the rank,
    the two inputs it waits for, each as 2 + 2 x (the op that makes it) + 1 where that op sits on another
    rank (p2p_s is added; replay's ends), or 0 for none, and its duration's index in the seconds list
    (forward, full backward, input-grad backward and weight grad per virtual stage, then the overlapped
    ops' durations from 4V on)."""

    key: tuple                        # the shape: (schedule, pp, micro-batches, vpp, combined)
    rank: array
    dep_a: array
    dep_b: array
    duration: array
    op_id: array                      # the op's index in the ranks' orders laid end to end (for the timeline)
    pairs: tuple[tuple[int, int], ...]   # (vs, vs2) of the overlapped ops timed F + B, by index past 4V
    held_peaks: tuple[float, ...]     # per rank, the most micro-batches whose activations are held at once
    units: int                        # ops / 2: what it holds in the cache


def _walk(orders: tuple[tuple[tuple, ...], ...], V: int, owner: list[int]) -> list[int]:
    """The ops (by index in the orders laid end to end) in the order the list simulation runs them: each rank
    runs its ops while their inputs exist; an op whose input is missing parks the rank, and finishing an op
    wakes the rank that consumes its output. O(number of ops)."""
    pp, last = len(orders), V - 1
    f_done = bytearray(len(owner))   # (mb, vs)'s forward output exists, by mb * V + vs
    b_done = bytearray(len(owner))   # (mb, vs)'s input gradient exists
    base = [0] * pp
    for r in range(1, pp):
        base[r] = base[r - 1] + len(orders[r - 1])
    pos, ran = [0] * pp, []
    awake = list(range(pp))
    while awake:
        r = awake.pop()
        order, i, n = orders[r], pos[r], len(orders[r])
        while i < n:
            kind, mb, vs, mb2, vs2 = order[i]
            k = mb * V + vs
            if kind == _F or kind == _X:
                if vs and not f_done[k - 1]:
                    break
                if kind == _X:
                    k2 = mb2 * V + vs2
                    if not f_done[k2] or (vs2 < last and not b_done[k2 + 1]):
                        break
                    b_done[k2] = 1
                    if vs2:
                        awake.append(owner[k2 - 1])
                f_done[k] = 1
                if vs < last:
                    awake.append(owner[k + 1])
            elif kind == _W:
                if not b_done[k]:
                    break
            else:    # _B or _I
                if not f_done[k] or (vs < last and not b_done[k + 1]):
                    break
                b_done[k] = 1
                if vs:
                    awake.append(owner[k - 1])
            i += 1
        ran.extend(range(base[r] + pos[r], base[r] + i))
        pos[r] = i
    stuck = [r for r in range(pp) if pos[r] < len(orders[r])]
    if stuck:  # a schedule-builder bug, never a user error
        raise RuntimeError(f"pipeline deadlocked on ranks {stuck}")
    return ran


def _ints(values: np.ndarray) -> array:
    return array("i", values.astype(np.int32).tobytes())


def cached_program(key: tuple) -> Program | None:
    """The compiled program of this shape, if it is still kept (the most recently used are)."""
    program = _CACHE.get(key)
    if program is not None:
        _CACHE.move_to_end(key)
    return program


@dataclass(frozen=True)
class Shape:
    """What compile_program reads: each rank's op order, the owner rank of every (micro-batch, virtual stage)
    by mb * V + vs, the virtual stages V, whether the overlapped ops take the combined step's time (index
    4V + vs) rather than their F + B (one entry per (vs, vs2) pair), and the held-activation peaks."""

    orders: tuple[tuple[tuple, ...], ...]
    owner: list[int]
    num_virtual: int
    x_paired: bool
    held_peaks: tuple[float, ...]


def compile_program(key: tuple, shape: Shape, max_cached_units: int) -> Program:
    """The program of a shape (key: schedule, pp, micro-batches, vpp, combined), kept in an LRU of at most
    max_cached_units units (the least recently used dropped first)."""
    orders, owner, V, x_paired = shape.orders, shape.owner, shape.num_virtual, shape.x_paired
    ran = np.asarray(_walk(orders, V, owner), dtype=np.int64)
    flat = np.array([op for order in orders for op in order], dtype=np.int64).reshape(-1, 5)[ran]
    rank = np.repeat(np.arange(len(orders)), [len(order) for order in orders])[ran]
    kind, mb, vs, mb2, vs2 = flat.T
    idx, own = np.arange(len(ran)), np.asarray(owner)
    is_x = kind == _X
    makes_f, makes_b = (kind == _F) | is_x, (kind == _B) | (kind == _I) | is_x
    k = mb * V + vs
    f_op = np.full(len(owner), -1)
    f_op[k[makes_f]] = idx[makes_f]
    b_key, b_vs = np.where(is_x, mb2 * V + vs2, k), np.where(is_x, vs2, vs)
    b_op = np.full(len(owner), -1)
    b_op[b_key[makes_b]] = idx[makes_b]
    has_a = makes_f & (vs > 0)
    prev = np.where(has_a, k - 1, 0)
    has_b = makes_b & (b_vs < V - 1)
    nxt = np.where(has_b, b_key + 1, 0)
    pair_code = np.where(is_x, vs * V + vs2, -1)
    codes, pair_index = np.unique(pair_code[is_x], return_inverse=True)
    x_index = np.zeros(len(ran), dtype=np.int64)
    x_index[is_x] = vs[is_x] if x_paired else pair_index.reshape(-1)
    duration = np.where(kind == _F, vs, np.where(kind == _W, 3 * V + vs,
                                                 np.where(is_x, 4 * V + x_index, kind * V + vs)))
    program = Program(
        key=key, rank=_ints(rank), dep_a=_ints(np.where(has_a, 2 + 2 * f_op[prev] + (own[prev] != rank), 0)),
        dep_b=_ints(np.where(has_b, 2 + 2 * b_op[nxt] + (own[nxt] != rank), 0)),
        duration=_ints(duration), op_id=_ints(ran),
        pairs=() if x_paired else tuple((int(c) // V, int(c) % V) for c in codes),
        held_peaks=shape.held_peaks, units=len(ran) // 2)
    _CACHE[key] = program
    while sum(p.units for p in _CACHE.values()) > max_cached_units and len(_CACHE) > 1:
        _CACHE.popitem(last=False)
    return program


def replay(program: Program, pp: int, seconds: list[float], p2p_s: float,
           starts: list[float] | None) -> tuple[list[float], list[float], list[float]]:
    """Run the program with these durations: each rank's finishing time, its busy seconds (summed in the rank's
    op order) and every op's end, by program order; starts, when given, gets every op's start.
    Each op's end is kept twice, as is and plus p2p_s (ends[2 + 2i + hop], what Program.dep_a/dep_b point
    at), so an input's arrival is one look-up. The loop is written flat (locals, no per-op calls): it runs
    millions of times."""
    ends = [-math.inf] * (2 * len(program.rank) + 2)   # ends[0]: no input
    free, busy = [0.0] * pp, [0.0] * pp
    j = 2
    for r, a, b, d in zip(program.rank, program.dep_a, program.dep_b, program.duration):
        start = free[r]
        ready = ends[a]
        if ready > start:
            start = ready
        ready = ends[b]
        if ready > start:
            start = ready
        if starts is not None:
            starts.append(start)
        took = seconds[d]
        busy[r] += took
        free[r] = ends[j] = end = start + took
        ends[j + 1] = end + p2p_s
        j += 2
    return free, busy, ends[2::2]
