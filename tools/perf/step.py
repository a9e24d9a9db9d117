"""One training step, built bottom-up: per-stage compute + exposed communication, composed by the
pipeline simulator, then the data-parallel gradient exchange and the optimizer step.

    step_s = pipeline makespan (stage compute, exposed TP/CP/EP communication, bubbles, p2p)
           + exposed data-parallel communication + optimizer step

With moe_a2a_overlap (Megatron's combined 1F1B) a stage also carries the all-to-all its micro-batch
hides when it runs paired and when its backward runs alone (combined_1f1b.py); the simulator runs
the steady state as combined steps (StageWork.paired_s) and the warm-up and cool-down alone.

The breakdown is taken on the critical (busiest) stage and sums to step_s:
compute + comm/tp + comm/cp + comm/ep + bubble + comm/dp + optimizer.

One FLOPs convention (model_flops_per_step): what is counted is what is timed.
- mfu / tflops_per_gpu: model FLOPs, 3 x forward, no recompute, with the attention scores counted
  causally (half), as the kernels that skip masked blocks run them and as Megatron-Core counts them
  today (num_floating_point_operations: "only half of the attention matrix is non-zero"; Llama 3
  Table 4), against the dense peak of the precision used.
- mfu_full_attention / tflops_per_gpu_full_attention: the same with attention counted without the
  causal discount, the PaLM convention (Chowdhery et al. 2022 App. B; Narayanan et al. 2021 Eq. 3)
  that Korthikanti et al. 2022, FlashAttention and MosaicML report. It counts masked work no kernel
  runs, so at long sequence it can pass hfu and even 100%; compare published PaLM-convention figures
  with it, never plan with it.
- hfu / hardware_tflops_per_gpu: the FLOPs the kernels run, which are the FLOPs compute.py times:
  attention causal under flash (the kernel skips masked blocks), full under eager, plus recompute
  and the MTP modules. No kernel runs above its peak x efficiency, so 0 < mfu <= hfu <= the
  largest efficiency constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainplan.tools.perf import compute, finetune, host, layer_compute
from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.perf.collectives import collective_time_s, group_layout
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.perf.data_parallel import (ComputeWindow, data_parallel_s, dp_exchange_s, fsdp_units,
                                                 zero2_reduce_scatters)
from trainplan.tools.config.stages import model_layers_per_stage
from trainplan.tools.perf.combined_1f1b import LayerNodes, chunk_layers, hidden_per_microbatch_s, layer_nodes
from trainplan.tools.perf.moe import dispatch_comm_parts, dispatch_comm_s
from trainplan.tools.perf.pipeline import combined_steps, simulate
from trainplan.tools.perf.pipeline_closed_form import StageTimes
from trainplan.tools.perf.activations import offloaded_stage_bytes
from trainplan.tools.perf.overlap import overlapped_s
from trainplan.tools.perf.state_bytes import OFFLOAD_BYTES_PER_PARAM, adam_step_bytes
from trainplan.tools.perf.recompute import recomputed_forward_s
from trainplan.tools.hardware.specs import ClusterSpec, ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Schedule
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.perf.pipeline_p2p import blocking_p2p_s, p2p_s
from trainplan.tools.perf.step_flops import model_flops_per_step

@dataclass
class StageWork:
    """Seconds one stage spends on one micro-batch."""

    forward_s: float
    backward_s: float            # B + W, including recompute
    weight_grad_s: float         # the W part of backward_s
    compute_s: float             # pure compute of forward + backward
    comm_s: dict[str, float] = field(default_factory=dict)   # exposed, per micro-batch
    # Megatron's combined 1F1B (moe_a2a_overlap; combined_1f1b.py): seconds of the micro-batch's
    # all-to-all hidden when its forward and its backward each run in a combined step with another
    # micro-batch (paired), and when its backward runs alone (backward_s already has that one off).
    paired_hidden_s: float = 0.0
    alone_hidden_s: float = 0.0

    @property
    def paired_s(self) -> float:
        """Seconds of one combined step: a forward and a backward of this stage, of two micro-batches."""
        return self.forward_s + self.backward_s + self.alone_hidden_s - self.paired_hidden_s


@dataclass
class StepResult:
    step_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    tflops_per_gpu_full_attention: float
    mfu_full_attention: float
    bubble_fraction: float
    peak_tflops: float
    breakdown: dict[str, float]
    pipeline: dict

    def to_dict(self) -> dict:
        return {
            "step_s": self.step_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tflops_per_gpu": self.tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "tflops_per_gpu_full_attention": self.tflops_per_gpu_full_attention,
            "mfu_full_attention": self.mfu_full_attention,
            "bubble_fraction": self.bubble_fraction,
            "peak_tflops": self.peak_tflops,
            "mfu_denominator": (f"dense {self.pipeline['precision'].upper()} peak, {self.peak_tflops:g} TFLOP/s per GPU; "
                                f"{finetune.FLOPS_CONVENTION[finetune.Method(self.pipeline['method'])]}, "
                                "attention scores counted causally, as the kernels run them "
                                "(mfu_full_attention: without the causal discount, the PaLM convention; "
                                f"hfu: the FLOPs the kernels run, {self.pipeline['attention']} attention, "
                                "with recompute)"),
            "breakdown": self.breakdown,
        }


def stage_layers(model: ModelSpec, pp: int) -> list[list[int]]:
    """The layer indices of each pipeline stage (stages.model_layers_per_stage's split)."""
    counts = model_layers_per_stage(model, pp)
    stages, start = [], 0
    for n in counts:
        stages.append(list(range(start, start + n)))
        start += n
    return stages


def column_parallel_backward_s(layer: compute.OpTimes, model: ModelSpec, is_moe: bool) -> tuple[float, float]:
    """(input-gradient, weight-gradient) seconds of the layer's column-parallel GEMMs (QKV, and fc1 of a
    dense MLP): the windows Megatron's backward hides tensor-parallel collectives behind. fc1's share
    of the MLP's GEMM time is its share of the MLP's FLOPs: 2 of 3 matrices when the MLP is gated."""
    dgrad = layer.backward_input_s.get("attention/qkv", 0.0)
    wgrad = layer.backward_weight_s.get("attention/qkv", 0.0)
    if not is_moe:
        fc1_share = (2 if model.gated_mlp else 1) / (3 if model.gated_mlp else 2)
        dgrad += fc1_share * layer.backward_input_s.get("mlp", 0.0)
        wgrad += fc1_share * layer.backward_weight_s.get("mlp", 0.0)
    return dgrad, wgrad


def tp_comm_s(cfg: ParallelConfig, cluster: ClusterSpec, groups: dict, activation_bytes: float, blocks: int,
               column_backward: tuple[float, float], gemm_s: float) -> float:
    """Exposed tensor-parallel seconds of one layer, forward + backward, for one micro-batch.

    With sequence parallelism (Korthikanti et al. 2022; Megatron-Core tensor_parallel/layers.py,
    LinearWithGradAccumulationAndAsyncCommunication), per attention or MLP block:
    - forward: all-gather before the column-parallel GEMM, reduce-scatter after the row-parallel one,
      each on the critical path;
    - backward: the row-parallel GEMM's output gradient is all-gathered before anything can run
      (exposed); the column-parallel GEMM re-gathers its sequence-sharded input for the weight
      gradient while its input gradient is computed, and reduce-scatters that input gradient while
      its weight gradient is computed (async collectives, CUDA_DEVICE_MAX_CONNECTIONS=1 orders them
      first), so those two hide behind the column-parallel GEMMs (overlapped_s).
    Without sequence parallelism: one all-reduce per block each way, exposed (the 2021 Megatron-LM
    the SC21 and GPT-3 runs used had no asynchronous backward all-reduce).
    With tp_comm_overlap, Transformer Engine's userbuffers split each GEMM and pipeline its
    collectives under the chunks: all of them hide behind the layer's GEMMs."""
    group = groups["tp"]
    if cfg.sequence_parallel:
        gather = collective_time_s("all_gather", activation_bytes, group, cluster)
        scatter = collective_time_s("reduce_scatter", activation_bytes, group, cluster)
        forward = blocks * (gather + scatter)
        if cfg.tp_comm_overlap:
            return float(overlapped_s(forward + blocks * (2 * gather + scatter), gemm_s))
        dgrad_s, wgrad_s = column_backward
        backward = (blocks * gather + overlapped_s(blocks * gather, dgrad_s)
                    + overlapped_s(blocks * scatter, wgrad_s))
        return float(forward + backward)
    per_pass = blocks * collective_time_s("all_reduce", activation_bytes, group, cluster)
    if cfg.tp_comm_overlap:
        return float(overlapped_s(2 * per_pass, gemm_s))
    return float(2 * per_pass)


NOT_GEMM_KEYS = ("attention/core", "elementwise", "moe/permute", "moe/sort", "moe/host")
"""OpTimes keys that are not GEMMs: what a layer's GEMM window (TE's userbuffers overlap) leaves out."""


def _layer_comm_s(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec, groups: dict,
                  layer_index: int, layer: compute.OpTimes) -> dict[str, float]:
    """Exposed communication of one layer, forward + backward, for one micro-batch, behind the windows of
    its compute `layer`:

    attention_s: (forward, backward) seconds of the attention core, the window that hides the
    context-parallel ring; compute_per_layer_s: the layer's whole compute, which DualPipe overlaps
    with the expert all-to-all; gemm_s: the layer's GEMMs (TE's userbuffers window);
    column_backward: column_parallel_backward_s, the window of Megatron's asynchronous backward.
    """
    is_moe = layer_index in model.moe_layers
    attention_s = (layer.forward_s.get("attention/core", 0.0), layer.backward_input_s.get("attention/core", 0.0))
    compute_per_layer_s = layer.forward + layer.backward_input + layer.backward_weight
    gemm_s = compute_per_layer_s - sum(part[k] for part in (layer.forward_s, layer.backward_input_s,
                                                            layer.backward_weight_s)
                                       for k in NOT_GEMM_KEYS if k in part)
    column_backward = column_parallel_backward_s(layer, model, is_moe)
    tokens = cfg.mbs * cfg.seq / cfg.cp
    h = model.hidden_size
    activation_bytes = 2 * tokens * h
    comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    if cfg.tp > 1:
        # An MoE block's MLP-side collectives are the dispatcher's (moe.dispatch_comm_s).
        comm["tp"] = tp_comm_s(cfg, cluster, groups, activation_bytes, 1 if is_moe else 2, column_backward, gemm_s)
    if cfg.cp > 1:
        # Ring attention: cp-1 exchanges of this rank's K and V (backward: K, V and their gradients),
        # each hidden behind the attention block of the previous chunk.
        if model.attention_type == "mla":
            kv_width = model.num_attention_heads / cfg.tp * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
        else:
            kv_width = 2 * max(1.0, model.num_kv_heads / cfg.tp) * model.head_dim
        kv_bytes = 2 * tokens * kv_width
        ring_forward = (cfg.cp - 1) * collective_time_s("p2p", kv_bytes, groups["cp"], cluster)
        comm["cp"] = float(overlapped_s(ring_forward, attention_s[0]) + overlapped_s(2 * ring_forward, attention_s[1]))
    if is_moe:
        # Token dispatch and combine, expert-TP and shared-expert collectives (moe.py). Under
        # moe_a2a_overlap all of it counts here, and stage_work takes off what Megatron's combined
        # 1F1B hides (combined_1f1b.py), which depends on whether a chunk runs paired or alone.
        total = dispatch_comm_s(model, cfg, cluster, groups)
        if cfg.schedule is Schedule.dualpipe:
            # DualPipe (DeepSeek-V3 report §3.2.1) runs a forward chunk and a backward chunk together,
            # layer by layer, so each one's all-to-all hides under the other's compute; only the
            # excess shows. Its pp-1 unpaired warm-up forwards and cool-down backwards are not seen here.
            total = float(overlapped_s(total, compute_per_layer_s))
        comm["ep"] = total
    return comm


def combined_nodes(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec, groups: dict, layer_index: int,
                   layer: compute.OpTimes, layer_comm: dict[str, float]) -> LayerNodes:
    """One layer's nodes in Megatron's combined 1F1B (combined_1f1b.layer_nodes): its compute, its
    dispatch and combine, and its other exposed communication (TP, CP, the shared experts'). A frozen
    base (LoRA, QLoRA) has no weight gradients to run beside the all-to-all."""
    if is_lora(cfg.method):
        layer = compute.OpTimes(layer.forward_s, layer.backward_input_s, {})
    dispatch = combine = shared = 0.0
    if layer_index in model.moe_layers:
        dispatch, combine, shared = dispatch_comm_parts(model, cfg, cluster, groups)
    return layer_nodes(layer, dispatch, combine, layer_comm["tp"] + layer_comm["cp"] + 2 * shared)


def stage_work(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec, groups: dict,
               stage: int, layer_ids: list[int], block_cache: dict | None = None) -> StageWork:
    """Forward/backward seconds of one stage for one micro-batch, with exposed per-layer comm.

    block_cache: the dense and MoE blocks' times and comm, which no recompute knob changes, shared
    by calls whose configs differ at most in recompute and recompute_modules (the search's)."""
    gpu = cluster.gpu
    times = compute.OpTimes()
    comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    cache: dict[bool, tuple[compute.OpTimes, dict[str, float]]] = {} if block_cache is None else block_cache

    def block(index: int) -> tuple[compute.OpTimes, dict[str, float]]:
        """Compute and exposed comm of one block; dense and MoE blocks are each timed once."""
        key = index in model.moe_layers
        if key not in cache:
            layer = layer_compute.layer_times(model, cfg, gpu, index)
            if is_lora(cfg.method):   # frozen base, adapters, NF4 dequantisation: before the host floor
                layer = finetune.adapt_layer_times(layer, model, cfg, gpu, key)
            layer_comm = _layer_comm_s(model, cfg, cluster, groups, index, layer)
            host.add_host_floor(layer, model, cfg, key, sum(layer_comm.values()))   # small work waits on the host
            cache[key] = (layer, layer_comm)
        return cache[key]

    def add(layer: compute.OpTimes, layer_comm: dict[str, float]) -> None:
        nonlocal times
        times = times.merged(layer)
        for kind, seconds in layer_comm.items():
            comm[kind] += seconds

    for index in layer_ids:
        add(*block(index))
    nodes = [combined_nodes(model, cfg, cluster, groups, i, *block(i)) for i in layer_ids] if cfg.moe_a2a_overlap else []
    if stage == 0:
        times = times.merged(layer_compute.embedding_times(model, cfg, gpu))
    if stage == cfg.pp - 1:
        times = times.merged(layer_compute.head_times(model, cfg, gpu))
        for _ in range(model.num_mtp_layers):
            # A DeepSeek-V3 MTP module trains with the model: eh_proj (2h -> h), one more block
            # shaped like the last main block, and another pass through the shared LM head.
            eh_proj = compute.OpTimes()
            compute.linear(eh_proj, "mtp", cfg.mbs * cfg.seq / cfg.cp, 2 * model.hidden_size,
                           model.hidden_size / cfg.tp, gpu, cfg.precision)
            times = times.merged(eh_proj).merged(layer_compute.head_times(model, cfg, gpu))
            add(*block(model.num_layers - 1))
            if cfg.moe_a2a_overlap:   # an MTP layer is one more layer of the chunk's schedule plan
                nodes.append(combined_nodes(model, cfg, cluster, groups, model.num_layers - 1,
                                            *block(model.num_layers - 1)))

    if is_lora(cfg.method):   # frozen base: no weight gradients; adapter GEMMs; NF4 dequantisation
        times = finetune.adapt_stage_times(times, model, cfg, gpu, layer_ids, set(model.moe_layers))
    recompute_s = recomputed_forward_s(model, cfg, gpu, times, layer_ids)   # recompute.py
    forward = times.forward
    backward = times.backward_input + times.backward_weight + recompute_s
    # Exposed per-layer communication lands on the forward and backward in the 1:2 ratio of their
    # compute; the split only shapes the pipeline schedule, the total is exact.
    if cfg.offload_modules:   # offload.py: one micro-batch's copies each way over the full-duplex PCIe link
        copy_s = offloaded_stage_bytes(model, cfg, layer_ids) / (cluster.host_link_gb_s * 1e9)
        comm["offload"] = float(overlapped_s(copy_s, forward + backward))
    exposed = sum(comm.values())
    paired_hidden = alone_hidden = 0.0
    if nodes:   # the rank's chunks: its layers split over its virtual stages
        paired_hidden, alone_hidden = hidden_per_microbatch_s(chunk_layers(nodes, cfg.vpp))
    return StageWork(
        forward_s=forward + exposed / 3,
        backward_s=backward + 2 * exposed / 3 - alone_hidden,
        weight_grad_s=times.backward_weight,
        compute_s=forward + backward,
        comm_s=comm,
        paired_hidden_s=paired_hidden,
        alone_hidden_s=alone_hidden,
    )


def optimizer_s(zero, dense_params, expert_params, dense_shard: int, expert_shard: int, cluster: ClusterSpec,
                offload: bool = False, step_bytes: float = adam_step_bytes(False, False)):
    """Seconds of one rank's optimizer step on the parameters it owns: ZeRO >= 1 shards dense
    parameters over `dense_shard` ranks and expert parameters over `expert_shard` ranks, their ZeRO shard groups
    (dp_shard*cp and the expert-data-parallel group over the replicas; dp*cp and the whole
    expert-data-parallel group with full sharding).

    On the GPU: a memory-bound pass of `step_bytes` per parameter (state_bytes.adam_step_bytes: 30; pure_bf16 14; with
    8-bit moments 18 and 10). With
    optimizer_offload (ZeRO-Offload):
    fp32 gradients down and bf16 weights up over the host link (cluster.host_link_gb_s), and a CPU Adam
    (cluster.cpu_adam_params_per_s). numpy-friendly in zero and
    the parameter counts."""
    sharded = (dense_params / np.where(zero >= 1, dense_shard, 1)
               + expert_params / np.where(zero >= 1, expert_shard, 1))
    if offload:
        pcie_s = sharded * OFFLOAD_BYTES_PER_PARAM / (cluster.host_link_gb_s * 1e9)
        return pcie_s + sharded / cluster.cpu_adam_params_per_s
    return compute.memory_bound_time_s(step_bytes * sharded, cluster.gpu, kernels=4)


def rank_params(model: ModelSpec, pp: int, tp: int, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters one rank of each pipeline stage holds after TP and EP sharding."""
    dense, expert = stage_params(model, pp)
    return dense / tp, expert / (tp * ep)


def stage_params(model: ModelSpec, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters of each pipeline stage before TP/EP sharding: its blocks, plus the
    embedding on the first stage and the final norm and LM head (a tied copy too) on the last."""
    counts = count_params(model)
    dense, expert, start = np.zeros(pp), np.zeros(pp), 0
    for s, n in enumerate(model_layers_per_stage(model, pp)):
        dense[s] = sum(counts.layers[i].non_expert for i in range(start, start + n))
        expert[s] = sum(counts.layers[i].routed_experts for i in range(start, start + n))
        start += n
    dense[0] += counts.embedding
    dense[-1] += counts.final_norm + (counts.lm_head or counts.embedding)
    return dense, expert


def compute_window(cfg: ParallelConfig, stages: list[list[int]], forward_s, backward_s, num_microbatches,
                   schedule_code, vpp) -> ComputeWindow:
    """What a stage's data-parallel exchange hides behind (data_parallel.ComputeWindow): its micro-batch times,
    ZeRO-2's reduce-scatters under the schedule and ZeRO-3's units. numpy-friendly as
    data_parallel_and_optimizer_s."""
    return ComputeWindow(forward_s, backward_s, num_microbatches,
                         zero2_reduce_scatters(schedule_code, num_microbatches, cfg.pp, vpp), fsdp_units(stages),
                         cfg.overlap_grad_reduce)


def data_parallel_and_optimizer_s(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec, groups: dict,
                                  stages: list[list[int]], zero, window: ComputeWindow):
    """(exposed data-parallel seconds, optimizer seconds) of a step, each on its slowest stage.

    The sizes, the method and the precision knobs come from cfg; zero and the window's micro-batches
    may be numpy columns (rows x 1) with its forward_s/backward_s rows x stages (compute_window), so the
    layout search evaluates many layouts with the very terms step_time uses for one. Trainable parameters
    are all of them, or only the adapters (LoRA/QLoRA; finetune.py), whose frozen base ZeRO-3 still
    all-gathers."""
    dense, expert = rank_params(model, cfg.pp, cfg.tp, cfg.ep)
    lora = is_lora(cfg.method)
    train_dense, train_expert = ((np.array(p) for p in zip(*finetune.trainable_stage_params(model, cfg, stages)))
                                 if lora else (dense, expert))
    exposed = data_parallel_s(zero, train_dense, train_expert, groups, cluster, window, cfg.bf16_grads or cfg.pure_bf16)
    if lora:   # the frozen base, sharded under ZeRO-3: all-gathered (bf16, or NF4) with no gradient to reduce
        scale = finetune.frozen_bytes_per_param(cfg.method, cfg.double_quant) / 2
        frozen = sum(dp_exchange_s(3, params * scale, group, cluster, window, 0)
                     for params, group in ((dense, groups["dp_shard"]), (expert, groups["edp_shard"])))
        exposed = exposed + np.where(np.asarray(zero) >= 3, frozen, 0.0)
    zero_shards = np.where(np.asarray(zero) >= 1, groups["dp_shard"].size, 1)
    optimizer = (optimizer_s(zero, train_dense, train_expert, groups["dp_shard"].size, groups["edp_shard"].size,
                             cluster, cfg.optimizer_offload, adam_step_bytes(cfg.pure_bf16, cfg.optimizer_8bit))
                 + finetune.paged_optimizer_s((train_dense + train_expert) / zero_shards, cfg.method,
                                              cluster.host_link_gb_s, cfg.optimizer_8bit))
    shape = np.broadcast_shapes(np.shape(window.forward_s), np.shape(exposed), np.shape(optimizer))
    return (np.max(np.broadcast_to(exposed, shape), axis=-1), np.max(np.broadcast_to(optimizer, shape), axis=-1))


def step_time(model: ModelSpec, cfg: ParallelConfig, cluster: ClusterSpec, record_timeline: bool = False) -> StepResult:
    """Step time, throughput, MFU and the breakdown of one layout. cfg.gbs must be set."""
    if cfg.gbs is None:
        raise ValueError("step_time needs a global batch size (gbs)")
    groups = group_layout(cfg, cluster.gpus_per_node)
    stages = stage_layers(model, cfg.pp)
    work = [stage_work(model, cfg, cluster, groups, s, ids) for s, ids in enumerate(stages)]
    m = cfg.num_microbatches

    hop_s = float(p2p_s(model, cfg, groups, cluster))
    forward_s = np.array([w.forward_s for w in work])
    backward_s = np.array([w.backward_s for w in work])
    blocked_f = blocked_b = np.zeros(cfg.pp)
    if cfg.blocking_p2p:   # the transfers occupy the ranks (blocking_p2p_s); none is left to wait for
        blocked_f, blocked_b = blocking_p2p_s(hop_s, cfg.pp)
        hop_s = 0.0
    schedule = cfg.schedule if cfg.pp > 1 else Schedule.one_f_one_b
    # Megatron's combined 1F1B: the steady state's forward and backward run as one op (combined_1f1b.py).
    paired_s = list(np.array([w.paired_s for w in work]) + blocked_f + blocked_b) if cfg.moe_a2a_overlap else None
    stage_times = StageTimes(forward_s=list(forward_s + blocked_f), backward_s=list(backward_s + blocked_b),
                             weight_grad_s=[w.weight_grad_s for w in work], paired_s=paired_s)
    result = simulate(schedule, cfg.pp, m, vpp=cfg.vpp, stages=stage_times, p2p_s=hop_s,
                      record_timeline=record_timeline)
    makespan = result.makespan_s

    critical = max(range(cfg.pp), key=lambda r: result.stage_busy_s[r])
    if cfg.schedule is Schedule.dualpipe and cfg.pp > 1:
        # DualPipe rank r runs stage r for half the micro-batches and stage pp-1-r for the other half.
        rank_stages = [(critical, m / 2), (cfg.pp - 1 - critical, m / 2)]
    else:
        rank_stages = [(critical, m)]
    # The slowest stage's data-parallel exchange and optimizer step (each stage's rank does its own).
    window = compute_window(cfg, stages, forward_s, backward_s, m, SCHEDULE_CODES[cfg.schedule], cfg.vpp)
    dp_exposed, optimizer = (float(x) for x in data_parallel_and_optimizer_s(model, cfg, cluster, groups, stages,
                                                                             cfg.zero, window))
    step_s = makespan + dp_exposed + optimizer

    compute_s = sum(n * work[s].compute_s for s, n in rank_stages)
    comm = {f"comm/{k}": sum(n * work[s].comm_s[k] for s, n in rank_stages) for k in work[critical].comm_s}
    if cfg.moe_a2a_overlap:   # what the combined steps and the backwards that run alone hide, chunk by chunk
        pairs = combined_steps(schedule, cfg.pp, m, cfg.vpp, critical)
        alone = m * cfg.vpp - pairs
        comm["comm/ep"] -= (pairs * work[critical].paired_hidden_s + alone * work[critical].alone_hidden_s) / cfg.vpp
    if cfg.blocking_p2p:
        comm["comm/pp"] = sum(n * (blocked_f[s] + blocked_b[s]) for s, n in rank_stages)
    bubble_s = makespan - compute_s - sum(comm.values())
    if abs(bubble_s) <= 1e-9 * makespan:  # no bubble (pp=1, or none on the critical rank), up to rounding
        bubble_s = 0.0
    breakdown = {"compute": compute_s, **comm, "bubble": bubble_s, "comm/dp": dp_exposed, "optimizer": optimizer}

    flops = model_flops_per_step(model, cfg)
    gpus = cfg.num_gpus
    peak = cluster.gpu.peak_tflops(cfg.precision)
    tflops = flops.model / step_s / gpus / 1e12
    tflops_full_attention = flops.model_full_attention / step_s / gpus / 1e12
    hardware_tflops = flops.hardware / step_s / gpus / 1e12
    tokens_per_s = cfg.gbs * cfg.seq / step_s
    return StepResult(
        step_s=step_s,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / gpus,
        tflops_per_gpu=tflops,
        hardware_tflops_per_gpu=hardware_tflops,
        mfu=tflops / peak,
        hfu=hardware_tflops / peak,
        tflops_per_gpu_full_attention=tflops_full_attention,
        mfu_full_attention=tflops_full_attention / peak,
        bubble_fraction=result.bubble_fraction,
        peak_tflops=peak,
        breakdown=breakdown,
        pipeline={**result.to_dict(), "precision": cfg.precision.value, "attention": cfg.attention.value,
                  "method": cfg.method.value,
                  "critical_stage": critical},
    )
