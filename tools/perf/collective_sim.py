"""Numpy runs of the collective algorithms on N simulated ranks, for teaching and for checking the byte counts
of tools/perf/collectives.py: ring reduce-scatter, all-gather and all-reduce, and data-parallel, tensor-parallel
and gradient-accumulation steps of a small MLP (`trainplan simulate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.collectives import bus_bytes_per_rank

MAX_SIMULATED_RANKS = 256  # the simulations loop in Python over N^2 messages


MAX_SIMULATED_MICRO_BATCHES = 1024
"""Micro-batches per rank that `simulate accumulate` runs (each costs two small MLP gradients per rank)."""
MAX_ACCUMULATE_WORK = 2**18
"""ranks^2 x micro-batches that `simulate accumulate` runs: all-reducing after every micro-batch simulates
N^2 ring messages each time (64 ranks x 64 micro-batches: about 4 s)."""


def _ranks(n: int) -> None:
    if n < 1:
        raise InputError(f"ranks={n} must be a positive number")
    if n > MAX_SIMULATED_RANKS:
        raise InputError(f"ranks={n} is too many to simulate: use at most {MAX_SIMULATED_RANKS}")


def ring_reduce_scatter(buffers: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """Ring reduce-scatter over len(buffers) ranks. Returns each rank's working buffer (rank r holds
    the fully summed chunk (r+1) mod N) and the bytes each rank sent.

    Step s: rank r sends chunk (r - s) mod N to rank r+1, which adds it to its own copy.
    """
    n = len(buffers)
    _ranks(n)
    chunks = [np.array_split(b.copy(), n) for b in buffers]
    sent = np.zeros(n, dtype=np.int64)
    for step in range(n - 1):
        messages = [(r, (r - step) % n, chunks[r][(r - step) % n].copy()) for r in range(n)]
        for r, c, payload in messages:  # all sends of a step happen at once
            chunks[(r + 1) % n][c] += payload
            sent[r] += payload.nbytes
    return [np.concatenate(c) for c in chunks], sent


def ring_all_gather(buffers: list[np.ndarray], owned: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
    """Ring all-gather: rank r starts with the valid chunk owned[r] and ends with every chunk.

    Step s: rank r forwards chunk (owned[r] - s) mod N to rank r+1, which overwrites its copy.
    """
    n = len(buffers)
    _ranks(n)
    chunks = [np.array_split(b.copy(), n) for b in buffers]
    sent = np.zeros(n, dtype=np.int64)
    for step in range(n - 1):
        messages = [(r, (owned[r] - step) % n, chunks[r][(owned[r] - step) % n].copy()) for r in range(n)]
        for r, c, payload in messages:
            chunks[(r + 1) % n][c] = payload
            sent[r] += payload.nbytes
    return [np.concatenate(c) for c in chunks], sent


def ring_all_reduce(buffers: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """Ring all-reduce (sum) = reduce-scatter + all-gather. Returns the results and bytes sent per
    rank; for a buffer of S bytes divisible into N chunks each rank sends exactly 2(N-1)/N x S."""
    n = len(buffers)
    reduced, sent_rs = ring_reduce_scatter(buffers)
    gathered, sent_ag = ring_all_gather(reduced, owned=[(r + 1) % n for r in range(n)])
    return gathered, sent_rs + sent_ag


@dataclass
class _AllReduceCounter:
    """Averages gradients across simulated ranks with the ring, counting calls and bytes."""

    calls: int = 0
    bytes_sent_per_rank: int = 0

    def sum(self, per_rank: list[np.ndarray]) -> np.ndarray:
        summed, sent = ring_all_reduce(per_rank)
        self.calls += 1
        self.bytes_sent_per_rank += int(sent.max())
        return summed[0]

    def mean(self, per_rank: list[np.ndarray]) -> np.ndarray:
        return self.sum(per_rank) / len(per_rank)


def _mlp_data(batch: int, seed: int, d_in: int = 6, d_hidden: int = 10, d_out: int = 3):
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((d_in, d_hidden))
    w2 = rng.standard_normal((d_hidden, d_out))
    x = rng.standard_normal((batch, d_in))
    t = rng.standard_normal((batch, d_out))
    return w1, w2, x, t


def mlp_grad(w1: np.ndarray, w2: np.ndarray, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Hand-written gradient of L = 1/(2B) sum ||relu(x W1) W2 - t||^2, flattened [dW1, dW2]."""
    pre = x @ w1
    hidden = np.maximum(pre, 0.0)
    d_y = (hidden @ w2 - t) / len(x)
    d_w2 = hidden.T @ d_y
    d_w1 = x.T @ ((d_y @ w2.T) * (pre > 0))
    return np.concatenate([d_w1.ravel(), d_w2.ravel()])


def simulate_allreduce(ranks: int, elements: int | None = None, seed: int = 0) -> dict:
    """Run a ring all-reduce on N ranks; compare the sum and the bytes sent with the formula."""
    _ranks(ranks)
    elements = elements or 64 * ranks
    rng = np.random.default_rng(seed)
    buffers = [rng.standard_normal(elements) for _ in range(ranks)]
    results, sent = ring_all_reduce(buffers)
    expected = np.sum(buffers, axis=0)
    size_bytes = buffers[0].nbytes
    formula = bus_bytes_per_rank("all_reduce", size_bytes, ranks)
    return {
        "simulation": "allreduce", "ranks": ranks, "size_bytes": size_bytes,
        "max_abs_error": float(max(np.abs(r - expected).max() for r in results)),
        "bytes_sent_per_rank": [int(b) for b in sent],
        "formula_bytes_per_rank": formula,
        "matches_formula": bool(np.all(sent == formula)),
    }


def simulate_dp(ranks: int, batch_per_rank: int = 4, seed: int = 0) -> dict:
    """Data parallel: each rank's gradient on its shard of the batch, averaged by one all-reduce,
    equals the single-device gradient on the whole batch (equal shards)."""
    _ranks(ranks)
    w1, w2, x, t = _mlp_data(ranks * batch_per_rank, seed)
    counter = _AllReduceCounter()
    shards = zip(np.split(x, ranks), np.split(t, ranks))
    averaged = counter.mean([mlp_grad(w1, w2, xs, ts) for xs, ts in shards])
    single = mlp_grad(w1, w2, x, t)
    return {
        "simulation": "dp", "ranks": ranks, "batch": len(x), "num_params": single.size,
        "max_abs_error": float(np.abs(averaged - single).max()),
        "all_reduces": counter.calls, "bytes_sent_per_rank": counter.bytes_sent_per_rank,
    }


def simulate_tp(ranks: int, seed: int = 0, batch: int = 5, hidden: int = 8, ffn_per_rank: int = 4) -> dict:
    """Megatron MLP Z = gelu(X A) B with A split by columns (column-parallel) and B by rows
    (row-parallel). Forward: f is the identity, g all-reduces the partial Z_i = gelu(X A_i) B_i.
    Backward: g is the identity, f all-reduces the partial dX_i. Both equal the full matmuls."""
    _ranks(ranks)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, hidden))
    a = rng.standard_normal((hidden, ffn_per_rank * ranks))
    b = rng.standard_normal((ffn_per_rank * ranks, hidden))
    d_z = rng.standard_normal((batch, hidden))

    def gelu(u):
        return 0.5 * u * (1 + np.tanh(0.7978845608028654 * (u + 0.044715 * u**3)))

    def gelu_grad(u):
        th = np.tanh(0.7978845608028654 * (u + 0.044715 * u**3))
        return 0.5 * (1 + th) + 0.5 * u * (1 - th**2) * 0.7978845608028654 * (1 + 3 * 0.044715 * u**2)

    a_parts, b_parts = np.split(a, ranks, axis=1), np.split(b, ranks, axis=0)
    fwd, bwd = _AllReduceCounter(), _AllReduceCounter()
    pre = [x @ a_i for a_i in a_parts]                               # column-parallel, no communication
    z = fwd.sum([gelu(p) @ b_i for p, b_i in zip(pre, b_parts)])          # g: all-reduce
    d_x = bwd.sum([((d_z @ b_i.T) * gelu_grad(p)) @ a_i.T                # f backward: all-reduce
                   for p, a_i, b_i in zip(pre, a_parts, b_parts)])
    full_pre = x @ a
    z_full = gelu(full_pre) @ b
    d_x_full = ((d_z @ b.T) * gelu_grad(full_pre)) @ a.T
    return {
        "simulation": "tp", "ranks": ranks,
        "max_abs_error_forward": float(np.abs(z - z_full).max()),
        "max_abs_error_grad_input": float(np.abs(d_x - d_x_full).max()),
        "all_reduces_forward": fwd.calls, "all_reduces_backward": bwd.calls,
    }


def simulate_accumulate(ranks: int, micro_batches: int = 4, mbs: int = 2, seed: int = 0) -> dict:
    """Gradient accumulation: K micro-batches per rank, gradients summed locally and all-reduced once,
    equal the gradient of the global batch (ranks x K x mbs); all-reducing after every micro-batch
    gives the same gradient with K times as many all-reduces."""
    _ranks(ranks)
    if micro_batches < 1:
        raise InputError(f"micro_batches={micro_batches} must be a positive number")
    if micro_batches > MAX_SIMULATED_MICRO_BATCHES:
        raise InputError(f"micro_batches={micro_batches} is too many to simulate: use at most "
                         f"{MAX_SIMULATED_MICRO_BATCHES} (the check is the same at any K)")
    if ranks * ranks * micro_batches > MAX_ACCUMULATE_WORK:
        raise InputError(f"ranks^2 x micro_batches = {ranks}^2 x {micro_batches} is over the {MAX_ACCUMULATE_WORK:,} "
                         f"simulated messages run (each micro-batch's all-reduce sends N^2): use at most "
                         f"{max(1, MAX_ACCUMULATE_WORK // (ranks * ranks))} micro-batches on {ranks} ranks")
    w1, w2, x, t = _mlp_data(ranks * micro_batches * mbs, seed)
    rank_x, rank_t = np.split(x, ranks), np.split(t, ranks)
    # each rank's micro-batches, split once: [rank][micro-batch] -> (x, t)
    micro = [list(zip(np.split(xr, micro_batches), np.split(tr, micro_batches))) for xr, tr in zip(rank_x, rank_t)]
    once, every = _AllReduceCounter(), _AllReduceCounter()
    local = [sum(mlp_grad(w1, w2, xm, tm) for xm, tm in rank) / micro_batches for rank in micro]
    accumulated = once.mean(local)
    per_micro = sum(every.mean([mlp_grad(w1, w2, *rank[i]) for rank in micro])
                    for i in range(micro_batches)) / micro_batches
    full = mlp_grad(w1, w2, x, t)
    return {
        "simulation": "accumulate", "ranks": ranks, "micro_batches": micro_batches, "batch": len(x),
        "max_abs_error": float(np.abs(accumulated - full).max()),
        "max_abs_error_without_accumulation": float(np.abs(per_micro - full).max()),
        "all_reduces": once.calls, "all_reduces_without_accumulation": every.calls,
        "bytes_sent_per_rank": once.bytes_sent_per_rank,
        "bytes_sent_per_rank_without_accumulation": every.bytes_sent_per_rank,
    }


SIMULATIONS = {"allreduce": simulate_allreduce, "dp": simulate_dp, "tp": simulate_tp,
               "accumulate": simulate_accumulate}
