"""Mixture-of-experts layers as engines run them: layout rules, compute and token dispatch.

Layout (MoE Parallel Folding; Liu et al. 2025, arXiv:2504.14960, and Megatron-Core's
parallel_state.initialize_model_parallel / RankGenerator). Each pipeline stage's tp x cp x dp ranks
are laid out twice: attention runs on the grid tp x cp x dp (rank order tp, cp, dp) and the
experts on etp x ep x edp (rank order etp, ep, edp) over the same ranks. So ep may span TP, CP and
DP ranks; the only constraint is that etp x ep divides tp x cp x dp, and edp = tp*cp*dp/(etp*ep).
Megatron's expert_tensor_parallel_size defaults to tp, which gives the pre-folding rule
"ep divides dp x cp". The rules live in validity.RULES with the other layout rules: etp x ep
divides tp x cp x dp, ep divides the experts, etp the expert width, and ep or etp with tp > 1 needs
sequence parallelism (Megatron's argument check).

One MoE layer, per micro-batch on one rank (Megatron-Core MoELayer: router -> dispatcher.dispatch ->
experts -> dispatcher.combine, plus the shared experts beside it):
- T_in tokens enter the layer: mbs x seq / cp, divided by tp under sequence parallelism.
- Router: a (T_in x h) @ (h x E) GEMM, then fp32 softmax/sigmoid and top-k over T_in x E scores
  (memory-bound).
- Dispatch (alltoall dispatcher): permute the T_in x k token copies into expert order (memory-bound),
  all-to-all over ep, sort the received chunks by local expert, and with expert TP all-gather them
  over etp; combine mirrors it. The allgather dispatcher gathers the tokens of the etp x ep group
  instead and reduce-scatters the outputs. The deepep dispatcher (DeepSeek-V3's DeepEP kernels) is an
  all-to-all that sends group-limited tokens across the network once per node. What crosses the wire,
  in bytes per element, is wire_bytes_per_element: BF16 hidden states for Megatron's dispatchers, FP8
  dispatch with BF16 combine for DeepSeek's.
- Experts: each rank holds E/ep experts, each split over etp. The R = T_in x etp x k x load rows it
  receives split into E/ep grouped GEMMs of M = R / (E/ep) rows each. M is what sets the GEMM's
  efficiency (compute.gemm_time_s: tile and wave quantisation, the memory roofline for small M),
  which is why fine-grained experts run far below the dense GEMM rate (MegaBlocks, Gale et al. 2023 §5).
- load is the straggler factor of routing: 1 when the router is forced to balance (benchmarks:
  Megatron --moe-router-force-load-balancing), the capacity factor when experts are padded to
  capacity (Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity), and
  DROPLESS_LOAD_IMBALANCE for learned dropless routing: the most loaded rank sets the pace of the
  grouped GEMMs and of the all-to-all that waits for it.
- Shared experts follow the dense part's parallelism (Megatron-Core moe/README: "the parallelism
  patterns of the shared experts follow the settings of the dense part").
"""

from __future__ import annotations

import math

from trainplan.tools.core import assumptions
from trainplan.tools.core.calibration import MOE_HOST_S_PER_EXPERT_GEMM
from trainplan.tools.perf.collectives import collective_time_s
from trainplan.tools.perf.compute import OpTimes, linear, memory_bound_time_s
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Dispatcher, GroupedGemm, Precision
from trainplan.tools.hardware.specs import ClusterSpec, GPUSpec, ModelSpec

# Straggler factor of learned, dropless routing: load of the busiest EP rank over the mean. Assumed,
# not fitted: between perfect balance (1.0) and the capacity factor 1.25 that Switch Transformer
# (Fedus et al. 2022, §2.2 and Table 1) and GShard-style recipes use so that few tokens overflow.
DROPLESS_LOAD_IMBALANCE = assumptions.DROPLESS_LOAD_IMBALANCE.value

# Host time to issue one expert GEMM when the grouped GEMM is a host-issued loop of per-expert GEMMs
# (Transformer Engine GroupedLinear: "launch multiple local GEMM kernels in multiple streams",
# Megatron-Core moe/README --moe-grouped-gemm). Dropless dispatch sizes each expert's GEMM from the
# tokens-per-expert counts, which the dispatcher copies to the host (a device-to-host sync every MoE
# layer; Megatron-Core's CUDA-graph notes: without capacity padding "the resulting dynamic shapes make
# MoE layers uncapturable"); after the sync the GPU waits while the host issues the per-expert
# quantise/GEMM calls, so a layer's expert part takes max(GPU time, host time). Fitted: the
# calibration table says on what, and what is held out.
HOST_S_PER_EXPERT_GEMM = MOE_HOST_S_PER_EXPERT_GEMM.value
GEMMS_PER_EXPERT_LINEAR = (1, 2)
"""(forward, backward) GEMMs of one expert Linear: y = xW, then dgrad and wgrad."""

# FP8 tokens on the wire carry one fp32 scale per 1x128 tile of the hidden dimension (DeepSeek-V3
# report §3.3.2, fine-grained quantisation of activations per 1x128 tile; deepseek-ai/DeepEP:tests/utils.py
# per_token_cast_to_fp8: an e4m3 tensor [m, n] and fp32 scales [m, n / 128] travel together).
FP8_BYTES_PER_ELEMENT = 1 + 4 / 128
BF16_BYTES_PER_ELEMENT = 2

# fp32 router scores: the logits are written, then read and written by the score function and
# top-k, and the selected probabilities read back (Megatron-Core router.py with moe_router_dtype
# fp32): about four passes of 4 B per score in the forward and as many in the backward.
ROUTER_SCORE_BYTES = assumptions.ROUTER_SCORE_BYTES.value


# --------------------------------------------------------------------------------------------
# Token counts
# --------------------------------------------------------------------------------------------


def tokens_in(cfg: ParallelConfig) -> float:
    """T_in: tokens entering the MoE layer on one rank (split over tp under sequence parallelism)."""
    return cfg.mbs * cfg.seq / cfg.cp / (cfg.tp if cfg.sequence_parallel else 1)


def load_factor(cfg: ParallelConfig) -> float:
    """Rows of the busiest rank over the balanced mean (module doc)."""
    if cfg.capacity_factor is not None:
        return cfg.capacity_factor
    return 1.0 if cfg.force_balance else DROPLESS_LOAD_IMBALANCE


def routed_rows(model: ModelSpec, cfg: ParallelConfig) -> float:
    """R: token copies the busiest rank runs through its local experts. Under sequence parallelism
    the etp ranks gather each other's copies; without it the tokens are already replicated."""
    gathered = cfg.expert_tp if cfg.sequence_parallel else 1
    return tokens_in(cfg) * gathered * model.experts_per_token * load_factor(cfg)


# --------------------------------------------------------------------------------------------
# Compute
# --------------------------------------------------------------------------------------------


def add_moe_compute(times: OpTimes, model: ModelSpec, cfg: ParallelConfig, gpu: GPUSpec) -> None:
    """Add one MoE block's router, permutation, grouped expert GEMMs and shared experts to `times`."""
    h, k = model.hidden_size, model.experts_per_token
    t_in = tokens_in(cfg)
    mlp_matrices = 2 if model.gated_mlp else 1

    linear(times, "moe/router", t_in, h, model.num_experts, gpu, Precision.bf16)
    score = memory_bound_time_s(ROUTER_SCORE_BYTES * t_in * model.num_experts, gpu, kernels=4)
    times.add("moe/router", score, score)

    local_experts = model.num_experts // cfg.ep
    rows = routed_rows(model, cfg)
    rows_per_expert = rows / local_experts
    f_e = model.moe_intermediate_size / cfg.expert_tp
    experts = OpTimes()
    linear(experts, "moe/experts", rows_per_expert, h, mlp_matrices * f_e, gpu, cfg.precision, local_experts)
    linear(experts, "moe/experts", rows_per_expert, f_e, h, gpu, cfg.precision, local_experts)
    for key in experts.forward_s:
        times.add(key, experts.forward_s[key], experts.backward_input_s[key], experts.backward_weight_s[key])
    if cfg.grouped_gemm is GroupedGemm.per_expert:
        # Host-paced expert GEMMs (HOST_S_PER_EXPERT_GEMM): only the host time beyond the GPU's shows.
        host_forward, host_backward = (2 * local_experts * n * HOST_S_PER_EXPERT_GEMM for n in GEMMS_PER_EXPERT_LINEAR)
        gpu_backward = experts.backward_input + experts.backward_weight
        times.add("moe/host", max(0.0, host_forward - experts.forward), max(0.0, host_backward - gpu_backward))

    if model.num_shared_experts:
        tokens = cfg.mbs * cfg.seq / cfg.cp
        f_s = model.num_shared_experts * (model.shared_expert_intermediate_size or model.moe_intermediate_size) / cfg.tp
        linear(times, "moe/shared", tokens, h, mlp_matrices * f_s, gpu, cfg.precision)
        linear(times, "moe/shared", tokens, f_s, h, gpu, cfg.precision)

    # Permutation (memory-bound, bf16): gather the T_in x k copies into expert order (read T_in h,
    # write T_in k h) and the probability-weighted combine back (read T_in k h, write T_in h).
    # The alltoall dispatcher also sorts the received chunks from rank order into local-expert
    # order and back (Megatron sort_chunks_by_idxs: read + write R h, twice); the allgather
    # dispatcher instead gathers from and scatters into the gathered buffer of the etp x ep group.
    # Two keys, because Megatron's combined 1F1B runs them in different nodes (combined_1f1b.py): the
    # token permutation and its inverse (moe/permute), and the sort or gather around the experts (moe/sort).
    sort_elements = 0.0
    if cfg.dispatcher is not Dispatcher.allgather:
        if cfg.ep > 1 and local_experts > 1:
            sort_elements = 2 * 2 * rows * h
    else:
        sort_elements = 2 * rows * h + t_in * cfg.expert_tp * cfg.ep * h
    for key, elements in (("moe/permute", 2 * t_in * h * (1 + k)), ("moe/sort", sort_elements)):
        seconds = memory_bound_time_s(2 * elements, gpu, kernels=2)
        times.add(key, seconds, seconds)


# --------------------------------------------------------------------------------------------
# Communication
# --------------------------------------------------------------------------------------------


def ranks_per_token(experts: int, k: int, ep: int) -> float:
    """Expected distinct EP ranks a token's k experts sit on, the experts spread E/ep per rank and the k chosen
    uniformly (the forced-balance routing of the benchmarks; assumed for learned routing):
    ep x (1 - C(E - E/ep, k) / C(E, k)), the chance that a rank holds none of the k being C(E - E/ep, k) / C(E, k)."""
    if ep <= 1:
        return float(min(k, 1))
    misses = math.comb(experts - experts // ep, k) / math.comb(experts, k)
    return ep * (1.0 - misses)


def wire_bytes_per_element(cfg: ParallelConfig) -> tuple[float, float]:
    """(dispatch, combine) bytes per hidden-state element on the wire. The dispatch carries tokens to
    the experts (in the forward, and the output gradients to them in the backward); the combine
    carries results back (the expert outputs, and the input gradients in the backward).

    - alltoall and allgather (Megatron-Core token_dispatcher.py): the dispatcher permutes and sends
      the layer's BF16 hidden states; under FP8 the cast happens inside the expert GEMM (Transformer
      Engine's GroupedLinear), after the communication. Megatron's flex dispatcher passes the same BF16
      tensor to DeepEP (fused_a2a.py FusedDispatch) and to HybridEP ("we do not support fp8 dispatch").
    - deepep under precision fp8 (DeepSeek-V3 report §3.3.3, Low-Precision Communication): the
      activation before the MoE up-projection is quantised to FP8 and then dispatched, and so is the
      activation gradient before the down-projection; both combines stay in BF16. DeepEP's README
      benchmarks "V3's configuration": FP8 dispatching, BF16 combining.
    """
    if cfg.dispatcher is Dispatcher.deepep and cfg.precision is Precision.fp8:
        return FP8_BYTES_PER_ELEMENT, BF16_BYTES_PER_ELEMENT
    return BF16_BYTES_PER_ELEMENT, BF16_BYTES_PER_ELEMENT


def dispatch_comm_parts(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec,
                        groups: dict) -> tuple[float, float, float]:
    """(dispatch, combine, shared) seconds of one MoE block's communication in one direction, one
    micro-batch, before any overlap: the token dispatch (all-to-all, then the expert-TP all-gather),
    the combine (expert-TP reduce-scatter, then the all-to-all back), and the shared experts' TP
    collectives, which run with the attention side of the layer. The backward moves the same bytes
    the other way. groups: collectives.group_layout (ep, etp, ep_etp, tp)."""
    h, k = model.hidden_size, model.experts_per_token
    t_in = tokens_in(cfg)
    load = load_factor(cfg)
    dispatch_b, combine_b = wire_bytes_per_element(cfg)
    dispatch = combine = shared = 0.0
    if cfg.dispatcher is Dispatcher.allgather:
        group = groups["ep_etp"]
        if group.size > 1:
            gathered = t_in * group.size * h
            dispatch = collective_time_s("all_gather", dispatch_b * gathered, group, cluster)
            combine = collective_time_s("reduce_scatter", combine_b * gathered, group, cluster)
    else:
        if cfg.ep > 1:
            # Each rank sends T_in k copies; the busiest receiver takes `load` times the mean.
            copies = t_in * k * load
            if (cfg.dispatcher is Dispatcher.deepep and model.routing_group_limit
                    and groups["ep"].size > groups["ep"].ranks_per_node):
                # DeepEP with group-limited routing sends each token across the network at most once
                # per node it targets, then forwards it over NVLink (DeepSeek-V3 report §3.2.2: at most
                # 4 nodes); Megatron's alltoall sends every copy to its rank (NCCL all_to_all_single).
                copies *= min(k, model.routing_group_limit) / k
            elif cfg.dispatcher is Dispatcher.deepep and groups["ep"].size <= groups["ep"].ranks_per_node:
                # Within a node DeepEP sends each token once to every rank holding one of its experts
                # (get_dispatch_layout's is_token_in_rank and num_tokens_per_rank; the rank runs all its
                # local experts on the one copy), where Megatron's alltoall sends a copy per expert.
                copies *= ranks_per_token(model.num_experts, k, cfg.ep) / k
            dispatch += collective_time_s("all_to_all", dispatch_b * copies * h, groups["ep"], cluster)
            combine += collective_time_s("all_to_all", combine_b * copies * h, groups["ep"], cluster)
        if cfg.expert_tp > 1 and cfg.sequence_parallel:
            # Expert TP: all-gather the received copies over etp before the experts, reduce-scatter after.
            gathered = routed_rows(model, cfg) * h
            dispatch += collective_time_s("all_gather", dispatch_b * gathered, groups["etp"], cluster)
            combine += collective_time_s("reduce_scatter", combine_b * gathered, groups["etp"], cluster)
    if model.num_shared_experts and cfg.tp > 1 and cfg.sequence_parallel:
        # Shared experts are a TP-split MLP: all-gather before, reduce-scatter after, like a dense block.
        activation = 2 * cfg.mbs * cfg.seq / cfg.cp * h
        shared = (collective_time_s("all_gather", activation, groups["tp"], cluster)
                  + collective_time_s("reduce_scatter", activation, groups["tp"], cluster))
    return dispatch, combine, shared


def dispatch_comm_s(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec, groups: dict) -> float:
    """Seconds of one MoE block's token dispatch and combine (and shared-expert collectives), forward +
    backward, one micro-batch, before any overlap (dispatch_comm_parts, both directions)."""
    return 2 * sum(dispatch_comm_parts(model, cfg, cluster, groups))
