"""Per-GPU memory of one layout: weights, gradients, optimizer states, activations and other.

Units: bytes inside, GiB (2^30 B) in every result. Memory is reported for the most loaded rank;
``per_stage`` holds every pipeline rank. Symbols: s sequence length, b micro-batch (mbs), h hidden
size, a query heads, g key/value heads, d head dim, f MLP width, V vocabulary, t tensor-parallel
size, r = t with sequence parallelism (else 1), E routed experts, k experts per token.

Model states (Megatron mixed precision, the project's default):
  bf16 weights 2 B/param, fp32 gradient buffer 4 B/param (2 with bf16_grads: DeepSpeed's 16 B/param),
  fp32 master weights + Adam m + Adam v 12 B/param.
  ZeRO-1 shards the 12 B over the data-parallel group, which for non-expert parameters is dp*cp
  (Megatron's distributed optimizer shards over the data-parallel-with-context group); ZeRO-2 also
  shards the gradients, ZeRO-3 also the weights (FSDP full shard). Routed-expert parameters are
  divided over ep (and over t: Megatron's expert tensor parallelism defaults to t) and their
  states sharded over the expert-data-parallel group dp*cp/ep. Hybrid sharding (dp_shard < dp,
  HSDP) shards over dp_shard*cp ranks only and keeps dp/dp_shard replicas of each shard, so the
  sharded states are divided by dp_shard*cp (experts: by their group over the replicas), and the
  replicas' all-reduce has a communicator of its own (one more NCCL group in "other").
  optimizer_offload moves the 12 B/param and the optimizer step to the CPU: GPU optimizer = 0.
  That is how Megatron's distributed optimizer ("bf16 param, fp32 grads: 18, 6 + 12/d", Megatron-LM
  README, Distributed Optimizer) and DeepSpeed ZeRO (a bf16 partition beside "a partition of the fp32
  master weights", deepspeed/runtime/zero/stage3.py _create_fp32_partitions; the ZeRO paper's 2 + 2 +
  12 with fp16 gradients) store them.
  fp32_params (PyTorch FSDP and FSDP2 mixed precision): the parameters themselves stay fp32 and are
  the master copy. FSDP's MixedPrecision: "Outside forward and backward, the *sharded* parameters are
  kept in full precision (e.g. for the optimizer step)"; FSDP2's MixedPrecisionPolicy: "The optimizer
  step uses the sharded parameter in the original dtype" and FSDP "does not require any extra memory
  to keep a high-precision copy of the parameters" (torch/distributed/fsdp/api.py and
  _fully_shard/_fsdp_api.py); param_dtype=bf16 sets only the unsharded, all-gathered copy. So the
  optimizer keeps the moments (OPTIMIZER_BYTES - MASTER_BYTES), the fp32 parameters (MASTER_BYTES)
  are sharded as the optimizer states are (weights/fp32_params; on the CPU with optimizer_offload,
  FSDP's CPUOffload), and the bf16 copy exists only unsharded: through the step with ZeRO 0-2
  (NO_SHARD, SHARD_GRAD_OP keep it from forward to backward), only the gathered layers with ZeRO-3
  (weights/zero3_prefetch). ZeRO-3 then holds 4 + 4 + 8 = 16 B/param of sharded states (14 with
  bf16_grads) where Megatron's layout holds 18 (Megatron-LM README: "fp32 param, fp32 grads: 16,
  8 + 8/d"); ZeRO 0-2 hold the same bytes either way.
  optimizer_8bit (bitsandbytes AdamW8bit; Dettmers et al. 2022): Adam's m and v in 8 bits with an fp32 absmax per
  2048-value block, 2.004 B/param (MOMENTS_BYTES_8BIT) in place of the moments above; the master as it was.
  pure_bf16 (torchtune's dtype bf16 recipes; NeMo AutoModel's own model classes, cast to bf16 and stepped by
  torch.optim.Adam): no master at all; bf16 parameters (2), bf16 gradients (2) and Adam moments created with
  torch.zeros_like(param), bf16 (2 + 2): 8 B/param (OPTIMIZER_BYTES_PURE_BF16).
  Transients: ZeRO-3 holds two unsharded layers (the one computing and the prefetched next one);
  ZeRO-2/3 hold one unsharded layer of gradients before its reduce-scatter; with the interleaved
  schedule ZeRO-2 holds one model chunk's (it reduce-scatters per group of micro-batches,
  data_parallel.zero2_reduce_scatters; Llama 3 405B's FSDP sharded its gradients this way, §3.3.2).
  TP shards every GEMM weight (q/k/v and MLP column-parallel, o and MLP-down row-parallel), the
  embedding and LM head (vocab-parallel, rows V/t), and column-parallel biases. Replicated on every
  TP rank: norm weights, row-parallel biases (o, MLP down), the router, MLA's down projections and
  their norms (Megatron builds them as duplicated TELinear), the shared-expert gate, and key/value
  heads when g < t (each rank keeps one kv head).
  Pipeline stage i holds layers_per_stage(L, pp)[i] layers (fewer on the first and last stage when
  L does not divide); the first stage holds the embedding, the last the final norm and LM head. A
  tied head, or MTP modules (which share the embedding), put a second embedding copy on the last
  stage, as Megatron does. MTP modules sit on the last stage. Interleaved: rank i holds virtual
  stages i, i+pp, ... of layers_per_stage(L, pp*vpp). DualPipe: rank i holds stages i and pp-1-i,
  so parameters and their states are ~2x a 1F1B stage (DeepSeek-V3 paper, Table 2: "2x").
  fp8: weights keep the bf16 copy; Transformer Engine also caches, for every GEMM weight, an fp8
  copy and its fp8 transpose (Hopper fp8 GEMMs need both layouts for forward and dgrad) across
  micro-batches: +2 B/param on GEMM weights. Embedding, LM head, norms and router stay bf16.

Activations (activations.py): the tensors each block keeps per micro-batch, after Korthikanti et
al. 2022, TP/SP/CP and recompute (recompute.py), times the layers and in-flight micro-batches each
rank holds; plus the embedding, LM-head and MTP activations on the end stages and transients: one
layer's recompute working set, one MoE layer's all-to-all token buffers, and the offloaded tensors
of the two layers being copied to or from host memory (offload.py).

Gradients born in the backward: a one-GPU PyTorch training loop without gradient accumulation (torchtune's
single-device recipes, the Hugging Face Trainer without DDP or DeepSpeed; the states pure_bf16, fp32_params or a
LoRA/QLoRA adapter stand for those stacks) frees every .grad at optimizer.zero_grad() (set_to_none=True, the
default since PyTorch 2.0), and autograd allocates a parameter's gradient when the backward reaches it, as it
frees the activations that layer saved. The step's peak is then the weights, optimizer states and the larger of
activations and gradients, not their sum: the smaller is taken back from its own part (gradients/born_in_backward
when the activations are larger, the peak at the backward's start; activations/freed_in_backward otherwise, the
peak at its end). Megatron's contiguous gradient buffer, DDP's gradient buckets and accumulation over
micro-batches keep them for the whole step, so layouts with more GPUs or micro-batches count both.

Other: the CUDA context, NCCL communicator buffers, and the allocator reserve (ALLOCATOR_RESERVE_FRACTION):
what PyTorch's caching allocator holds beyond the live tensors; see the constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainplan.tools.core import assumptions
from trainplan.tools.perf import memory_hints
from trainplan.tools.perf.state_bytes import (FP8_WEIGHT_CACHE_BYTES, GRAD_BYTES, GRAD_BYTES_BF16, MASTER_BYTES,
                                              MOMENTS_BYTES_8BIT, OPTIMIZER_BYTES, OPTIMIZER_BYTES_BF16_MOMENTS,
                                              OPTIMIZER_BYTES_PURE_BF16,
                                              WEIGHT_BYTES)
from trainplan.tools.perf import offload as offload_rules
from trainplan.tools.perf import recompute as recompute_rules
from trainplan.tools.perf.activations import activation_layer, chunk_inflight, has_dropout, inflight, knob_arrays, seq_divisor
from trainplan.tools.config.codes import ATTENTION_CODES, PRECISION_CODES, RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.perf import finetune
from trainplan.tools.perf import loss as loss_rules
from trainplan.tools.hardware.counting import is_moe_layer
from trainplan.tools.hardware.specs import GPUSpec, ModelSpec
from trainplan.tools.config.contract import Layout, ParallelConfig
from trainplan.tools.perf.memory_ranks import (PARAM_KEYS, ModelParts, model_parts, per_rank_params,
                                              rank_data)
from trainplan.tools.config.resolve import module_applies
from trainplan.tools.core.enums import Precision, Recompute, Schedule

GIB = float(2**30)

CUDA_CONTEXT_GIB = assumptions.CUDA_CONTEXT_GIB.value
"""CUDA context of one process: 723 MiB on the first CUDA call (discuss.pytorch.org/t/73021)"""
NCCL_GIB_PER_GROUP = assumptions.NCCL_GIB_PER_GROUP.value
"""NCCL buffers per communicator that carries traffic: 544-688 MB measured per process group on
A100 NVLink (NVIDIA/nccl#964); we take 688 MB for each of the tp, pp, cp, dp and ep groups with
more than one rank. An NCCL all-to-all can take more (3.3 GB on 8xH100, NVIDIA/nccl#1685)."""
# MoE token buffers (activations/moe_token_buffers), transient: while one MoE layer combines (and
# again in its backward), the experts' bf16 outputs, s b k rows of h, are the all-to-all send buffer
# and a receive buffer of the same size holds what comes back (all_to_all_single needs distinct input
# and output; Megatron's MoEAlltoAllTokenDispatcher): 2 x 2 s b k h bytes with ep > 1; with ep = 1
# only the permuted copy, 2 s b k h. The dispatched copies kept for the backward are counted with
# the layer (moe/dispatched).
ALLOCATOR_RESERVE_FRACTION = assumptions.ALLOCATOR_RESERVE_FRACTION.value
"""The allocator reserve (other/allocator_reserve), a share of the activations. What nvidia-smi shows
beyond the live tensors is what PyTorch's caching allocator keeps reserved: freed blocks cached for
reuse, rounded up (512 B small blocks, 2 MiB pages; requests of 1-10 MiB carved from 20 MiB
segments) and split blocks that a larger request cannot use (fragmentation), plus short-lived
temporaries (a GEMM's output before its reduce-scatter, the optimizer's scratch). The churn comes
from the activations, allocated and freed in varied sizes every micro-batch; the model states sit in
buffers allocated once (Megatron's contiguous param/grad buffers), so the reserve scales with the
activations. Its size is Megatron's: theoretical_memory_usage.py multiplies the activations by 1.05
"for optimizer and miscellaneous temporaries". PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
shrinks the fragmentation part; a headroom_gib on top covers spikes."""

_NONE, _SELECTIVE, _FULL = (RECOMPUTE_CODES[m] for m in Recompute)
_GPIPE, _INTERLEAVED, _DUALPIPE = (SCHEDULE_CODES[s] for s in (Schedule.gpipe, Schedule.interleaved,
                                                               Schedule.dualpipe))
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "other")


@dataclass
class MemoryResult:
    """Memory of the most loaded rank, GiB (2^30 B)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float
    total: float
    capacity: float
    """the GPU's usable HBM, GiB (headroom not subtracted)"""
    fits: bool
    reason: str | None
    worst_stage: int
    """pipeline rank with the largest total"""
    per_stage: list[dict] = field(default_factory=list)
    """one dict per pipeline rank: stage, num_layers, inflight_microbatches and the components (GiB)"""
    breakdown: dict[str, float] = field(default_factory=dict)
    """worst stage, GiB, keys 'component/part[/tensor]'; each component's parts sum to it"""

    def to_dict(self) -> dict:
        """The result's memory_gib keys plus fits and reason."""
        out = {k: getattr(self, k) for k in (*COMPONENTS, "total", "capacity")}
        out.update(fits=self.fits, reason=self.reason)
        return out


# --- the core: every breakdown key for every rank ------------------------------------------------


def _core(m: ModelParts, rank: dict[str, np.ndarray], k: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Bytes per breakdown key, shape (candidates, pp); knob arrays k have shape (candidates, 1)."""
    model = m.spec
    t, ep, zero = k["tp"], k["ep"], k["zero"]
    et = k["etp"] if "etp" in k else t                      # expert TP (MoE Parallel Folding, moe.py)
    # ZeRO shard groups: dp_shard*cp ranks for the non-expert states (dp*cp with full sharding), and the
    # expert-data-parallel group over the dp/dp_shard replicas for the experts (hybrid sharding, Layout.dp_shard).
    dp_shard = k["dp_shard"] if "dp_shard" in k else k["dp"]
    replicas = k["dp"] / dp_shard
    group = dp_shard * k["cp"]
    expert_group = np.maximum(np.floor(t * k["dp"] * k["cp"] / (ep * et) / replicas), 1.0)
    first, last = rank["first"], rank["last"]
    embed_copy = last * (1 - first) * float(model.tie_word_embeddings or model.num_mtp_layers > 0)
    layers_ne, layers_ex = per_rank_params(m, rank, t, ep, et)
    mtp_ne, mtp_ex = per_rank_params(m, m.mtp_parts, t, ep, et)
    modules = {  # (non-expert, expert) parameters on this GPU
        "layers": (layers_ne, 0.0),
        "experts": (0.0, layers_ex),
        "embedding": (first * (m.embed_vocab / t + m.embed_repl) + embed_copy * m.embed_vocab / t, 0.0),
        "lm_head": (last * (m.head / t + m.final_norm), 0.0),
        "mtp": (last * mtp_ne, last * mtp_ex),
    }
    pure = k["pure_bf16"] > 0   # module doc: bf16 parameters, gradients and moments, no master
    grad_bytes = np.where((k["bf16_grads"] > 0) | pure, GRAD_BYTES_BF16, GRAD_BYTES)
    optimizer_bytes = np.where(pure, OPTIMIZER_BYTES_PURE_BF16,
                               np.where(k["bf16_moments"] > 0, OPTIMIZER_BYTES_BF16_MOMENTS, OPTIMIZER_BYTES))
    eight_bit = k["optimizer_8bit"] > 0   # module doc: the moments in 8 bits, the master (if any) as it was
    optimizer_bytes = np.where(eight_bit, np.where(pure, 0.0, MASTER_BYTES) + MOMENTS_BYTES_8BIT, optimizer_bytes)

    divisors = {z: (np.where(zero >= z, group, 1), np.where(zero >= z, expert_group, 1)) for z in (1, 2, 3)}

    def sharded(ne, ex, min_zero):
        """Parameters per GPU once ZeRO stage >= min_zero shards them over their data-parallel group."""
        over_ne, over_ex = divisors[min_zero]
        return ne / over_ne + ex / over_ex

    # fp32_params (module doc): the fp32 parameters are the master copy, sharded like the optimizer states;
    # the bf16 copy is held only unsharded, and where ZeRO-3 shards over more than one rank only as the
    # gathered layers (weights/zero3_prefetch; one rank gathers nothing and keeps its copy, as NO_SHARD does).
    fp32_params, on_gpu = k["fp32_params"] > 0, k["optimizer_offload"] < 1
    gathered_ne, gathered_ex = ((fp32_params & (zero >= 3) & (g > 1)).astype(float) for g in (group, expert_group))

    def bf16_copy(ne, ex):
        """The bf16 weights on this GPU: sharded by ZeRO-3, or, with fp32_params, gathered only per layer."""
        return WEIGHT_BYTES * sharded(ne * (1 - gathered_ne), ex * (1 - gathered_ex), 3)

    out: dict[str, np.ndarray] = {"weights/fp32_params": 0.0}
    master_on_gpu, optimizer_left = fp32_params & on_gpu, optimizer_bytes - np.where(fp32_params, MASTER_BYTES, 0.0)
    for name, (ne, ex) in modules.items():
        out[f"weights/{name}"] = bf16_copy(ne, ex)
        out["weights/fp32_params"] = out["weights/fp32_params"] + np.where(
            master_on_gpu, MASTER_BYTES * sharded(ne, ex, 1), 0.0)
        out[f"gradients/{name}"] = grad_bytes * sharded(ne, ex, 2)
        out[f"optimizer/{name}"] = np.where(on_gpu, optimizer_left * sharded(ne, ex, 1), 0.0)
    # fp8: TE's fp8 weight + transpose for GEMM weights (blocks and MTP), sharded like the weights.
    gemm_ne = layers_ne - rank["norm_router"] + last * (mtp_ne - m.mtp_parts["norm_router"])
    gemm_ex = layers_ex + last * mtp_ex
    fp8 = k["precision"] == PRECISION_CODES[Precision.fp8]
    out["weights/fp8_cache"] = np.where(fp8, FP8_WEIGHT_CACHE_BYTES, 0.0) * sharded(gemm_ne, gemm_ex, 3)
    # ZeRO transients: the largest block of the rank, unsharded over the groups that shard it.
    unit = 0.0
    for kind in ("dense", "moe"):
        parts = {key: rank[f"{kind}_{key}"] for key in PARAM_KEYS}
        ne, ex = per_rank_params(m, parts, t, ep, et)
        unit = np.maximum(unit, np.where(rank[f"n_{kind}"] > 0, ne * (group > 1) + ex * (expert_group > 1), 0.0))
    out["weights/zero3_prefetch"] = np.where(zero >= 3, 2 * WEIGHT_BYTES * unit, 0.0)
    # ZeRO-2 reduce-scatters a chunk's gradients after each group of its backward micro-batches with
    # the interleaved schedule (data_parallel.zero2_reduce_scatters), so a whole chunk is unsharded meanwhile.
    bucket_layers = np.where(k["vpp"] > 1, rank["chunk_layers"], 1.0)
    out["gradients/zero2_bucket"] = np.where(zero >= 2, grad_bytes * unit * bucket_layers, 0.0)
    if np.any(k.get("method", 0) > 0):
        _finetune_states(out, m, rank, k, RankWeights(modules, gemm_ne, gemm_ex, unit), sharded)

    # Activations: per-layer tensors x layers x in-flight micro-batches (+ extras, working set).
    in_flight = inflight(k["schedule"], k["pp"], k["num_microbatches"], k["vpp"], rank["stage"])
    chunk = np.where((k["schedule"] == _DUALPIPE) & (k["pp"] > 1), 0.5, 1.0)   # 2 chunks per rank
    # Interleaved: each model chunk counts its own in-flight micro-batches (chunks may differ in layers,
    # e.g. an empty first chunk beside the embedding); the sum over chunks equals in_flight x v.
    interleaved = (k["schedule"] == _INTERLEAVED) & (k["vpp"] > 1) & (k["pp"] > 1)
    per_chunk = chunk_inflight(k["pp"][..., None], k["num_microbatches"][..., None], k["vpp"][..., None],
                               rank["stage"][..., None], np.arange(rank["chunk_dense"].shape[-1]))
    head_inflight = np.where((k["schedule"] == _GPIPE) & (k["pp"] > 1), k["num_microbatches"], 1.0)
    kinds = [(False, "dense")] + ([(True, "moe")] if model.is_moe else [])
    working, staging = 0.0, 0.0
    for moe, kind in kinds:
        count = rank[f"n_{kind}"]
        layer_microbatches = np.where(interleaved, np.sum(rank[f"chunk_{kind}"] * per_chunk, axis=-1),
                                      in_flight * chunk * count)
        stored, full = activation_layer(model, moe, k)
        for key, v in stored.items():   # offloaded shares wait in host memory (offload.py)
            kept = v * (1 - offload_rules.share(model, key, k["offload_modules"]))
            out[f"activations/{key}"] = out.get(f"activations/{key}", 0.0) + layer_microbatches * kept
        extra = sum(full.values()) - sum(stored.values())
        working = np.maximum(working, np.where(count > 0, extra, 0.0))
        moved = offload_rules.offloaded_bytes(model, stored, k["offload_modules"])
        staging = np.maximum(staging, np.where(count > 0, offload_rules.STAGED_LAYERS * moved, 0.0))
    out["activations/recompute_working_set"] = working
    out["activations/offload_staging"] = staging
    if model.is_moe:   # transient all-to-all buffers of one MoE layer (see 'MoE token buffers' above)
        rows = k["seq"] / k["cp"] * k["mbs"] * model.experts_per_token
        copies = np.where(k["ep"] > 1, 2.0, 1.0)
        out["activations/moe_token_buffers"] = np.where(rank["n_moe"] > 0, copies * 2 * rows * model.hidden_size, 0.0)
    tok, h, r = k["seq"] / k["cp"] * k["mbs"], model.hidden_size, seq_divisor(k)
    dropout_mask = tok * h / r if has_dropout(model) else 0.0
    embedding_inflight = np.where(interleaved, per_chunk[..., 0], in_flight * chunk)   # the first chunk's
    out["activations/embedding"] = first * embedding_inflight * (8 * tok + dropout_mask)   # int64 ids (+ mask)
    # Pipeline outputs: without Megatron's deallocation, each in-flight chunk keeps the 2sbh/r tensor it
    # sent on until its backward. in_flight counts chunks for DualPipe and rank-passes (v chunks each)
    # for the interleaved schedule; the model's last chunk, on the last stage, sends nothing.
    chunks = np.where(k["schedule"] == _INTERLEAVED, k["vpp"], np.where(k["schedule"] == _DUALPIPE, 2.0, 1.0))
    held = in_flight * np.where(k["schedule"] == _DUALPIPE, 1.0, chunks) * (1 - last / chunks)
    kept = (k["deallocate_pipeline_outputs"] < 1) & (k["pp"] > 1)
    out["activations/pipeline_outputs"] = np.where(kept, held * 2 * tok * h / r, 0.0)
    # Last stage: final-norm input, LM-head input (2sbh/r each) and the logits the loss kernel keeps,
    # LOSS_BYTES s b V / t (tools/perf/loss.py: 4 for Megatron's fused vocab-parallel cross-entropy, 12 for
    # the Hugging Face models' materialised fp32 logits); the loss backward follows the last forward at
    # once, so one micro-batch of logits is live (m with gpipe).
    head_inputs = (2 * float(model.final_norm) + 2) * tok * h / r
    logits = loss_rules.loss_bytes(k["loss_kernel"]) * tok * model.vocab_size / t
    out["activations/lm_head/inputs"] = last * head_inflight * head_inputs
    out["activations/lm_head/logits"] = last * head_inflight * logits
    if model.num_mtp_layers:   # each MTP module: a block, enorm/hnorm and eh_proj inputs, its own head
        stored, _ = activation_layer(model, is_moe_layer(model, model.num_layers), k)
        mtp = sum(stored.values()) + 8 * tok * h / r + head_inputs + logits
        out["activations/mtp"] = last * head_inflight * model.num_mtp_layers * mtp

    activations = sum(v for key, v in out.items() if key.startswith("activations/"))
    # Gradients born in the backward (module doc): a one-GPU PyTorch loop without accumulation frees them at
    # zero_grad and autograd allocates each as the backward frees the activations it read, so the peak holds
    # the larger of the two, not both: the smaller is taken back from its own part, as the peak moment holds it
    # (activations larger: the backward's start, no gradient yet; gradients larger: its end, no activation left).
    gradients = sum(v for key, v in out.items() if key.startswith("gradients/"))
    one_device = (t * k["pp"] * k["dp"] * k["cp"] * ep == 1) & (k["num_microbatches"] == 1)
    torch_states = (k["pure_bf16"] > 0) | (k["fp32_params"] > 0) | (k.get("method", 0) > 0)
    born = one_device & torch_states
    grads_key, activations_key = BORN_IN_BACKWARD_KEYS
    out[grads_key] = np.where(born & (activations >= gradients), -gradients, 0.0)
    out[activations_key] = np.where(born & (activations < gradients), -activations, 0.0)
    groups = sum((k[n] > 1).astype(float) for n in ("tp", "pp", "cp", "dp", "ep")) + (replicas > 1)
    out["other/cuda_context"] = CUDA_CONTEXT_GIB * GIB + 0 * first
    out["other/nccl"] = NCCL_GIB_PER_GROUP * GIB * groups + 0 * first
    out["other/allocator_reserve"] = ALLOCATOR_RESERVE_FRACTION * activations
    shape = np.broadcast_shapes(t.shape, first.shape)
    return {key: _spread(v, shape) for key, v in out.items()}


BORN_IN_BACKWARD_KEYS = ("gradients/born_in_backward", "activations/freed_in_backward")
"""The breakdown keys that take back the smaller of gradients and activations in a one-GPU PyTorch loop (_core)."""


def _spread(v, shape: tuple) -> np.ndarray:
    """v as a float array of `shape`; an array already of that shape as it is (np.broadcast_to costs
    microseconds a call, and _core returns ~60 keys for every layout). Callers only read the result."""
    if isinstance(v, np.ndarray) and v.shape == shape and v.dtype == np.float64:
        return v
    return np.broadcast_to(np.asarray(v, dtype=float), shape)


@dataclass(frozen=True)
class RankWeights:
    """A rank's parameters as the full-training states counted them (_core): per module (non-expert, expert),
    the GEMM weights' (non-expert, expert) and the largest block's unsharded parameters (the ZeRO unit)."""

    modules: dict
    gemm_ne: np.ndarray
    gemm_ex: np.ndarray
    unit: np.ndarray


def _finetune_states(out, m: ModelParts, rank, k, weights: RankWeights, sharded) -> None:
    """LoRA/QLoRA model states (tools/perf/finetune.py): the frozen base (bf16, or NF4 linears) has no
    gradients or optimizer states; the adapters carry fp32 weights, gradients and Adam states."""
    modules, gemm_ne, gemm_ex, unit = weights.modules, weights.gemm_ne, weights.gemm_ex, weights.unit
    lora = k["method"] > 0
    qlora = k["method"] == finetune.METHOD_CODES[finetune.Method.qlora]
    t, ep = k["tp"], k["ep"]
    et = k["etp"] if "etp" in k else t
    codes = finetune.TARGET_CODES
    adapters_ne = k["lora_rank"] * finetune.by_target(k["lora_targets"], {
        target: rank[f"lora_{codes[target]}_ne"] for target in codes}) / t
    adapters_ex = k["lora_rank"] * finetune.by_target(k["lora_targets"], {
        target: rank[f"lora_{codes[target]}_ex"] for target in codes}) / (ep * et)
    total_ne = sum(ne for ne, _ in modules.values())
    total_ex = sum(ex for _, ex in modules.values())
    for key in ("weights/fp32_params", *(f"{c}/{name}" for name in modules for c in ("weights", "gradients", "optimizer"))):
        out[key] = np.where(lora, 0.0, out[key])
    double_quant = k["double_quant"]   # VECTOR_DEFAULTS and knob_arrays both give it
    out["weights/frozen_base"] = np.where(lora, finetune.frozen_weight_bytes(
        k["method"], sharded(gemm_ne, gemm_ex, 3), sharded(total_ne - gemm_ne, total_ex - gemm_ex, 3),
        double_quant), 0.0)
    weight_bytes = finetune.adapter_bytes(k["method"], finetune.ADAPTER_WEIGHT_BYTES)
    grad_bytes = finetune.adapter_bytes(k["method"], finetune.ADAPTER_GRAD_BYTES)
    out["weights/adapters"] = np.where(lora, weight_bytes * sharded(adapters_ne, adapters_ex, 3), 0.0)
    out["gradients/adapters"] = np.where(lora, grad_bytes * sharded(adapters_ne, adapters_ex, 2), 0.0)
    # qlora: paged AdamW keeps its states in CPU-evictable unified memory (not counted on the GPU)
    adapter_moments = np.where(k["optimizer_8bit"] > 0, MOMENTS_BYTES_8BIT, finetune.ADAPTER_OPTIMIZER_BYTES)
    out["optimizer/adapters"] = np.where(lora & ~qlora & (k["optimizer_offload"] == 0),
                                         adapter_moments * sharded(adapters_ne, adapters_ex, 1), 0.0)
    frozen_bytes = np.where(qlora, finetune.nf4_bytes(double_quant), WEIGHT_BYTES)
    out["weights/zero3_prefetch"] = np.where(lora, np.where(k["zero"] >= 3, 2 * frozen_bytes * unit, 0.0),
                                             out["weights/zero3_prefetch"])
    layers = np.maximum(rank["num_layers"], 1)
    out["gradients/zero2_bucket"] = np.where(lora, np.where(k["zero"] >= 2, grad_bytes
                                                            * (adapters_ne + adapters_ex) / layers, 0.0),
                                             out["gradients/zero2_bucket"])
    largest = max(finetune.largest_linear(m.spec, moe) for moe in set(m.is_moe))
    out["weights/nf4_dequant_buffer"] = np.where(qlora, WEIGHT_BYTES * largest / t, 0.0) + 0 * rank["first"]


def _components(parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    comps = {c: sum(v for key, v in parts.items() if key.startswith(c + "/")) for c in COMPONENTS}
    comps["total"] = sum(comps[c] for c in COMPONENTS)
    return comps


# --- public entry points -------------------------------------------------------------------------


def memory_breakdown(model: ModelSpec, cfg: ParallelConfig, gpu: GPUSpec, headroom_gib: float = 0.0) -> MemoryResult:
    """Memory per GPU of every pipeline rank; the result reports the most loaded one.

    fits = total <= capacity - headroom_gib. The module docstring states the conventions.
    """
    m = model_parts(model)
    rank = rank_data(m, cfg.pp, cfg.vpp, cfg.schedule is Schedule.dualpipe)
    knobs = knob_arrays(cfg)
    parts = {key: v[0] / GIB for key, v in _core(m, rank, knobs).items()}
    comps = _components(parts)
    in_flight = inflight(knobs["schedule"], cfg.pp, cfg.num_microbatches, cfg.vpp, rank["stage"])[0]
    per_stage = [
        {"stage": i, "num_layers": int(rank["num_layers"][0, i]), "inflight_microbatches": float(in_flight[i]),
         **{c: float(comps[c][i]) for c in (*COMPONENTS, "total")}}
        for i in range(cfg.pp)
    ]
    worst = int(np.argmax(comps["total"]))
    worst_comps = {c: float(comps[c][worst]) for c in (*COMPONENTS, "total")}
    available = gpu.memory_gib - headroom_gib
    fits = worst_comps["total"] <= available
    return MemoryResult(
        **worst_comps, capacity=gpu.memory_gib, fits=fits,
        reason=None if fits else memory_hints.reason(
            worst_comps, worst, available, cfg.model_dump(mode="json"),
            dense_mlp=module_applies(model, recompute_rules.RecomputeModule.mlp)),
        worst_stage=worst, per_stage=per_stage,
        breakdown={key: float(v[worst]) for key, v in parts.items() if v[worst]},
    )


VECTOR_KEYS = ("tp", "pp", "cp", "ep", "dp", "vpp", "zero", "mbs", "num_microbatches", "seq",
               "recompute", "schedule", "precision")
"""Required keys of memory_totals_vectorised; optional: sequence_parallel (default 1),
optimizer_offload (0), bf16_grads (0), bf16_moments (0), fp32_params (0), pure_bf16 (0), optimizer_8bit (0),
fp8_activations (0), deallocate_pipeline_outputs (1),
save_mlp_act_output (1), fused_kernels (1), offload_modules (an integer mask of offload.OFFLOAD_BITS; 0), attention (0: flash;
1: eager), recompute_modules (an integer mask of recompute.MODULE_BITS; default: recompute.DEFAULT_MASK where
recompute is selective), etp (expert TP; default: tp), dp_shard (ZeRO shard group in dp ranks; default: dp),
method (0 full, 1 lora, 2 qlora), lora_rank (0), lora_targets (finetune.TARGET_CODES: 0 attention, 1 all-linear, 2 qv), loss_kernel
(loss.LOSS_CODES; 0 fused), fp32_norms (0), lora_dropout (the probability; 0), double_quant (1).
Codes: recompute 0 none, 1 selective, 2 full; schedule
in Schedule order (0 gpipe, 1 1f1b, 2 interleaved, 3 zb-h1, 4 dualpipe); precision 0 bf16, 1 fp8."""


_LAYOUT_CODES = {"attention": ATTENTION_CODES, "method": finetune.METHOD_CODES}


def layout_default_code(name: str) -> int:
    """A Layout field's default as memory_totals_vectorised codes it: its code table's entry, or the bool as 0/1."""
    default = Layout.model_fields[name].default
    return _LAYOUT_CODES[name][default] if name in _LAYOUT_CODES else int(default)


VECTOR_DEFAULTS = {
    **{name: layout_default_code(name) for name in ("sequence_parallel", "optimizer_offload", "bf16_grads",
                                                     "bf16_moments", "fp32_params", "pure_bf16", "optimizer_8bit",
                                                     "fp8_activations",
                                                     "deallocate_pipeline_outputs", "save_mlp_act_output",
                                                     "fused_kernels")},
    "offload_modules": 0,
    "attention": layout_default_code("attention"), "method": layout_default_code("method"),
    "lora_rank": 0, "lora_targets": 1,
    "loss_kernel": loss_rules.LOSS_CODES[loss_rules.LossKernel.fused], "fp32_norms": 0,
    "lora_dropout": layout_default_code("lora_dropout"), "lora_dropout_post": 0, "double_quant": 1}
"""The optional keys of memory_totals_vectorised and their codes when absent: the Layout default where it is
a value (bools, attention, method); where the Layout's null means a rule, the rule's code for full training
(no offload, rank 0, all-linear, the fused loss, no fp32 norms, the dropout on the adapters' inputs, double
quantisation)."""


def memory_totals_vectorised(model: ModelSpec, gpu: GPUSpec, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The scalar path's worst-stage components (GiB) for many already-valid layouts at once.

    Layouts are grouped by (pp, vpp, dualpipe), which fix each rank's layers; within a group
    everything is numpy arithmetic over candidates x ranks, through the same core as
    memory_breakdown. Returns weights, gradients, optimizer, activations, other, total and
    worst_stage arrays; ``gpu`` is accepted for symmetry (capacity is gpu.memory_gib).
    """
    defaults = VECTOR_DEFAULTS
    given = {key: arrays.get(key, defaults.get(key)) for key in (*VECTOR_KEYS, *defaults)}
    if given["recompute"] is not None:
        default_mask = np.where(np.asarray(given["recompute"]) == _SELECTIVE, recompute_rules.DEFAULT_MASK, 0)
        given["recompute_modules"] = arrays.get("recompute_modules", default_mask)
    given["etp"] = arrays.get("etp", given["tp"])   # expert TP; Megatron's default is tp
    given["dp_shard"] = arrays.get("dp_shard", given["dp"])   # null: full sharding over dp
    missing = [key for key, v in given.items() if v is None]
    if missing:
        raise KeyError(f"memory_totals_vectorised needs arrays for: {', '.join(missing)}")
    flat = dict(zip(given, np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in given.values()))))
    n = flat["tp"].size
    flat = {key: v.reshape(n) for key, v in flat.items()}
    out = {key: np.zeros(n) for key in (*COMPONENTS, "total", "worst_stage")}
    m = model_parts(model)
    dual = (flat["schedule"] == _DUALPIPE) & (flat["pp"] > 1)
    combos = np.stack([flat["pp"], flat["vpp"], dual]).T
    for pp, vpp, is_dual in np.unique(combos, axis=0):
        idx = np.nonzero((combos == (pp, vpp, is_dual)).all(axis=1))[0]
        rank = rank_data(m, int(pp), int(vpp), bool(is_dual))
        knobs = {key: v[idx][:, None] for key, v in flat.items()}
        comps = _components(_core(m, rank, knobs))
        worst = np.argmax(comps["total"], axis=1)
        for key in (*COMPONENTS, "total"):
            out[key][idx] = comps[key][np.arange(idx.size), worst] / GIB
        out["worst_stage"][idx] = worst
    return out
