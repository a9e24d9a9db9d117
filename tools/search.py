"""`search`: every layout of a job, the valid ones that fit, ranked by an objective; numpy-vectorised.

    search(model, gpu, gpus, gbs=..., [seq, tokens, price, precision, objective, top_k, pins, ...]) -> dict

How (for each GPU count tried; see gpu_counts):
 1. Space. Each knob has a candidate list; a pin makes it the pinned value(s):
      tp    divisors of gpus up to the attention heads, and up to gpus_per_node unless
            allow_cross_node_tp (TP all-gathers on every layer: it lives on NVLink)
      pp    divisors of gpus up to the layers
      cp    divisors of gpus that leave each CP rank at least CP_MIN_TOKENS tokens
      ep    MoE: divisors of the routed experts that divide gpus; dense: 1
      mbs   divisors of gbs up to MAX_MBS
      zero  0-3;  recompute  none, selective, full
      (schedule, vpp)  pp = 1: 1f1b; pp > 1: 1f1b, zb-h1, dualpipe, and interleaved with every
            vpp > 1 that divides the layers per stage. gpipe is tried only when pinned: in this model
            it takes 1f1b's time with m in-flight micro-batches instead of p.
    The space is the product of the lists (built per pp, since vpp's list depends on it).
    ``evaluated`` counts it; evaluated = feasible + sum(rejected).
 2. Validity. numpy masks mirror layout.resolve_config, the single source of truth (the exact
    path below calls it, and tests/test_search.py checks that both accept the same layouts), plus
    the pipeline simulator's own constraints (interleaved: micro-batches divisible by pp, as
    Megatron; dualpipe: an even number of micro-batches >= 2 pp, as DualPipe.step) and two search
    policies: tp inside a node, and CP_MIN_TOKENS. A layout is counted once, under the first rule it
    breaks, in resolve_config's order.
 3. Memory: memory.memory_totals_vectorised (the scalar path's worst-stage total) must be at most
    the GPU's capacity minus headroom_gib, else "does not fit in memory".
 4. Time, vectorised (_vector_times): a stage's per-micro-batch forward, backward and weight-grad
    seconds are linear in its layers, so step.stage_work is run once per unique
    (tp, cp, ep, mbs, recompute, dualpipe) on one dense layer, one MoE layer, the embedding and the
    head, and broadcast over every stage of every layout with numpy. The pipeline uses the closed
    forms of pipeline.bubble_paper_s with the slowest stage X = max(F + B) and the sum over stages:
        gpipe, 1f1b   (m-1) X + sum(F + B)                       [(m + p - 1)(F + B) for equal stages]
        interleaved   m X + (sum(F + B) - X) / v                  [(m + (p-1)/v)(F + B)]
        zb-h1         m X + (p-1) mean(F + B - 2W)                [m(F + B) + (p-1)(F + B - 2W)]
        dualpipe      m max_r (X_r + X_{p-1-r})/2 + (p/2-1) mean(F + 2B - 3W)
    plus the p2p time c times a per-schedule count fitted to the event-driven simulator on equal
    stages (pipeline.simulate: d makespan / d p2p_s): gpipe 2(p-1); 1f1b (2 - 2/p) m + 2(p-2);
    interleaved 2(v p - 1); zb-h1 4(p-1) (3(p-1) +- (p-1) depending on W); dualpipe
    (1 - 1/p) m + 1.5(p-1). Then step.py's data-parallel exchange (step.dp_exchange_s, which takes
    numpy arrays) and optimizer terms (_dp_exchange_and_optimizer).
 5. Deadline (days) and budget (dollars), when given: they need tokens.
 6. Rank by the objective (ties: lower ZeRO stage, then less memory), then re-score the best
    max(3 top_k, RESCORE_MIN) layouts with the exact scalar path (resolve_config +
    estimate.evaluate, which runs the event-driven pipeline simulator) and rank by the exact
    figures. ZeRO twins (the same layout but the ZeRO stage, with the same time, e.g. when there
    is no data parallelism) are collapsed to the lowest stage that fits, so the top K differ.

search_scalar runs the same space through the exact path layout by layout: the brute-force
reference the tests compare against (same feasible set, same winner on small jobs).

Objectives: throughput (most tokens/s), time (fewest days; with a fixed gbs the same order as
throughput, reported in days when tokens are given) and cost (fewest dollars: GPUs x step time x
price; differs from throughput only when several GPU counts are tried, see max_gpus).
"""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass
from enum import Enum

import numpy as np

from . import compute, step
from .catalog import load_gpu, load_model
from .collectives import collective_time_s, group_layout
from .cost import DEFAULT_GOODPUT, SECONDS_PER_DAY, parse_tokens
from .counting import count_params
from .errors import InputError
from .estimate import evaluate
from .layout import model_layers_per_stage, resolve_config
from .memory import PRECISION_CODES, RECOMPUTE_CODES, SCHEDULE_CODES, memory_totals_vectorised
from .specs import ClusterSpec, GPUSpec, ModelSpec, ParallelConfig, Precision, Recompute, Schedule
from .step import ADAM_BYTES_PER_PARAM, stage_work

CP_MIN_TOKENS = 2048
"""Context parallelism only while each CP rank keeps >= 2048 tokens of the sequence. Ring attention
hides its K/V exchange behind the attention of the previous chunk, which shrinks as s/cp; below
~2K tokens per rank the exchange is exposed and CP loses to TP/PP (Megatron-Core's CP guidance
targets long sequences; Llama 3 used CP16 at 128K, i.e. 8K tokens per rank)."""
MAX_MBS = 8
"""Largest micro-batch tried: GEMMs reach their efficiency by T = mbs*seq of a few thousand tokens."""
RESCORE_MIN = 32
"""Layouts re-scored with the exact path: max(3 * top_k, RESCORE_MIN)."""
PARETO_RESCORE = 3
"""Best layouts per GPU count re-scored for the Pareto front."""
CALCULON_LAYOUTS_PER_S = 143.0
"""Calculon's search rate: Turing-530B on 5,128 A100, 8,112 layouts in 57 s (Isaev et al. SC23)."""

_R = {mode: RECOMPUTE_CODES[mode] for mode in Recompute}
_S = {sched: SCHEDULE_CODES[sched] for sched in Schedule}
_GPIPE, _1F1B, _INTER, _ZB, _DUAL = (_S[s] for s in (Schedule.gpipe, Schedule.one_f_one_b, Schedule.interleaved,
                                                    Schedule.zb_h1, Schedule.dualpipe))
_RECOMPUTE_BY_CODE = {code: mode for mode, code in _R.items()}
_SCHEDULE_BY_CODE = {code: sched for sched, code in _S.items()}

# Rejection reasons, in the order the rules are applied (resolve_config's order, then the rest).
R_SPLIT = "invalid split: tp*pp*cp does not divide gpus"
R_HEADS = "invalid split: tp does not divide the attention heads"
R_KV = "invalid split: tp and the key/value heads do not divide one another"
R_NODE = "invalid split: tp crosses a node (allow_cross_node_tp is off)"
R_LAYERS = "invalid split: pp is larger than the layers"
R_EP_DENSE = "invalid split: ep > 1 on a dense model"
R_EP_EXPERTS = "invalid split: ep does not divide the experts"
R_EP_DP = "invalid split: ep does not divide dp*cp"
R_CP_SEQ = "invalid split: seq is not divisible by 2*cp"
R_CP_SHORT = f"invalid split: seq/cp below {CP_MIN_TOKENS} tokens"
R_SP = "invalid split: seq/cp is not divisible by tp"
R_VPP_PP = "invalid schedule: vpp > 1 needs pp > 1"
R_VPP_LAYERS = "invalid schedule: vpp does not divide the layers per stage"
R_VPP_SCHED = "invalid schedule: interleaved needs vpp > 1, and vpp > 1 needs interleaved"
R_DUAL_PP = "invalid schedule: dualpipe needs an even pp"
R_BATCH = "invalid batch: gbs is not divisible by dp*mbs"
R_DUAL_M = "invalid schedule: dualpipe needs an even number of micro-batches >= 2*pp"
R_INTER_M = "invalid schedule: interleaved needs micro-batches divisible by pp"
R_MEMORY = "does not fit in memory"
R_DEADLINE = "misses deadline"
R_BUDGET = "over budget"
REASONS = (R_SPLIT, R_HEADS, R_KV, R_NODE, R_LAYERS, R_EP_DENSE, R_EP_EXPERTS, R_EP_DP, R_CP_SEQ, R_CP_SHORT,
           R_SP, R_VPP_PP, R_VPP_LAYERS, R_VPP_SCHED, R_DUAL_PP, R_BATCH, R_DUAL_M, R_INTER_M, R_MEMORY,
           R_DEADLINE, R_BUDGET)

KNOBS = ("gpus", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "recompute", "schedule")
"""Columns of a layout table (recompute and schedule as memory.py's integer codes)."""


class Objective(str, Enum):
    """What the search ranks by."""

    throughput = "throughput"
    """most tokens per second (shortest step)"""
    cost = "cost"
    """fewest dollars: cost_usd with tokens, else GPUs x step time (GPU-seconds per step)"""
    time = "time"
    """fewest days to train the tokens; without tokens, the shortest step"""


# --- the request ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pins:
    """Pinned values per knob (None: free). recompute and schedule hold integer codes."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    zero: tuple[int, ...] | None = None
    mbs: tuple[int, ...] | None = None
    recompute: tuple[int, ...] | None = None
    schedule: tuple[int, ...] | None = None


@dataclass(frozen=True)
class _Job:
    model: ModelSpec
    gpu: GPUSpec
    gbs: int
    seq: int
    precision: Precision
    tokens: float | None
    price: float
    goodput: float
    headroom_gib: float
    allow_cross_node_tp: bool
    deadline_days: float | None
    budget_usd: float | None
    gpus_per_node: int | None
    intra_node_bw: float | None
    inter_node_bw: float | None
    pins: Pins

    def cluster(self, gpus: int) -> ClusterSpec:
        return ClusterSpec.build(self.gpu, gpus, self.gpus_per_node, self.intra_node_bw, self.inter_node_bw)

    @property
    def node(self) -> int:
        return self.gpus_per_node or self.gpu.gpus_per_node


def _ints(name: str, value, low: int, high: int | None = None) -> tuple[int, ...] | None:
    """A pin: None, one whole number or a list of them, each in [low, high]."""
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple, set, np.ndarray)) else [value]
    if not values:
        raise InputError(f"{name}=[] pins nothing: give a value or leave {name} free")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low or (high is not None and v > high):
            span = f"{low}-{high}" if high is not None else f">= {low}"
            raise InputError(f"{name}={v!r} must be a whole number {span}")
    return tuple(sorted({int(v) for v in values}))


def _codes(name: str, enum: type, value, codes: dict) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple, set)) else [value]
    out = set()
    for v in values:
        try:
            out.add(codes[enum(getattr(v, "value", v))])
        except ValueError:
            options = ", ".join(member.value for member in enum)
            raise InputError(f"{name}='{v}' is not one of: {options}") from None
    return tuple(sorted(out))


def _positive(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not value > 0):
        raise InputError(f"{name}={value} must be a positive number")


# --- the space ------------------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def gpu_counts(gpus: int, max_gpus: int | None, gpus_per_node: int, floor: int = 1) -> list[int]:
    """GPU counts tried, largest first: gpus alone, or with max_gpus the ladder max_gpus, and
    halving from there (whole nodes at or above a node, powers of two below), down to `floor`,
    plus gpus itself."""
    if max_gpus is None:
        return [gpus]
    counts, c = {gpus}, max_gpus
    while c >= max(floor, 1):
        counts.add(c)
        nxt = c // 2
        nxt = nxt - nxt % gpus_per_node if nxt >= gpus_per_node else (1 << (nxt.bit_length() - 1) if nxt else 0)
        if nxt < 1 or nxt >= c:
            break
        c = nxt
    return sorted(counts, reverse=True)


def min_gpus(model: ModelSpec, gpu: GPUSpec) -> int:
    """Fewest GPUs whose memory could hold the model states fully sharded (2 + 4 + 12 B/param,
    ZeRO-3 over every GPU), ignoring activations: the floor of the max_gpus ladder."""
    counts = count_params(model)
    states = (counts.total + counts.mtp) * 18.0
    return max(1, math.ceil(states / (gpu.memory_gib * 2**30)))


def _schedule_options(pp: int, num_layers: int, pins: Pins) -> list[tuple[int, int]]:
    """(schedule code, vpp) pairs tried with this pp."""
    stage_layers = math.ceil(num_layers / pp)
    vpps = [v for v in _divisors(stage_layers) if v > 1] if pp > 1 else []
    if pins.schedule is not None:
        scheds = list(pins.schedule)
    elif pins.vpp is not None:
        scheds = ([_INTER] if any(v > 1 for v in pins.vpp) else []) + \
                 (([_1F1B] if pp == 1 else [_1F1B, _ZB, _DUAL]) if 1 in pins.vpp else [])
    else:
        scheds = [_1F1B] if pp == 1 else [_1F1B, _ZB, _DUAL, _INTER]
    options = []
    for s in scheds:
        if s == _INTER:
            vs = list(pins.vpp) if pins.vpp is not None else (vpps or [2])
            if pins.schedule is None:
                vs = [v for v in vs if v > 1]
        else:
            vs = list(pins.vpp) if pins.vpp is not None and pins.schedule is not None else [1]
        options += [(s, v) for v in vs]
    return options


def enumerate_space(model: ModelSpec, gpus: int, gbs: int, seq: int, gpus_per_node: int,
                    allow_cross_node_tp: bool = False, pins: Pins = Pins()) -> dict[str, np.ndarray]:
    """Every candidate layout on `gpus` GPUs as int arrays keyed by KNOBS (see the module doc)."""
    heads, layers = model.num_attention_heads, model.num_layers
    divs = _divisors(gpus)
    tp_cap = heads if allow_cross_node_tp else min(heads, gpus_per_node)
    lists = {
        "tp": pins.tp or [d for d in divs if d <= tp_cap],
        "cp": pins.cp or [d for d in divs if d == 1 or seq // d >= CP_MIN_TOKENS],
        "ep": pins.ep or ([d for d in _divisors(model.num_experts) if gpus % d == 0] if model.is_moe else [1]),
        "zero": pins.zero or [0, 1, 2, 3],
        "mbs": pins.mbs or [d for d in _divisors(gbs) if d <= MAX_MBS],
        "recompute": pins.recompute or [_R[Recompute.none], _R[Recompute.selective], _R[Recompute.full]],
    }
    blocks = []
    for pp in pins.pp or [d for d in divs if d <= layers]:
        options = np.array(_schedule_options(pp, layers, pins), dtype=np.int64).reshape(-1, 2)
        splits = np.array([(tp, cp) for tp in lists["tp"] for cp in lists["cp"] if gpus % (tp * pp * cp) == 0],
                          dtype=np.int64).reshape(-1, 2)
        if not len(options) or not len(splits):
            continue
        axes = [np.asarray(lists[k], dtype=np.int64) for k in ("ep", "zero", "mbs", "recompute")]
        grid = np.meshgrid(np.arange(len(splits)), *axes, np.arange(len(options)), indexing="ij")
        flat = [g.ravel() for g in grid]
        block = dict(zip(("ep", "zero", "mbs", "recompute"), flat[1:5]))
        block["tp"], block["cp"] = splits[flat[0], 0], splits[flat[0], 1]
        block["schedule"], block["vpp"] = options[flat[5], 0], options[flat[5], 1]
        block["pp"] = np.full(flat[0].size, pp, dtype=np.int64)
        block["gpus"] = np.full(flat[0].size, gpus, dtype=np.int64)
        blocks.append(block)
    if not blocks:
        return {k: np.zeros(0, dtype=np.int64) for k in KNOBS}
    return {k: np.concatenate([b[k] for b in blocks]) for k in KNOBS}


def validity(model: ModelSpec, space: dict[str, np.ndarray], gbs: int, seq: int, gpus_per_node: int,
             allow_cross_node_tp: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reason index into REASONS or -1 when valid, dp, micro-batches) for every layout.

    The rules mirror layout.resolve_config in its order, then the simulator's and the search's."""
    n_gpus, tp, pp, cp, ep = (space[k] for k in ("gpus", "tp", "pp", "cp", "ep"))
    vpp, mbs, sched = space["vpp"], space["mbs"], space["schedule"]
    reason = np.full(tp.size, -1, dtype=np.int64)

    def rule(name: str, bad: np.ndarray) -> None:
        reason[(reason < 0) & bad] = REASONS.index(name)

    mp = tp * pp * cp
    rule(R_SPLIT, n_gpus % mp != 0)
    dp = np.maximum(n_gpus // mp, 1)
    rule(R_HEADS, model.num_attention_heads % tp != 0)
    kv = model.num_kv_heads
    if model.attention_type == "mha":
        rule(R_KV, (kv % tp != 0) & (tp % kv != 0))
    if not allow_cross_node_tp:
        rule(R_NODE, tp > gpus_per_node)
    rule(R_LAYERS, pp > model.num_layers)
    many = ep > 1
    if not model.is_moe:
        rule(R_EP_DENSE, many)
    else:
        rule(R_EP_EXPERTS, many & (model.num_experts % ep != 0))
    rule(R_EP_DP, many & ((dp * cp) % ep != 0))
    rule(R_CP_SEQ, (cp > 1) & (seq % (2 * cp) != 0))
    rule(R_CP_SHORT, (cp > 1) & (seq // cp < CP_MIN_TOKENS))
    rule(R_SP, (tp > 1) & ((seq // cp) % tp != 0))
    stage_layers = -(-model.num_layers // pp)
    rule(R_VPP_PP, (vpp > 1) & (pp == 1))
    rule(R_VPP_LAYERS, (vpp > 1) & (stage_layers % vpp != 0))
    rule(R_VPP_SCHED, (sched == _INTER) != (vpp > 1))
    dual = (sched == _DUAL) & (pp > 1)
    rule(R_DUAL_PP, dual & (pp % 2 != 0))
    rule(R_BATCH, gbs % (dp * mbs) != 0)
    m = np.maximum(gbs // (dp * mbs), 1)
    rule(R_DUAL_M, dual & ((m % 2 != 0) | (m < 2 * pp)))
    rule(R_INTER_M, (sched == _INTER) & (pp > 1) & (m % pp != 0))
    return reason, dp, m


# --- the vectorised time model --------------------------------------------------------------------

_PIECES = ("forward_s", "backward_s", "weight_grad_s", "compute_s", "comm/tp", "comm/cp", "comm/ep")


def _stage_piece(work) -> list[float]:
    return [work.forward_s, work.backward_s, work.weight_grad_s, work.compute_s,
            work.comm_s["tp"], work.comm_s["cp"], work.comm_s["ep"]]


def _work_pieces(model: ModelSpec, cluster: ClusterSpec, job: _Job, key: tuple) -> np.ndarray:
    """(4, len(_PIECES)): one dense layer, one MoE layer, the embedding and the head, each as
    step.stage_work sees it for one micro-batch. A stage is the sum of its pieces."""
    tp, cp, ep, mbs, rec, dual = key
    cfg = ParallelConfig(tp=tp, pp=3, cp=cp, ep=ep, dp=ep, mbs=mbs, seq=job.seq,
                         recompute=_RECOMPUTE_BY_CODE[rec], precision=job.precision,
                         schedule=Schedule.dualpipe if dual else Schedule.one_f_one_b, sequence_parallel=tp > 1)
    groups = group_layout(cfg, cluster.gpus_per_node)
    moe = set(model.moe_layers) if model.is_moe else set()
    dense_id = next((i for i in range(model.num_layers) if i not in moe), None)
    moe_id = next((i for i in range(model.num_layers) if i in moe), None)
    rows = []
    for stage, ids in ((1, [dense_id]), (1, [moe_id]), (0, []), (2, [])):
        if ids and ids[0] is None:
            rows.append([0.0] * len(_PIECES))
        else:
            rows.append(_stage_piece(stage_work(model, cfg, cluster, groups, stage, ids)))
    return np.array(rows)


def _stage_counts(model: ModelSpec, pp: int) -> np.ndarray:
    """(4, pp): dense layers, MoE layers, holds the embedding, holds the head, per stage."""
    counts = model_layers_per_stage(model, pp)
    moe = set(model.moe_layers) if model.is_moe else set()
    out, start = np.zeros((4, pp)), 0
    for s, n in enumerate(counts):
        ids = range(start, start + n)
        out[1, s] = sum(1 for i in ids if i in moe)
        out[0, s] = n - out[1, s]
        start += n
    out[2, 0] = 1.0
    out[3, pp - 1] = 1.0
    return out


def pipeline_makespan(schedule, pp, m, vpp, forward_s, backward_s, weight_grad_s, p2p_s) -> np.ndarray:
    """Closed-form makespan (module doc, step 4) for rows of layouts sharing one pp.

    schedule, m, vpp, p2p_s: shape (n,); forward_s, backward_s, weight_grad_s: shape (n, pp)."""
    p = float(pp)
    f, b, w = forward_s, backward_s, weight_grad_s
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


def _dp_exchange_and_optimizer(model: ModelSpec, cluster: ClusterSpec, job: _Job, key: tuple,
                               stage_params: tuple[np.ndarray, np.ndarray], zero: np.ndarray,
                               forward_s: np.ndarray, backward_s: np.ndarray, m: np.ndarray,
                               mbs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exposed DP seconds, optimizer seconds, p2p seconds) for rows sharing (tp, cp, dp, ep, pp):
    step._dp_exchange_s, step._optimizer_s and step_time's p2p, over numpy rows x stages."""
    tp, cp, dp, ep, pp = key
    cfg = ParallelConfig(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, seq=job.seq, sequence_parallel=tp > 1)
    groups = group_layout(cfg, cluster.gpus_per_node)
    dense, expert = stage_params[0] / tp, stage_params[1] / (tp * ep)
    z = zero[:, None]
    exposed = sum(step.dp_exchange_s(z, params, group, cluster, forward_s, backward_s, m[:, None])
                  for params, group in ((dense, groups["dp_cp"]), (expert, groups["edp"])))
    expert_dp = max(1, dp * cp // ep)
    sharded = dense / np.where(z >= 1, dp * cp, 1) + expert / np.where(z >= 1, expert_dp, 1)
    optimizer = compute.memory_bound_time_s(ADAM_BYTES_PER_PARAM * sharded, cluster.gpu, kernels=4)
    if pp > 1:
        p2p_bytes = 2.0 * mbs * job.seq / cp * model.hidden_size / tp
        p2p = collective_time_s("p2p", p2p_bytes, groups["pp"], cluster)
    else:
        p2p = np.zeros(mbs.size)
    return exposed.max(axis=1), optimizer.max(axis=1), np.asarray(p2p, dtype=float)


def _vector_times(model: ModelSpec, job: _Job, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """step_s and its parts for valid layouts (all on one GPU count), vectorised (module doc, 4)."""
    n = rows["tp"].size
    out = {k: np.zeros(n) for k in ("step_s", "makespan_s", "comm/dp", "optimizer")}
    if not n:
        return out
    cluster = job.cluster(int(rows["gpus"][0]))
    dual = (rows["schedule"] == _DUAL) & (rows["pp"] > 1) & (rows["ep"] > 1) & model.is_moe
    work_keys = np.stack([rows["tp"], rows["cp"], rows["ep"], rows["mbs"], rows["recompute"], dual]).T
    unique_work, work_index = np.unique(work_keys, axis=0, return_inverse=True)
    work_index = work_index.reshape(-1)
    pieces = np.stack([_work_pieces(model, cluster, job, tuple(int(x) for x in key)) for key in unique_work])
    for pp in np.unique(rows["pp"]):
        pp = int(pp)
        idx = np.nonzero(rows["pp"] == pp)[0]
        counts = _stage_counts(model, pp)                      # (4, pp)
        stage = np.einsum("kc,nkj->njc", counts, pieces[work_index[idx]])   # (n, pieces, pp)
        forward_s, backward_s, weight_s = stage[:, 0], stage[:, 1], stage[:, 2]
        params = step.stage_params(model, pp)
        dp_keys = np.stack([rows["tp"][idx], rows["cp"][idx], rows["dp"][idx], rows["ep"][idx]]).T
        unique_dp, dp_index = np.unique(dp_keys, axis=0, return_inverse=True)
        dp_index = dp_index.reshape(-1)
        exposed, optimizer, p2p = np.zeros(idx.size), np.zeros(idx.size), np.zeros(idx.size)
        for j, key in enumerate(unique_dp):
            sub = np.nonzero(dp_index == j)[0]
            rows_sub = idx[sub]
            e, o, c = _dp_exchange_and_optimizer(
                model, cluster, job, (*(int(x) for x in key), pp), params, rows["zero"][rows_sub],
                forward_s[sub], backward_s[sub], rows["m"][rows_sub], rows["mbs"][rows_sub].astype(float))
            exposed[sub], optimizer[sub], p2p[sub] = e, o, c
        makespan = pipeline_makespan(rows["schedule"][idx], pp, rows["m"][idx], rows["vpp"][idx],
                                     forward_s, backward_s, weight_s, p2p)
        out["makespan_s"][idx] = makespan
        out["comm/dp"][idx] = exposed
        out["optimizer"][idx] = optimizer
        out["step_s"][idx] = makespan + exposed + optimizer
    return out


# --- ranking --------------------------------------------------------------------------------------


def _objective_of(objective: Objective, step_s, gpus, days, cost_usd, price, tokens):
    """Smaller is better."""
    if objective is Objective.cost:
        return cost_usd if tokens is not None else gpus * step_s * price
    if objective is Objective.time and tokens is not None:
        return days
    return step_s


def _result_objective(objective: Objective, result: dict, price: float, tokens) -> float:
    t, c = result["time"], result.get("training", {})
    return float(_objective_of(objective, t["step_s"], result["config"]["gpus"], c.get("days"), c.get("cost_usd"),
                               price, tokens))


def _result_key(objective: Objective, result: dict, price: float, tokens) -> tuple:
    """Sort key of an exact result: the objective (12 significant digits, so the model's exact ties
    stay ties), then the lower ZeRO stage (the time model charges ZeRO-2/3's extra traffic only in
    part), then less memory."""
    value = _result_objective(objective, result, price, tokens)
    return (float(f"{value:.12g}"), result["config"]["zero"], result["memory_gib"]["total"])


def label(config: dict) -> str:
    """A short layout name: 'TP8 PP16 DP128 interleaved/v2 zero1 mbs1 selective' (CP and EP
    shown when above 1)."""
    parts = [f"TP{config['tp']}", f"PP{config['pp']}", f"DP{config['dp']}"]
    parts += [f"{k.upper()}{config[k]}" for k in ("cp", "ep") if config[k] > 1]
    schedule = config["schedule"] + (f"/v{config['vpp']}" if config["vpp"] > 1 else "")
    return " ".join(parts + [schedule, f"zero{config['zero']}", f"mbs{config['mbs']}", config["recompute"]])


def explain_runner_up(best: dict, runner: dict, objective: Objective | str = Objective.throughput) -> str:
    """One line on why the runner-up lost, e.g.
    'runner-up TP8 PP8 ...: 6.0% slower: bubble 18.0% vs 9.0%'."""
    objective = Objective(objective)
    b, r = best["time"], runner["time"]
    name = label(runner["config"])
    if runner["config"]["gpus"] != best["config"]["gpus"]:
        name += f" on {runner['config']['gpus']} GPUs"
    if objective is Objective.cost and "training" in best and "training" in runner:
        ratio, what = runner["training"]["cost_usd"] / best["training"]["cost_usd"] - 1, "more expensive"
    elif objective is Objective.cost:
        ratio = (r["step_s"] * runner["config"]["gpus"]) / (b["step_s"] * best["config"]["gpus"]) - 1
        what = "more GPU-time per step"
    elif objective is Objective.time and "training" in best and "training" in runner:
        ratio, what = runner["training"]["days"] / best["training"]["days"] - 1, "longer"
    else:
        ratio, what = r["step_s"] / b["step_s"] - 1, "slower"
    verdict = f"{ratio:.2%} {what}" if ratio < 0.01 else f"{ratio:.1%} {what}"
    if ratio < 1e-9:
        if runner["config"]["zero"] != best["config"]["zero"]:
            return f"runner-up {name}: same time; the tie goes to the lower ZeRO stage"
        return (f"runner-up {name}: same time; more memory ({runner['memory_gib']['total']:.2f} vs "
                f"{best['memory_gib']['total']:.2f} GiB)")
    delta = {key: r["breakdown"].get(key, 0.0) - b["breakdown"].get(key, 0.0)
             for key in set(b["breakdown"]) | set(r["breakdown"])}
    worst = max(delta, key=delta.get)
    if delta[worst] <= 0:   # as fast or faster per step, but on more GPUs (cost across GPU counts)
        return f"runner-up {name}: {verdict}: {runner['config']['gpus']} vs {best['config']['gpus']} GPUs"
    if worst == "bubble":
        detail = f"bubble {r['bubble_fraction']:.1%} vs {b['bubble_fraction']:.1%}"
    else:
        detail = (f"{worst} {r['breakdown'][worst]:.3g} s vs {b['breakdown'].get(worst, 0.0):.3g} s "
                  f"({r['breakdown'][worst] / r['step_s']:.1%} vs {b['breakdown'].get(worst, 0.0) / b['step_s']:.1%} "
                  f"of the step)")
    return f"runner-up {name}: {verdict}: {detail}"


def _pareto_front(points: list[dict]) -> list[dict]:
    """Points no other point beats on both days and cost_usd, by days."""
    front = []
    for p in points:
        dominated = any(q is not p and q["days"] <= p["days"] and q["cost_usd"] <= p["cost_usd"]
                        and (q["days"] < p["days"] or q["cost_usd"] < p["cost_usd"]) for q in points)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: p["days"])


# --- the search -----------------------------------------------------------------------------------


def _row(table: dict[str, np.ndarray], i: int) -> dict:
    return {k: int(v[i]) for k, v in table.items() if k in KNOBS}


def exact(job: _Job, row: dict) -> dict:
    """The scalar path for one layout: resolve_config (raises InputError if invalid) + evaluate."""
    cfg = resolve_config(job.model, row["gpus"], tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row["ep"],
                         vpp=row["vpp"], zero=row["zero"], mbs=row["mbs"], gbs=job.gbs, seq=job.seq,
                         recompute=_RECOMPUTE_BY_CODE[row["recompute"]],
                         schedule=_SCHEDULE_BY_CODE[row["schedule"]], precision=job.precision,
                         fp8_supported=job.gpu.fp8_tflops is not None)
    return evaluate(job.model, job.cluster(row["gpus"]), cfg, tokens=job.tokens, price=job.price,
                    goodput=job.goodput, headroom_gib=job.headroom_gib)


def _evaluate_count(job: _Job, gpus: int, objective: Objective) -> dict:
    """The vectorised pass on one GPU count: rejection counts and the feasible rows, scored."""
    model = job.model
    space = enumerate_space(model, gpus, job.gbs, job.seq, job.node, job.allow_cross_node_tp, job.pins)
    reason, dp, m = validity(model, space, job.gbs, job.seq, job.node, job.allow_cross_node_tp)
    valid = np.nonzero(reason < 0)[0]
    rows = {k: v[valid] for k, v in space.items()}
    rows["dp"], rows["m"] = dp[valid], m[valid]
    memory = memory_totals_vectorised(model, job.gpu, {
        "tp": rows["tp"], "pp": rows["pp"], "cp": rows["cp"], "ep": rows["ep"], "dp": rows["dp"],
        "vpp": rows["vpp"], "zero": rows["zero"], "mbs": rows["mbs"], "num_microbatches": rows["m"],
        "seq": np.full(valid.size, job.seq), "recompute": rows["recompute"], "schedule": rows["schedule"],
        "precision": np.full(valid.size, PRECISION_CODES[job.precision]),
        "sequence_parallel": (rows["tp"] > 1).astype(float),
    }) if valid.size else {"total": np.zeros(0)}
    fits = memory["total"] <= job.gpu.memory_gib - job.headroom_gib
    reason[valid[~fits]] = REASONS.index(R_MEMORY)
    keep = np.nonzero(fits)[0]
    rows = {k: v[keep] for k, v in rows.items()}
    rows["memory_gib"] = memory["total"][keep]
    times = _vector_times(model, job, rows)
    step_s = times["step_s"]
    tokens_per_step = job.gbs * job.seq
    if job.tokens is not None:
        steps = math.ceil(job.tokens / tokens_per_step)
        days = steps * step_s / job.goodput / SECONDS_PER_DAY
        cost = gpus * steps * step_s / job.goodput / 3600 * job.price
    else:
        days = cost = None
    ok = np.ones(keep.size, dtype=bool)
    if job.deadline_days is not None:
        late = days > job.deadline_days
        reason[valid[keep[late]]] = REASONS.index(R_DEADLINE)
        ok &= ~late
    if job.budget_usd is not None:
        over = ok & (cost > job.budget_usd)
        reason[valid[keep[over]]] = REASONS.index(R_BUDGET)
        ok &= ~over
    score = _objective_of(objective, step_s, gpus, days, cost, job.price, job.tokens)
    good = np.nonzero(ok)[0]
    rows = {k: v[good] for k, v in rows.items()}
    rows["score"] = np.asarray(score, dtype=float)[good] if good.size else np.zeros(0)
    rows["step_s"] = step_s[good]
    return {"space": space, "reason": reason, "rows": rows}


def _significant(x: np.ndarray, digits: int = 12) -> np.ndarray:
    """x rounded to `digits` significant digits, so the model's exact ties compare equal."""
    x = np.asarray(x, dtype=float)
    scale = 10.0 ** (digits - 1 - np.floor(np.log10(np.maximum(np.abs(x), 1e-300))))
    return np.round(x * scale) / scale


_TWIN_KNOBS = ("gpus", "tp", "pp", "cp", "ep", "vpp", "mbs", "recompute", "schedule")
"""A layout's knobs but the ZeRO stage: ZeRO twins with the same time are collapsed to the lowest stage."""


def _best_rows(rows: dict[str, np.ndarray], limit: int) -> list[int]:
    """Indices of the best `limit` rows, ZeRO twins of equal score collapsed; a tie keeps the lower
    ZeRO stage, then the smaller memory, as the final ranking does."""
    if not rows["score"].size:
        return []
    score = _significant(rows["score"])
    order = np.lexsort((rows["memory_gib"], rows["zero"], score))
    chosen, seen = [], set()
    for i in order:
        key = (*(int(rows[k][i]) for k in _TWIN_KNOBS), float(score[i]))
        if key not in seen:
            seen.add(key)
            chosen.append(int(i))
            if len(chosen) >= limit:
                break
    return chosen


def _collapse_twins(ranked: list[dict], objective: Objective, price: float, tokens) -> list[dict]:
    """Drop a result whose ZeRO twin (same layout but zero, same objective) ranks above it."""
    seen, out = set(), []
    for result in ranked:
        config = result["config"]
        key = (*(config[k] for k in _TWIN_KNOBS),
               _result_key(objective, result, price, tokens)[0])
        if key not in seen:
            seen.add(key)
            out.append(result)
    return out


def prepare(model: str, gpu: str, gpus: int, *, gbs: int, seq: int | None = None,
            tokens: str | float | None = None, price: float | None = None, precision: str = "bf16",
            objective: str = "throughput", top_k: int = 5, tp=None, pp=None, cp=None, ep=None, vpp=None,
            zero=None, mbs=None, recompute=None, schedule=None, max_gpus: int | None = None,
            deadline_days: float | None = None, budget_usd: float | None = None, headroom_gib: float = 0.0,
            allow_cross_node_tp: bool = False, pareto: bool = False, goodput: float | None = None,
            gpus_per_node: int | None = None, intra_node_bw: float | None = None,
            inter_node_bw: float | None = None) -> tuple[_Job, Objective, list[int]]:
    """Check a search request (InputError on bad input) -> (job, objective, GPU counts to try)."""
    model_spec, gpu_spec = load_model(model), load_gpu(gpu)
    for name, value in (("gpus", gpus), ("gbs", gbs), ("top_k", top_k), ("max_gpus", max_gpus), ("seq", seq),
                        ("gpus_per_node", gpus_per_node)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0):
            raise InputError(f"{name}={value!r} must be a positive whole number")
    for name, value in (("price", price), ("deadline_days", deadline_days), ("budget_usd", budget_usd),
                        ("intra_node_bw", intra_node_bw), ("inter_node_bw", inter_node_bw)):
        _positive(name, value)
    if headroom_gib is None or headroom_gib < 0:
        raise InputError(f"headroom_gib={headroom_gib} must not be negative")
    if goodput is not None and not 0 < goodput <= 1:
        raise InputError(f"goodput={goodput} must be in (0, 1]: e.g. 0.9 for 90% effective training time")
    if max_gpus is not None and max_gpus < gpus:
        raise InputError(f"max_gpus={max_gpus} is below gpus={gpus}: max_gpus is the most GPUs to try")
    try:
        objective_enum = Objective(getattr(objective, "value", objective))
    except ValueError:
        raise InputError(f"objective='{objective}' is not one of: throughput, cost, time") from None
    try:
        precision_enum = Precision(getattr(precision, "value", precision))
    except ValueError:
        raise InputError(f"precision='{precision}' is not one of: bf16, fp8") from None
    gpu_spec.peak_tflops(precision_enum)    # InputError when the GPU has no FP8
    tokens_value = parse_tokens(tokens)
    for name, value in (("deadline_days", deadline_days), ("budget_usd", budget_usd), ("pareto", pareto or None)):
        if value is not None and tokens_value is None:
            raise InputError(f"{name} needs the training tokens: pass tokens (e.g. 15.6T)")
    pins = Pins(
        tp=_ints("tp", tp, 1), pp=_ints("pp", pp, 1), cp=_ints("cp", cp, 1), ep=_ints("ep", ep, 1),
        vpp=_ints("vpp", vpp, 1), zero=_ints("zero", zero, 0, 3), mbs=_ints("mbs", mbs, 1),
        recompute=_codes("recompute", Recompute, recompute, _R), schedule=_codes("schedule", Schedule, schedule, _S),
    )
    job = _Job(model=model_spec, gpu=gpu_spec, gbs=int(gbs), seq=int(seq or model_spec.max_seq_len),
               precision=precision_enum, tokens=tokens_value, price=gpu_spec.price if price is None else price,
               goodput=DEFAULT_GOODPUT if goodput is None else goodput, headroom_gib=float(headroom_gib),
               allow_cross_node_tp=allow_cross_node_tp, deadline_days=deadline_days, budget_usd=budget_usd,
               gpus_per_node=gpus_per_node, intra_node_bw=intra_node_bw, inter_node_bw=inter_node_bw, pins=pins)
    return job, objective_enum, gpu_counts(int(gpus), max_gpus, job.node, min_gpus(model_spec, gpu_spec))


def _job_dict(job: _Job, gpus: int, max_gpus: int | None, counts: list[int], top_k: int) -> dict:
    return {"model": job.model.name, "gpu": job.gpu.name, "gpus": int(gpus), "max_gpus": max_gpus,
            "gpu_counts": counts, "gbs": job.gbs, "seq": job.seq, "tokens": job.tokens, "price": job.price,
            "precision": job.precision.value, "goodput": job.goodput, "top_k": top_k, "pins": _pins_dict(job.pins),
            "deadline_days": job.deadline_days, "budget_usd": job.budget_usd, "headroom_gib": job.headroom_gib,
            "allow_cross_node_tp": job.allow_cross_node_tp, "gpus_per_node": job.node}


def _exact_failure(job: _Job, result: dict) -> str | None:
    """Why an exactly scored layout is out: memory, deadline or budget; None when it is in."""
    if not result["fits"]:
        return R_MEMORY
    if job.deadline_days is not None and result["training"]["days"] > job.deadline_days:
        return R_DEADLINE
    if job.budget_usd is not None and result["training"]["cost_usd"] > job.budget_usd:
        return R_BUDGET
    return None


def _finish(job: _Job, objective: Objective, out: dict, scored: list[dict], top_k: int, pareto: bool,
            start: float) -> dict:
    """Rank the exactly scored layouts and add candidates, notes, the front and the timing."""
    ranked = sorted(scored, key=lambda r: _result_key(objective, r, job.price, job.tokens))
    candidates = _collapse_twins(ranked, objective, job.price, job.tokens)[:top_k]
    out["candidates"] = candidates
    out["rejected"] = dict(sorted(out["rejected"].items(), key=lambda kv: -kv[1]))
    notes = []
    if len(candidates) >= 2:
        notes.append(explain_runner_up(candidates[0], candidates[1], objective))
    if not candidates:
        notes.append(no_feasible_hint(out["rejected"]))
    if pareto:
        points: dict[int, dict] = {}
        for result in ranked:
            n = result["config"]["gpus"]
            if n not in points or result["time"]["step_s"] < points[n]["time"]["step_s"]:
                points[n] = result
        out["pareto"] = _pareto_front([
            {"gpus": n, "days": r["training"]["days"], "cost_usd": r["training"]["cost_usd"],
             "gpu_hours": r["training"]["gpu_hours"], "tokens_per_s": r["time"]["tokens_per_s"],
             "config": r["config"]} for n, r in points.items()])
    out["notes"] = notes
    out["wall_s"] = _time.perf_counter() - start
    out["layouts_per_s"] = out["evaluated"] / out["wall_s"] if out["wall_s"] > 0 else float("inf")
    return out


def search(model: str, gpu: str, gpus: int, *, gbs: int, seq: int | None = None, tokens: str | float | None = None,
           price: float | None = None, precision: str = "bf16", objective: str = "throughput", top_k: int = 5,
           tp=None, pp=None, cp=None, ep=None, vpp=None, zero=None, mbs=None, recompute=None, schedule=None,
           max_gpus: int | None = None, deadline_days: float | None = None, budget_usd: float | None = None,
           headroom_gib: float = 0.0, allow_cross_node_tp: bool = False, pareto: bool = False,
           goodput: float | None = None, gpus_per_node: int | None = None, intra_node_bw: float | None = None,
           inter_node_bw: float | None = None) -> dict:
    """The best layouts for a job, best first; a pin (tp=8, schedule='1f1b', or a list of values)
    fixes a knob, None leaves it free. See the module docstring for the space, rules and time model.

    Returns {job, objective, candidates (estimate result objects, best first, at most top_k),
    evaluated, feasible, rejected {reason: count}, notes, wall_s, layouts_per_s[, pareto]}.
    """
    start = _time.perf_counter()
    job, objective_enum, counts = prepare(
        model, gpu, gpus, gbs=gbs, seq=seq, tokens=tokens, price=price, precision=precision, objective=objective,
        top_k=top_k, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, zero=zero, mbs=mbs, recompute=recompute,
        schedule=schedule, max_gpus=max_gpus, deadline_days=deadline_days, budget_usd=budget_usd,
        headroom_gib=headroom_gib, allow_cross_node_tp=allow_cross_node_tp, pareto=pareto, goodput=goodput,
        gpus_per_node=gpus_per_node, intra_node_bw=intra_node_bw, inter_node_bw=inter_node_bw)

    rejected: dict[str, int] = {}
    evaluated = 0
    per_count = []
    for n in counts:
        result = _evaluate_count(job, n, objective_enum)
        evaluated += result["reason"].size
        for code, num in zip(*np.unique(result["reason"][result["reason"] >= 0], return_counts=True)):
            rejected[REASONS[code]] = rejected.get(REASONS[code], 0) + int(num)
        per_count.append(result["rows"])
    if not evaluated:
        _no_split(job, counts)
    rows = {k: np.concatenate([r[k] for r in per_count]) for k in per_count[0]}
    feasible = int(rows["score"].size)

    # Exact re-score of the best distinct layouts (and, for the front, the best few per GPU count).
    chosen = _best_rows(rows, max(3 * top_k, RESCORE_MIN))
    if pareto:
        offset = 0
        for r in per_count:
            chosen += [offset + i for i in _best_rows(r, PARETO_RESCORE)]
            offset += r["score"].size
    scored = []
    for i in dict.fromkeys(chosen):
        result = exact(job, _row(rows, i))
        failure = _exact_failure(job, result)
        if failure:   # the vectorised model let it through; the exact path has the last word
            feasible -= 1
            rejected[failure] = rejected.get(failure, 0) + 1
        else:
            scored.append(result)
    out = {"job": _job_dict(job, gpus, max_gpus, counts, top_k), "objective": objective_enum.value,
           "candidates": [], "evaluated": int(evaluated), "feasible": feasible, "rejected": rejected}
    return _finish(job, objective_enum, out, scored, top_k, pareto, start)


R_SCALAR_INVALID = "invalid layout (resolve_config or the pipeline simulator)"
"""search_scalar's one key for every layout the scalar path refuses with an InputError."""


def search_scalar(model: str, gpu: str, gpus: int, **kwargs) -> dict:
    """The brute-force reference: every layout of the same space through the exact scalar path
    (resolve_config + estimate.evaluate with the event-driven simulator), ranked the same way.
    Same arguments and result shape as search; slow (tens of layouts per second); for tests and
    benchmarks. Invalid layouts count under R_SCALAR_INVALID, search's two policies under theirs."""
    start = _time.perf_counter()
    top_k, pareto = kwargs.get("top_k", 5), kwargs.get("pareto", False)
    job, objective_enum, counts = prepare(model, gpu, gpus, **kwargs)
    rejected: dict[str, int] = {}
    evaluated, scored = 0, []
    for n in counts:
        space = enumerate_space(job.model, n, job.gbs, job.seq, job.node, job.allow_cross_node_tp, job.pins)
        for i in range(space["tp"].size):
            evaluated += 1
            row = _row(space, i)
            reason = scalar_policy_reason(job, row)
            if reason is None:
                try:
                    result = exact(job, row)
                    reason = _exact_failure(job, result)
                except InputError:
                    reason = R_SCALAR_INVALID
            if reason:
                rejected[reason] = rejected.get(reason, 0) + 1
            else:
                scored.append(result)
    if not evaluated:
        _no_split(job, counts)
    out = {"job": _job_dict(job, gpus, kwargs.get("max_gpus"), counts, top_k), "objective": objective_enum.value,
           "candidates": [], "evaluated": evaluated, "feasible": len(scored), "rejected": rejected}
    return _finish(job, objective_enum, out, scored, top_k, pareto, start)


def scalar_policy_reason(job: _Job, row: dict) -> str | None:
    """The search's own rules, which resolve_config does not hold: tp inside a node, CP_MIN_TOKENS."""
    if row["tp"] > job.node and not job.allow_cross_node_tp:
        return R_NODE
    if row["cp"] > 1 and job.seq // row["cp"] < CP_MIN_TOKENS:
        return R_CP_SHORT
    return None


def _no_split(job: _Job, counts: list[int]) -> None:
    pinned = ", ".join(f"{k}={v}" for k, v in _pins_dict(job.pins).items() if k in ("tp", "pp", "cp"))
    raise InputError(f"no split {pinned} divides gpus={', '.join(map(str, counts))}: "
                     f"choose tp, pp and cp whose product divides the GPU count")


def _pins_dict(pins: Pins) -> dict:
    """Pinned knobs only, each as its value (or list of values), in the DESIGN.md vocabulary."""
    out = {}
    for name, values in vars(pins).items():
        if values is None:
            continue
        if name == "recompute":
            values = [_RECOMPUTE_BY_CODE[c].value for c in values]
        elif name == "schedule":
            values = [_SCHEDULE_BY_CODE[c].value for c in values]
        out[name] = values[0] if len(values) == 1 else list(values)
    return out


def no_feasible_hint(rejected: dict[str, int]) -> str:
    """What to change when nothing survives, from the biggest rejection reason."""
    if not rejected:
        return "no layout to try: check the pins"
    top = max(rejected, key=rejected.get)
    if top == R_MEMORY:
        hint = "try more GPUs (max_gpus), recompute=full, zero=3, a larger GPU, or a shorter seq"
    elif top == R_DEADLINE:
        hint = "try more GPUs (max_gpus), a later deadline, or fewer tokens"
    elif top == R_BUDGET:
        hint = "try a larger budget, a cheaper GPU or price, or fewer tokens"
    elif top == R_BATCH:
        hint = "try a gbs divisible by more data-parallel sizes (a power of two), or other GPU counts"
    else:
        hint = "loosen the pins, or change gpus so the sizes divide"
    return f"no feasible layout (most rejected: {top}, {rejected[top]}): {hint}"
