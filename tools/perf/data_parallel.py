"""Data-parallel gradient and weight exchange per ZeRO stage: the exposed seconds of one rank per step.

numpy-friendly throughout: the scalar step (step.step_time) and the layout search
(search_score, through step.data_parallel_and_optimizer_s) call the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.perf.collectives import Group, collective_time_s
from trainplan.tools.perf.overlap import overlapped_s, side_by_side_s
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.core.enums import Schedule


def zero2_reduce_scatters(schedule_code, num_microbatches, pp, vpp):
    """How many times per step ZeRO-2 reduce-scatters a stage's gradients (numpy-friendly).

    ZeRO-2 keeps only the gradient shard between reduce-scatters (memory.py's zero2 bucket holds
    what is unsharded). The interleaved schedule runs each model chunk's backward for a group of pp
    contiguous micro-batches (Megatron's microbatch_group_size_per_vp_stage defaults to pp), so a
    chunk's gradients accumulate unsharded over the group, in fp32, and are reduce-scattered once per
    group: ceil(m / pp) times. Llama 3 405B trained this way: FSDP sharding the gradients, FP32
    accumulation over micro-batches and FP32 reduce-scatter (Llama 3 paper §3.3.2). Other schedules
    hold one chunk, whose backward alternates with forwards one micro-batch at a time: m times.
    """
    m = np.asarray(num_microbatches, dtype=float)
    grouped = (np.asarray(schedule_code) == SCHEDULE_CODES[Schedule.interleaved]) & (np.asarray(vpp) > 1)
    return np.where(grouped, np.ceil(m / pp), m)


def fsdp_units(stages: list[list[int]]):
    """Parameter groups ZeRO-3 gathers one at a time on each pipeline stage (numpy array, one per stage).

    PyTorch FSDP wraps each transformer block in its own unit and the rest (embedding, final norm,
    LM head) in the root unit (torchtitan's apply_fsdp: fully_shard per TransformerBlock, then the
    model); Megatron-FSDP and DeepSpeed ZeRO-3 likewise fetch parameters module by module. Each unit is
    one all-gather (and in backward one reduce-scatter) of its own, so a stage issues this many
    collectives per pass. The root unit counts on the stages holding the embedding or the head.
    """
    last = len(stages) - 1
    return np.array([max(1, len(ids)) + (1 if s in (0, last) else 0) for s, ids in enumerate(stages)], dtype=float)


NO_REPLICAS = Group(size=1, ranks_per_node=1)
"""The replicate group of full sharding (every data-parallel rank in one ZeRO shard group): nothing to all-reduce."""


def replica_all_reduce_s(grad_bytes, shard: Group, replicate: Group, cluster: ClusterSpec):
    """Seconds to all-reduce one rank's gradient shard across the replicas of hybrid sharding (numpy-friendly).

    `grad_bytes` is the gradient buffer the shard group reduce-scatters; each rank keeps grad_bytes /
    shard.size of it, and the ranks holding the same shard in each replica all-reduce it: PyTorch FSDP
    HYBRID_SHARD (reduce-scatter in the intra-node group, then all_reduce over _inter_node_pg,
    torch/distributed/fsdp/_runtime_utils.py _reduce_grad), FSDP2 with a 2-D mesh (foreach_reduce's
    all_reduce_group; torchtitan data_parallel_replicate_degree), Megatron's partial distributed
    optimizer (intra-instance reduce-scatter, inter-instance all-reduce; --num-distributed-optimizer-
    instances). Zero with full sharding (one replica)."""
    return collective_time_s("all_reduce", np.asarray(grad_bytes, dtype=float) / shard.size, replicate, cluster)


def zero3_exchange_s(params, group, cluster: ClusterSpec, forward_s, backward_s, grad_bytes_per_param, units,
                     replicate: Group = NO_REPLICAS):
    """Exposed seconds of ZeRO-3 / FSDP for one micro-batch on one rank (numpy-friendly).

    Each of the `units` parameter groups (fsdp_units) is all-gathered before its forward, all-gathered
    again before its backward (parameters are resharded after forward, FSDP's default
    reshard_after_forward=True; ZeRO-3 likewise releases them) and its gradient reduce-scattered after
    its backward (Rajbhandari et al. 2020, ZeRO §7.2: 1.5x the volume of an all-reduce; Zhao et al.
    2023, PyTorch FSDP, VLDB). Each collective pays its own ring latency, so a pass issues `units`
    collectives, not one.
    Overlap follows FSDP's prefetching (Zhao et al. 2023; torch.distributed.fsdp BackwardPrefetch and
    forward_prefetch: the next unit's all-gather is issued while the current unit computes):
    - forward: the first unit's all-gather has nothing to hide behind; the others hide behind the
      forward compute only (gathers issued for the forward cannot run during the backward);
    - backward: the gathers and the reduce-scatters share the backward compute as their window, and
      the last reduce-scatter (the first unit's gradient) comes after the last backward compute.
    Hybrid sharding (`group` the shard group, `replicate` the replicas): each unit's reduce-scatter is
    followed by the all-reduce of its shard across the replicas (replica_all_reduce_s) on a stream of
    its own, beside the gathers and scatters (overlap.side_by_side_s); the first unit's all-reduce
    follows its reduce-scatter after the last backward compute. The forward's gathers stay inside the
    shard group, a node when it fits in one (the IBM/PyTorch FSDP blog, appendix: with HSDP "there is no
    inter-node traffic during the pre-fetch stage for forward pass").
    """
    weights = 2 * params / units
    grads = grad_bytes_per_param * params / units
    gather = collective_time_s("all_gather", weights, group, cluster)
    scatter = collective_time_s("reduce_scatter", grads, group, cluster) * (grad_bytes_per_param > 0)
    reduce = replica_all_reduce_s(grads, group, replicate, cluster) * (grad_bytes_per_param > 0)
    forward = gather + overlapped_s((units - 1) * gather, forward_s)
    backward = scatter + reduce + side_by_side_s([units * gather + (units - 1) * scatter, (units - 1) * reduce],
                                                 backward_s)
    return forward + backward


@dataclass(frozen=True)
class ComputeWindow:
    """The compute a stage's data-parallel collectives hide behind, and how often they run (numpy-friendly).

    forward_s/backward_s: one micro-batch's forward and backward on the stage; num_microbatches per step;
    reduce_scatters: ZeRO-2's gradient reduce-scatters per step (zero2_reduce_scatters; None: one per
    micro-batch); units: ZeRO-3's all-gather units per stage (fsdp_units); overlap: Layout.overlap_grad_reduce."""

    forward_s: object
    backward_s: object
    num_microbatches: object
    reduce_scatters: object = None
    units: object = 1
    overlap: bool = True


def dp_exchange_s(zero, params, group, cluster: ClusterSpec, window: ComputeWindow, grad_bytes_per_param: int = 4,
                  replicate: Group = NO_REPLICAS):
    """Exposed data-parallel seconds per step for `params` parameters per rank reduced over `group`.

    `group` is the ZeRO shard group; `replicate` the replicas of hybrid sharding (Layout.dp_shard),
    whose ranks all-reduce their gradient shard after each reduce-scatter, beside it on their own
    stream and link (replica_all_reduce_s, overlap.side_by_side_s). ZeRO-0 shards nothing, so it has no
    replicas (validity's R_DP_SHARD_ZERO).

    numpy-friendly in zero, params and the window's times, micro-batches and units (the search
    passes arrays). window.overlap false (Layout.overlap_grad_reduce): the collectives run after the step's compute, with no
    window to hide behind, as DeepSpeed's pipeline engine issues ReduceGrads after the last backward
    and Megatron-LM ran them in 2021-22 (Korthikanti et al. 2022 §6.3).
    - ZeRO-0 all-reduces the accumulated gradients once, behind the last backward.
    - ZeRO-1 (Megatron distributed optimizer) reduce-scatters them once, behind the last backward,
      and all-gathers the updated bf16 weights behind the first forward.
    - ZeRO-2 keeps only its gradient shard, so it reduce-scatters `reduce_scatters` times
      (zero2_reduce_scatters; default: after every micro-batch's backward, DeepSpeed ZeRO-2), plus
      the one weight all-gather.
    - ZeRO-3 all-gathers weights for every forward and backward and reduce-scatters gradients every
      micro-batch, unit by unit (`units` per stage, fsdp_units): zero3_exchange_s.
    """
    forward_s, backward_s, num_microbatches = window.forward_s, window.backward_s, window.num_microbatches
    if group.size == 1 and replicate.size == 1:
        return np.zeros_like(np.asarray(forward_s, dtype=float)) * 0.0
    if not np.any(params):   # none of these parameters (a dense model's experts): nothing to exchange
        return np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (
            zero, params, forward_s, backward_s, num_microbatches, window.units, window.reduce_scatters)
            if x is not None)))
    if not window.overlap:
        forward_s, backward_s = np.zeros_like(forward_s), np.zeros_like(backward_s)
    grads = grad_bytes_per_param * params
    weights = 2 * params
    all_reduce = collective_time_s("all_reduce", grads, group, cluster)
    reduce_scatter = collective_time_s("reduce_scatter", grads, group, cluster)
    all_gather = collective_time_s("all_gather", weights, group, cluster)
    replica_reduce = replica_all_reduce_s(grads, group, replicate, cluster)
    zero0 = overlapped_s(all_reduce, backward_s)
    gather_once = overlapped_s(all_gather, forward_s)
    zero1 = side_by_side_s([reduce_scatter, replica_reduce], backward_s) + gather_once
    runs = num_microbatches if window.reduce_scatters is None else window.reduce_scatters
    zero2 = runs * side_by_side_s([reduce_scatter, replica_reduce], backward_s) + gather_once
    zero3 = num_microbatches * zero3_exchange_s(params, group, cluster, forward_s, backward_s, grad_bytes_per_param,
                                                np.asarray(window.units, dtype=float), replicate)
    exposed = np.select([zero == 0, zero == 1, zero == 2], [zero0, zero1, zero2], zero3)
    return exposed * (np.asarray(params) > 0)


def data_parallel_s(zero, dense_params, expert_params, groups: dict, cluster: ClusterSpec, window: ComputeWindow,
                    bf16_grads: bool = False):
    """Exposed data-parallel seconds of one rank: its dense parameters over their ZeRO shard group
    (dp_shard*cp; dp*cp with full sharding), its expert parameters over theirs (the expert-data-parallel
    group, split the same way), each with its replicas (dp_exchange_s each; collectives.group_layout).
    numpy-friendly in every argument but the groups, cluster, bf16_grads and window.overlap: the scalar step
    and the search share it."""
    grad_bytes = 2 if bf16_grads else 4
    return sum(dp_exchange_s(zero, params, shard, cluster, window, grad_bytes, replicate)
               for params, shard, replicate in ((dense_params, groups["dp_shard"], groups["dp_replicate"]),
                                                (expert_params, groups["edp_shard"], groups["edp_replicate"])))
