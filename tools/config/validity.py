"""Which layouts are valid: one table of rules for layout.resolve_config (one layout, an InputError
naming every factor) and the layout search (numpy arrays of many layouts, a rejection reason each).

A rule is a reason (the search's rejection key), a predicate that is true where a layout breaks it,
written once with numpy operators so that it takes plain ints and arrays alike, and the message
resolve_config raises. Rules run in table order; a layout counts under the first rule it breaks.

Three kinds:
- layout: what a layout must satisfy to be built (divisibility, heads, experts, sequence splits,
  the schedule's shape). resolve_config raises on them.
- batch: what the pipeline schedule needs of the micro-batches (pipeline.py's own checks:
  Megatron's interleaving in groups of pp, DualPipe.step's even m >= 2 pp, the simulator's size
  bound). They need gbs; resolve_config checks them when gbs is set.
- policy: the search's own preferences, which resolve_config does not hold: tp inside a node
  (tp all-gathers on every layer: it lives on NVLink), CP_MIN_TOKENS, and tp within the key/value heads
  (R_KV_REPLICA: a layout that replicates key/value heads over tp ranks is a valid estimate, but no engine
  trainplan exports runs it, so the search never recommends one; export/support.py refuses it per engine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainplan.tools.config.codes import RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.schedule_rules import SIMULATE_MAX_UNITS, dualpipe_batch_ok, interleaved_batch_ok, simulated_units
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.core.enums import Recompute, Schedule

CP_MIN_TOKENS = 2048
"""Context parallelism only while each CP rank keeps >= 2048 tokens of the sequence. Ring attention
hides its K/V exchange behind the attention of the previous chunk, which shrinks as s/cp; below
~2K tokens per rank the exchange is exposed and CP loses to TP/PP (Megatron-Core's CP guidance
targets long sequences; Llama 3 used CP16 at 128K, i.e. 8K tokens per rank)."""

# Rejection reasons (the search counts layouts under them).
R_SPLIT = "invalid split: tp*pp*cp does not divide gpus"
R_HEADS = "invalid split: tp does not divide the attention heads"
R_KV = "invalid split: tp and the key/value heads do not divide one another"
R_KV_REPLICA = "invalid split: tp exceeds the key/value heads (no exported engine replicates them)"
R_NODE = "invalid split: tp crosses a node (allow_cross_node_tp is off)"
R_LAYERS = "invalid split: pp is larger than the layers"
R_EP_DENSE = "invalid split: ep > 1 on a dense model"
R_EP_EXPERTS = "invalid split: ep does not divide the experts"
R_ETP_WIDTH = "invalid split: etp does not divide the expert hidden size"
R_EP_DP = "invalid split: etp*ep does not divide tp*cp*dp"
R_EP_SP = "invalid split: ep or etp with tp > 1 needs sequence parallelism"
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
R_SIM_SIZE = "invalid batch: too many micro-batches to simulate"
R_A2A_OVERLAP = "invalid schedule: moe_a2a_overlap needs ep > 1, interleaving with pp > 1, and no full recompute"
R_DP_SHARD = "invalid split: dp_shard does not divide dp"
R_DP_SHARD_ZERO = "invalid split: dp_shard < dp needs zero >= 1"
R_DP_SHARD_EXPERTS = "invalid split: the replicas dp/dp_shard do not divide the expert-data-parallel size"

_INTER, _DUAL = SCHEDULE_CODES[Schedule.interleaved], SCHEDULE_CODES[Schedule.dualpipe]
_FULL = RECOMPUTE_CODES[Recompute.full]


@dataclass(kw_only=True)
class Knobs:
    """The knobs the rules read, as ints (one layout) or numpy arrays (many), with dp and the
    micro-batches m derived. schedule is a SCHEDULE_CODES code, recompute a RECOMPUTE_CODES code (None:
    not known, its rules pass); gbs None skips the batch rules. dp_shard None is dp (full sharding);
    zero None is not known (the rule that needs it passes); etp None is tp (Megatron's default)."""

    gpus: Any
    tp: Any
    pp: Any
    cp: Any
    ep: Any
    vpp: Any
    mbs: Any
    seq: Any
    schedule: Any
    gbs: int | None = None
    sequence_parallel: Any = True
    etp: Any = None
    moe_a2a_overlap: bool = False
    recompute: Any = None
    dp_shard: Any = None
    zero: Any = None
    dp: Any = field(init=False)
    replicas: Any = field(init=False)
    """replicas of a ZeRO shard; 1 where dp_shard does not divide dp (R_DP_SHARD rejects those)"""
    expert_dp: Any = field(init=False)
    m: Any = field(init=False)

    def __post_init__(self) -> None:
        self.gpus, self.tp, self.pp, self.cp, self.ep, self.vpp, self.mbs, self.seq = (
            np.asarray(x) for x in (self.gpus, self.tp, self.pp, self.cp, self.ep, self.vpp, self.mbs, self.seq))
        self.schedule = np.asarray(self.schedule)
        self.sequence_parallel = np.asarray(self.sequence_parallel)
        self.etp = self.tp if self.etp is None else np.asarray(self.etp)
        self.moe_a2a_overlap = bool(self.moe_a2a_overlap)
        self.recompute = np.asarray(-1 if self.recompute is None else self.recompute)
        self.dp = np.maximum(self.gpus // (self.tp * self.pp * self.cp), 1)
        self.dp_shard = self.dp if self.dp_shard is None else np.asarray(self.dp_shard)
        self.zero = np.asarray(-1 if self.zero is None else self.zero)
        self.replicas = np.where(self.dp % self.dp_shard == 0, self.dp // np.maximum(self.dp_shard, 1), 1)
        self.expert_dp = np.maximum(self.tp * self.cp * self.dp // (self.etp * self.ep), 1)
        self.m = None if self.gbs is None else np.maximum(self.gbs // (self.dp * self.mbs), 1)


@dataclass(frozen=True)
class Policies:
    """The search's own rules: tp inside a node of gpus_per_node (unless allowed across), CP ranks
    with at least cp_min_tokens tokens."""

    gpus_per_node: int
    allow_cross_node_tp: bool = False
    cp_min_tokens: int = CP_MIN_TOKENS


@dataclass(frozen=True)
class Rule:
    reason: str
    kind: str                                            # 'layout', 'batch' or 'policy'
    broken: Callable[[ModelSpec, Knobs, Policies | None], np.ndarray]
    message: Callable[[ModelSpec, Knobs, Policies | None], str]


def _i(x) -> int:
    return int(np.asarray(x))


def _stage_layers(model: ModelSpec, k: Knobs):
    """Layers per pipeline stage as vpp must divide them: ceil(L / pp)."""
    return -(-model.num_layers // k.pp)


RULES: tuple[Rule, ...] = (
    Rule(R_SPLIT, "layout",
         lambda m, k, p: k.gpus % (k.tp * k.pp * k.cp) != 0,
         lambda m, k, p: (f"tp*pp*cp={k.tp}*{k.pp}*{k.cp}={_i(k.tp * k.pp * k.cp)} does not divide gpus={k.gpus}: "
                          f"choose sizes whose product divides {k.gpus}")),
    Rule(R_HEADS, "layout",
         lambda m, k, p: m.num_attention_heads % k.tp != 0,
         lambda m, k, p: f"tp={k.tp} does not divide the {m.num_attention_heads} attention heads of {m.name}"),
    Rule(R_KV, "layout",
         lambda m, k, p: (m.attention_type == "mha") & (m.num_kv_heads % k.tp != 0) & (k.tp % m.num_kv_heads != 0),
         lambda m, k, p: f"tp={k.tp} and the {m.num_kv_heads} key/value heads of {m.name} must divide one another"),
    # Megatron-Core (NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py: TransformerConfig raises
    # unless num_query_groups % tensor_model_parallel_size == 0), torchtitan (each rank's key/value heads
    # inferred from its column shard of wk/wv) and DeepSpeed AutoTP (deepspeedai/DeepSpeed
    # deepspeed/module_inject/tp_shard.py get_shard_size
    # gives rank r kv//tp + (r < kv%tp) heads: none past the kv-th) all shard whole key/value heads.
    Rule(R_KV_REPLICA, "policy",
         lambda m, k, p: (m.attention_type == "mha") & (m.num_kv_heads % k.tp != 0),
         lambda m, k, p: (f"tp={k.tp} is more than the {m.num_kv_heads} key/value heads of {m.name}: it would replicate "
                          "each over tp/kv ranks, which Megatron-Core, torchtitan and DeepSpeed AutoTP do not run "
                          f"(they shard whole key/value heads): use a tp that divides {m.num_kv_heads}")),
    Rule(R_NODE, "policy",
         lambda m, k, p: (k.tp > p.gpus_per_node) & (not p.allow_cross_node_tp),
         lambda m, k, p: (f"tp={k.tp} spans more than a node of {p.gpus_per_node} GPUs: tensor parallelism "
                          f"communicates on every layer; allow_cross_node_tp to try it")),
    Rule(R_LAYERS, "layout",
         lambda m, k, p: k.pp > m.num_layers,
         lambda m, k, p: f"pp={k.pp} is larger than the {m.num_layers} layers of {m.name}"),
    # The expert grid (MoE Parallel Folding, moe.py): etp x ep x edp over each stage's tp x cp x dp ranks.
    Rule(R_EP_DENSE, "layout",
         lambda m, k, p: ((k.ep > 1) | (k.etp != k.tp)) & (not m.is_moe),
         lambda m, k, p: (f"ep={k.ep} needs a mixture-of-experts model; {m.name} is dense: use --ep 1" if k.ep > 1
                          else f"etp={k.etp} (expert tensor parallelism) needs a mixture-of-experts model; {m.name} "
                               "is dense: drop --etp")),
    Rule(R_EP_EXPERTS, "layout",
         lambda m, k, p: (k.ep > 1) & (max(m.num_experts, 1) % k.ep != 0),
         lambda m, k, p: f"ep={k.ep} does not divide the {m.num_experts} experts of {m.name}"),
    Rule(R_ETP_WIDTH, "layout",
         lambda m, k, p: m.is_moe & (max(m.moe_intermediate_size, 1) % k.etp != 0),
         lambda m, k, p: f"etp={k.etp} does not divide the expert hidden size {m.moe_intermediate_size} of {m.name}"),
    Rule(R_EP_DP, "layout",
         lambda m, k, p: (k.tp * k.cp * k.dp) % (k.etp * k.ep) != 0,
         lambda m, k, p: (f"etp*ep={k.etp}*{k.ep}={_i(k.etp * k.ep)} must divide tp*cp*dp={k.tp}*{k.cp}*{k.dp}="
                          f"{_i(k.tp * k.cp * k.dp)}: the expert grid (MoE Parallel Folding) lays etp x ep x edp "
                          f"over the tp x cp x dp ranks of a pipeline stage (etp defaults to tp)")),
    Rule(R_EP_SP, "layout",
         lambda m, k, p: (k.tp > 1) & (k.sequence_parallel == 0) & ((k.ep > 1) | (k.etp != k.tp)),
         lambda m, k, p: (f"ep={k.ep} or etp={k.etp} with tp={k.tp} needs sequence parallelism (Megatron: the "
                          f"MoE layer's tokens are split over the TP ranks): drop --no-sequence-parallel")),
    # Hybrid sharding (contract.Layout.dp_shard): ZeRO shards over dp_shard*cp ranks, replicated dp/dp_shard times.
    Rule(R_DP_SHARD, "layout",
         lambda m, k, p: k.dp % k.dp_shard != 0,
         lambda m, k, p: (f"dp_shard={k.dp_shard} must divide dp={k.dp} (gpus/(tp*pp*cp)): a ZeRO shard group is "
                          f"dp_shard data-parallel ranks, replicated dp/dp_shard times; use a divisor of {k.dp}")),
    Rule(R_DP_SHARD_ZERO, "layout",
         lambda m, k, p: (k.dp_shard < k.dp) & (k.zero == 0),
         lambda m, k, p: (f"dp_shard={k.dp_shard} splits the ZeRO shards, and zero=0 shards nothing: use --zero 1 "
                          "or more, or drop --dp-shard")),
    Rule(R_DP_SHARD_EXPERTS, "layout",
         lambda m, k, p: (k.replicas > 1) & (k.expert_dp % k.replicas != 0),
         lambda m, k, p: (f"dp/dp_shard={k.replicas} replicas must divide the expert-data-parallel size "
                          f"tp*cp*dp/(etp*ep)={k.expert_dp}: the expert shards replicate with the dense ones "
                          "(Megatron's intra_expt_dp group); use a larger --dp-shard")),
    Rule(R_CP_SEQ, "layout",
         lambda m, k, p: (k.cp > 1) & (k.seq % (2 * k.cp) != 0),
         lambda m, k, p: (f"seq={k.seq} must be divisible by 2*cp={_i(2 * k.cp)} for load-balanced "
                          f"context parallelism")),
    Rule(R_CP_SHORT, "policy",
         lambda m, k, p: (k.cp > 1) & (k.seq // k.cp < p.cp_min_tokens),
         lambda m, k, p: (f"seq/cp={_i(k.seq // k.cp)} tokens per context-parallel rank is below "
                          f"{p.cp_min_tokens}: the ring exchange would be exposed")),
    Rule(R_SP, "layout",
         lambda m, k, p: (k.tp > 1) & (k.sequence_parallel != 0) & ((k.seq // k.cp) % k.tp != 0),
         lambda m, k, p: f"seq/cp={_i(k.seq // k.cp)} must be divisible by tp={k.tp} for sequence parallelism"),
    Rule(R_VPP_PP, "layout",
         lambda m, k, p: (k.vpp > 1) & (k.pp == 1),
         lambda m, k, p: f"vpp={k.vpp} needs pipeline parallelism: set --pp above 1 or use --vpp 1"),
    Rule(R_VPP_LAYERS, "layout",
         lambda m, k, p: (k.vpp > 1) & (_stage_layers(m, k) % k.vpp != 0),
         lambda m, k, p: (f"vpp={k.vpp} does not divide the {_stage_layers(m, k)} layers per stage "
                          f"({m.num_layers} layers / pp={k.pp})")),
    Rule(R_VPP_SCHED, "layout",
         lambda m, k, p: (k.schedule == _INTER) & (k.vpp == 1),
         lambda m, k, p: "schedule=interleaved needs --vpp 2 or more (virtual stages per rank)"),
    Rule(R_VPP_SCHED, "layout",
         lambda m, k, p: (k.schedule != _INTER) & (k.vpp > 1),
         lambda m, k, p: f"vpp={k.vpp} is only used by the interleaved schedule: use --schedule interleaved or --vpp 1"),
    Rule(R_DUAL_PP, "layout",
         lambda m, k, p: (k.schedule == _DUAL) & (k.pp > 1) & (k.pp % 2 != 0),
         lambda m, k, p: f"schedule=dualpipe needs an even pp, got pp={k.pp}"),
    # Megatron-Core's conditions for the combined 1F1B (transformer_config.py, overlap_moe_expert_parallel_comm);
    # the dispatcher's, a job-level knob, is layout.check_moe_a2a_overlap_job's.
    Rule(R_A2A_OVERLAP, "layout",
         lambda m, k, p: k.moe_a2a_overlap & (k.ep == 1),
         lambda m, k, p: ("moe_a2a_overlap hides the expert-parallel all-to-all and needs ep > 1: use --ep 2 or more, "
                          "or drop --moe-a2a-overlap")),
    Rule(R_A2A_OVERLAP, "layout",
         lambda m, k, p: k.moe_a2a_overlap & (k.pp > 1) & (k.schedule != _INTER),
         lambda m, k, p: ("moe_a2a_overlap with pp > 1 needs the interleaved schedule (Megatron-Core requires virtual "
                          "pipeline stages): use --vpp 2 or more, or drop --moe-a2a-overlap")),
    Rule(R_A2A_OVERLAP, "layout",
         lambda m, k, p: k.moe_a2a_overlap & (k.recompute == _FULL),
         lambda m, k, p: ("moe_a2a_overlap cannot run with full recompute (Megatron-Core rejects it): use --recompute "
                          "selective or none, or drop --moe-a2a-overlap")),
    Rule(R_BATCH, "batch",
         lambda m, k, p: k.gbs % (k.dp * k.mbs) != 0,
         lambda m, k, p: (f"gbs={k.gbs} is not divisible by dp*mbs={k.dp}*{k.mbs}={_i(k.dp * k.mbs)}: "
                          f"use a multiple of {_i(k.dp * k.mbs)}")),
    Rule(R_DUAL_M, "batch",
         lambda m, k, p: (k.schedule == _DUAL) & (k.pp > 1) & ~dualpipe_batch_ok(k.pp, k.m),
         lambda m, k, p: (f"schedule=dualpipe needs an even number of micro-batches >= 2*pp={_i(2 * k.pp)} "
                          f"(DualPipe.step asserts it): gbs/(dp*mbs)={k.m}")),
    Rule(R_INTER_M, "batch",
         lambda m, k, p: (k.schedule == _INTER) & (k.pp > 1) & ~interleaved_batch_ok(k.pp, k.m),
         lambda m, k, p: (f"schedule=interleaved needs micro-batches gbs/(dp*mbs)={k.m} divisible by pp={k.pp} "
                          f"(Megatron runs them in groups of pp)")),
    Rule(R_SIM_SIZE, "batch",
         lambda m, k, p: simulated_units(k.pp, k.m, k.vpp) > SIMULATE_MAX_UNITS,
         lambda m, k, p: (f"pp*microbatches*vpp={k.pp}*{k.m}*{k.vpp}={_i(simulated_units(k.pp, k.m, k.vpp)):,} is "
                          f"over the {SIMULATE_MAX_UNITS:,} the pipeline simulator runs: use a smaller gbs or a "
                          f"larger mbs")),
)

REASONS: tuple[str, ...] = tuple(dict.fromkeys(rule.reason for rule in RULES))
"""Distinct rejection reasons of the rules, in table order."""


def _applies(rule: Rule, knobs: Knobs, policies: Policies | None) -> bool:
    if rule.kind == "policy":
        return policies is not None
    return rule.kind == "layout" or knobs.gbs is not None


def first_broken(model: ModelSpec, knobs: Knobs, policies: Policies | None = None) -> np.ndarray:
    """For each layout, the index into REASONS of the first rule it breaks, or -1 when valid."""
    reason = np.full(np.broadcast(knobs.tp, knobs.pp, knobs.cp, knobs.schedule, knobs.mbs).shape, -1, dtype=np.int64)
    for rule in RULES:
        if _applies(rule, knobs, policies):
            reason[(reason < 0) & np.asarray(rule.broken(model, knobs, policies), dtype=bool)] = REASONS.index(rule.reason)
    return reason


def check(model: ModelSpec, knobs: Knobs, policies: Policies | None = None) -> None:
    """Raise InputError with the message of the first rule one layout breaks."""
    for rule in RULES:
        if _applies(rule, knobs, policies) and bool(rule.broken(model, knobs, policies)):
            raise InputError(rule.message(model, knobs, policies))


def broken_policy(model: ModelSpec, knobs: Knobs, policies: Policies) -> str | None:
    """The reason of the first search policy one layout breaks, or None."""
    for rule in RULES:
        if rule.kind == "policy" and bool(rule.broken(model, knobs, policies)):
            return rule.reason
    return None
