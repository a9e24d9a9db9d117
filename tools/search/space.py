"""The layout search's space: the job it searches for, the candidate layouts as numpy tables, and
which of them are valid (validity.RULES, the same table layout.resolve_config applies).

Space (for each GPU count tried; see gpu_counts). Each knob has a candidate list; a pin makes it
the pinned value(s):
    tp    divisors of gpus up to the attention heads, and up to gpus_per_node unless
          allow_cross_node_tp (TP all-gathers on every layer: it lives on NVLink)
    pp    divisors of gpus up to the layers
    cp    divisors of gpus that leave each CP rank at least CP_MIN_TOKENS tokens
    ep    MoE: divisors of the routed experts that divide gpus; dense: 1
    mbs   divisors of gbs up to MAX_MBS
    zero  0-3
    dp_shard  dp (full sharding); with zero 3 and a data-parallel group wider than a node, also the
          shard group of one node, gpus_per_node/(tp*cp) ranks (hybrid sharding, HSDP: node_dp_shard)
    recompute  SearchJob.recompute_options, (recompute code, module mask) pairs: the least recompute
          that fits (the ladder search_recipes.recompute_choices builds: none, then selective with
          ever more modules; the row is resolved when memory is scored), selective with Megatron's
          default set (core_attn), and full. The mask is the `modules` column (recompute.MODULE_BITS;
          0 unless selective).
    (schedule, vpp)  pp = 1: 1f1b; pp > 1: 1f1b, zb-h1, dualpipe, and interleaved with every
          vpp > 1 that divides the layers per stage. gpipe is tried only when pinned: in this model
          it takes 1f1b's time with m in-flight micro-batches instead of p.
The space is the product of the lists (built per pp, since vpp's list depends on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trainplan.tools.config.codes import RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.config.contract import Layout
from trainplan.tools.config.fields import knob_names
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.config.plan_defaults import EVIDENCE_MARGIN
from trainplan.tools.hardware.specs import ClusterSpec, GPUSpec, ModelSpec
from trainplan.tools.core.enums import Precision, Recompute, Schedule
from trainplan.tools.perf.recompute import DEFAULT_MASK
from trainplan.tools.perf.state_bytes import MODEL_STATE_BYTES_PER_PARAM
from trainplan.tools.config.validity import CP_MIN_TOKENS, REASONS as RULE_REASONS, Knobs, Policies, first_broken

MAX_MBS = 8
"""Largest micro-batch tried: GEMMs reach their efficiency by T = mbs*seq of a few thousand tokens."""

KNOBS = ("gpus", "tp", "pp", "cp", "ep", "vpp", "zero", "dp_shard", "mbs", "recompute", "modules", "schedule")
"""Columns of a layout table (recompute and schedule as codes.py's integer codes, modules as a
recompute.MODULE_BITS mask, 0 unless recompute is selective)."""
STORAGE_KNOBS = knob_names(Layout, stored=True)
"""Memory-only Layout knobs the search may set per layout (search_recipes.storage_variants): columns
a scored table carries beside KNOBS."""

_R = {mode: RECOMPUTE_CODES[mode] for mode in Recompute}
_S = {sched: SCHEDULE_CODES[sched] for sched in Schedule}
_1F1B, _INTER, _ZB, _DUAL = (_S[s] for s in (Schedule.one_f_one_b, Schedule.interleaved, Schedule.zb_h1,
                                             Schedule.dualpipe))



def fixed_knobs(layout: type[Layout] = Layout) -> tuple[str, ...]:
    """The Layout knobs a search takes as given (not searched), less those it takes once for the job (Knob.job_wide)."""
    return knob_names(layout, searched=False, job_wide=False)


FIXED_KNOBS = fixed_knobs()
"""The Layout knobs a search does not vary beyond gbs, seq and precision (attention, sequence
parallelism, offload, recompute modules, ...): every one the contract defines, each applied to every
layout the same way on both paths (search_score.fixed_knobs)."""

# Rejection reasons: validity's rules in their order, then the search's own filters.
R_MEMORY = "does not fit in memory"
R_DEADLINE = "misses deadline"
R_BUDGET = "over budget"
R_ENGINE = "the engine cannot run it"
REASONS = (*RULE_REASONS, R_ENGINE, R_MEMORY, R_DEADLINE, R_BUDGET)


@dataclass(frozen=True)
class Pins:
    """Pinned values per knob (None: free). recompute and schedule hold integer codes."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    zero: tuple[int, ...] | None = None
    dp_shard: tuple[int, ...] | None = None
    mbs: tuple[int, ...] | None = None
    recompute: tuple[int, ...] | None = None
    schedule: tuple[int, ...] | None = None


@dataclass(frozen=True)
class SearchJob:
    """A checked search request (search.prepare builds it)."""

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
    engine: str | None = None
    """keep only layouts this engine runs (export.support), None: any"""
    evidence_margin: float = EVIDENCE_MARGIN
    """how much better a layout outside the evals' evidence must be to lead (search_choice.prefer_evidence)"""
    fixed: dict = field(default_factory=dict)
    """the Layout knobs the search takes as given (FIXED_KNOBS), resolved; absent: the Layout default"""
    chosen: tuple[str, ...] = ()
    """the contract's SEARCH_CHOSEN_KNOBS the request left null: the search chooses them per layout"""
    recompute_options: tuple[tuple[int, int], ...] | None = None
    """(recompute code, module mask) of each layout the space enumerates; None: each pinned (or
    every) recompute mode, selective with Megatron's default set"""
    recompute_ladder: tuple[tuple[int, int], ...] = ()
    """(recompute code, module mask) a row enumerated as the ladder's first step climbs until it fits
    (search_recipes.recompute_choices); () or one step: no climbing"""
    storage_variants: tuple[tuple[tuple[str, bool], ...], ...] = ((),)
    """the STORAGE_KNOBS settings tried in order, the first that fits kept (search_recipes.storage_variants);
    ((),): the fixed values only"""

    def __getattr__(self, name: str):
        """A fixed knob by name (job.attention, job.bf16_grads, ...)."""
        if name in FIXED_KNOBS:
            return self.fixed[name] if name in self.fixed else Layout.model_fields[name].default
        raise AttributeError(name)

    def cluster(self, gpus: int) -> ClusterSpec:
        return ClusterSpec.build(self.gpu, gpus, gpus_per_node=self.gpus_per_node, intra_node_bw=self.intra_node_bw,
                                 inter_node_bw=self.inter_node_bw)

    @property
    def node(self) -> int:
        return self.gpus_per_node or self.gpu.gpus_per_node

    @property
    def policies(self) -> Policies:
        return Policies(gpus_per_node=self.node, allow_cross_node_tp=self.allow_cross_node_tp)


def divisors(n: int) -> list[int]:
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


def min_gpus(model: ModelSpec, gpu: GPUSpec, bytes_per_param: float = MODEL_STATE_BYTES_PER_PARAM) -> int:
    """Fewest GPUs whose memory could hold the model states fully sharded (full training: 2 + 4 + 12
    B/param; a LoRA/QLoRA run passes its frozen base's bytes, finetune.frozen_bytes_per_param),
    ZeRO-3 over every GPU, ignoring activations: the floor of the max_gpus ladder."""
    counts = count_params(model)
    states = (counts.total + counts.mtp) * bytes_per_param
    return max(1, math.ceil(states / (gpu.memory_gib * 2**30)))


def _schedule_options(pp: int, num_layers: int, pins: Pins) -> list[tuple[int, int]]:
    """(schedule code, vpp) pairs tried with this pp."""
    stage_layers = math.ceil(num_layers / pp)
    vpps = [v for v in divisors(stage_layers) if v > 1] if pp > 1 else []
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


def node_dp_shard(tp, cp, dp, gpus_per_node: int):
    """The hybrid-sharding shard size whose ZeRO shard group (dp_shard*cp ranks of tp) fills one node,
    gpus_per_node/(tp*cp), where it is a proper split of dp into at least 2 ranks per shard and 2
    replicas; 0 where there is none (numpy-friendly). The IBM/PyTorch FSDP runs shard each 7B and 13B
    model inside a node this way (fms-fsdp docs/configurations.md: "HSDP will only shard your model
    across devices within the same node"), as PyTorch FSDP's HYBRID_SHARD does by default."""
    tp, cp, dp = (np.asarray(x) for x in (tp, cp, dp))
    ranks = tp * cp
    shard = np.where(gpus_per_node % ranks == 0, gpus_per_node // ranks, 0)
    ok = (shard >= 2) & (shard < dp) & (dp % np.maximum(shard, 1) == 0)
    return np.where(ok, shard, 0)


def enumerate_space(model: ModelSpec, gpus: int, gbs: int, seq: int, gpus_per_node: int,
                    allow_cross_node_tp: bool = False, pins: Pins = Pins(),
                    recompute_options: tuple[tuple[int, int], ...] | None = None) -> dict[str, np.ndarray]:
    """Every candidate layout on `gpus` GPUs as int arrays keyed by KNOBS (see the module doc);
    recompute_options: the (recompute code, module mask) pairs (SearchJob.recompute_options)."""
    heads, layers = model.num_attention_heads, model.num_layers
    divs = divisors(gpus)
    tp_cap = heads if allow_cross_node_tp else min(heads, gpus_per_node)
    lists = {
        "tp": pins.tp or [d for d in divs if d <= tp_cap],
        "cp": pins.cp or [d for d in divs if d == 1 or seq // d >= CP_MIN_TOKENS],
        "ep": pins.ep or ([d for d in divisors(model.num_experts) if gpus % d == 0] if model.is_moe else [1]),
        "zero": pins.zero or [0, 1, 2, 3],
        "mbs": pins.mbs or [d for d in divisors(gbs) if d <= MAX_MBS],
        "recompute": pins.recompute or [_R[Recompute.none], _R[Recompute.selective], _R[Recompute.full]],
    }
    recomputes = np.array(recompute_options if recompute_options is not None else
                          [(code, DEFAULT_MASK if code == _R[Recompute.selective] else 0) for code in lists["recompute"]],
                          dtype=np.int64).reshape(-1, 2)
    blocks = []
    for pp in pins.pp or [d for d in divs if d <= layers]:
        options = np.array(_schedule_options(pp, layers, pins), dtype=np.int64).reshape(-1, 2)
        splits = np.array([(tp, cp) for tp in lists["tp"] for cp in lists["cp"] if gpus % (tp * pp * cp) == 0],
                          dtype=np.int64).reshape(-1, 2)
        if not len(options) or not len(splits):
            continue
        axes = [np.asarray(lists[k], dtype=np.int64) for k in ("ep", "zero", "mbs")]
        grid = np.meshgrid(np.arange(len(splits)), *axes, np.arange(len(recomputes)), np.arange(len(options)),
                           indexing="ij")
        flat = [g.ravel() for g in grid]
        block = dict(zip(("ep", "zero", "mbs"), flat[1:4]))
        block["recompute"], block["modules"] = recomputes[flat[4], 0], recomputes[flat[4], 1]
        block["tp"], block["cp"] = splits[flat[0], 0], splits[flat[0], 1]
        block["schedule"], block["vpp"] = options[flat[5], 0], options[flat[5], 1]
        block["pp"] = np.full(flat[0].size, pp, dtype=np.int64)
        block["gpus"] = np.full(flat[0].size, gpus, dtype=np.int64)
        blocks.append(_with_dp_shard(block, gpus, gpus_per_node, pins))
    if not blocks:
        return {k: np.zeros(0, dtype=np.int64) for k in KNOBS}
    return {k: np.concatenate([b[k] for b in blocks]) for k in KNOBS}


def _with_dp_shard(block: dict[str, np.ndarray], gpus: int, gpus_per_node: int, pins: Pins) -> dict[str, np.ndarray]:
    """The block's rows with their dp_shard column: each pinned value (validity rejects those that do
    not divide dp), or dp (full sharding) plus, for the ZeRO-3 rows that have one, a copy at the node's
    shard size (node_dp_shard). Only ZeRO-3 gets the copy: its weight gathers on every micro-batch are
    what one-node shard groups keep off the network; for ZeRO-1 and 2 hybrid sharding moves more bytes
    across nodes than it saves (an all-reduce of the shard, 2x its gradients, against a reduce-scatter and
    one gather), so the search leaves it to a pin."""
    dp = np.maximum(gpus // (block["tp"] * block["pp"] * block["cp"]), 1)
    if pins.dp_shard is not None:
        copies = [{**{k: v for k, v in block.items()}, "dp_shard": np.full(dp.size, value, dtype=np.int64)}
                  for value in pins.dp_shard]
        return {k: np.concatenate([c[k] for c in copies]) for k in copies[0]}
    node = node_dp_shard(block["tp"], block["cp"], dp, gpus_per_node)
    # experts replicate with the dense states (validity's R_DP_SHARD_EXPERTS; expert TP = tp here, a job's
    # other etp is left to validity): only copies whose replicas divide the expert-data-parallel group
    expert_dp = np.maximum(block["cp"] * dp // block["ep"], 1)
    fits = (node > 0) & (expert_dp % np.maximum(dp // np.maximum(node, 1), 1) == 0)
    hybrid = np.nonzero((block["zero"] == 3) & fits)[0]
    full = {**block, "dp_shard": dp.astype(np.int64)}
    return {k: np.concatenate([full[k], (node if k == "dp_shard" else full[k])[hybrid].astype(np.int64)])
            for k in full}


def validity(job: SearchJob, space: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reason index into REASONS or -1 when valid, dp, micro-batches) for every layout of the job's space: the
    rules of validity.RULES (resolve_config's, the pipeline's and the search's policies), in their order."""
    knobs = Knobs(gpus=space["gpus"], tp=space["tp"], pp=space["pp"], cp=space["cp"], ep=space["ep"],
                  vpp=space["vpp"], mbs=space["mbs"], seq=job.seq, gbs=job.gbs, schedule=space["schedule"],
                  sequence_parallel=job.sequence_parallel, etp=job.etp, moe_a2a_overlap=job.moe_a2a_overlap,
                  recompute=space["recompute"], dp_shard=space["dp_shard"], zero=space["zero"])
    reason = first_broken(job.model, knobs, Policies(job.node, job.allow_cross_node_tp))
    return reason, knobs.dp, knobs.m


def row(table: dict[str, np.ndarray], i: int) -> dict:
    """Layout i of a table, as plain ints keyed by KNOBS (and STORAGE_KNOBS where the table has them)."""
    return {k: int(v[i]) for k, v in table.items() if k in KNOBS or k in STORAGE_KNOBS}
