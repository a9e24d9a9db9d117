"""Per-GPU memory of one layout: weights, gradients, optimizer states, activations and other.

Units: bytes inside, GiB (2^30 B) in every result. Memory is reported for the most loaded rank;
``per_stage`` holds every pipeline rank. Symbols: s sequence length, b micro-batch (mbs), h hidden
size, a query heads, g key/value heads, d head dim, f MLP width, V vocabulary, t tensor-parallel
size, r = t with sequence parallelism (else 1), E routed experts, k experts per token.

Model states (Megatron mixed precision, the DESIGN.md default):
  bf16 weights 2 B/param, fp32 gradient buffer 4 B/param (2 with bf16_grads: DeepSpeed's 16 B/param),
  fp32 master weights + Adam m + Adam v 12 B/param.
  ZeRO-1 shards the 12 B over the data-parallel group, which for non-expert parameters is dp*cp
  (Megatron's distributed optimizer shards over the data-parallel-with-context group); ZeRO-2 also
  shards the gradients, ZeRO-3 also the weights (FSDP full shard). Routed-expert parameters are
  divided over ep (and over t: Megatron's expert tensor parallelism defaults to t) and their
  states sharded over the expert-data-parallel group dp*cp/ep.
  optimizer_offload moves the 12 B/param and the optimizer step to the CPU: GPU optimizer = 0.
  Transients: ZeRO-3 holds two unsharded layers (the one computing and the prefetched next one);
  ZeRO-2/3 hold one unsharded layer of gradients before its reduce-scatter.
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

Activations: per tensor after Korthikanti et al. 2022 (16-bit activations, 1-byte dropout masks);
see _layer_tensors for the derivation per tensor. CP divides s by cp. Recompute none keeps every
tensor; selective recomputes the attention core; full keeps only the layer input and recomputes
the rest, adding one layer's working set. In-flight micro-batches per schedule: inflight_microbatches.

Other: CUDA context, NCCL communicator buffers and a temporaries allowance; see the constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .codes import ATTENTION_CODES, PRECISION_CODES, RECOMPUTE_CODES, SCHEDULE_CODES
from .counting import LayerParams, count_params, is_moe_layer, layer_params, norm_params
from . import recompute as recompute_rules
from .layout import model_layers_per_stage
from .specs import Attention, GPUSpec, ModelSpec, ParallelConfig, Precision, Recompute, Schedule

GIB = float(2**30)

WEIGHT_BYTES = 2.0
"""bf16 weights, B/param"""
GRAD_BYTES = 4.0
"""fp32 gradient buffer (Megatron main_grad), B/param"""
GRAD_BYTES_BF16 = 2.0
"""bf16 gradients (bf16_grads option), B/param"""
OPTIMIZER_BYTES = 12.0
"""fp32 master copy 4 + Adam m 4 + Adam v 4, B/param"""
OPTIMIZER_BYTES_BF16_MOMENTS = 8.0
"""fp32 master copy 4 + bf16 Adam m 2 + v 2, B/param (bf16_moments: DeepSeek-V3 §3.3.3)"""
FP8_WEIGHT_CACHE_BYTES = 2.0
"""Transformer Engine fp8 weight + fp8 transpose kept for every GEMM weight with precision=fp8, B/param"""

CUDA_CONTEXT_GIB = 723 / 1024
"""CUDA context of one process: 723 MiB on the first CUDA call (discuss.pytorch.org/t/73021)"""
NCCL_GIB_PER_GROUP = 688e6 / GIB
"""NCCL buffers per communicator that carries traffic: 544-688 MB measured per process group on
A100 NVLink (NVIDIA/nccl#964); we take 688 MB for each of the tp, pp, cp, dp and ep groups with
more than one rank. An NCCL all-to-all can take more (3.3 GB on 8xH100, NVIDIA/nccl#1685)."""
# MoE token buffers (activations/moe_token_buffers), transient: while one MoE layer combines (and
# again in its backward), the experts' bf16 outputs, s b k rows of h, are the all-to-all send buffer
# and a receive buffer of the same size holds what comes back (all_to_all_single needs distinct input
# and output; Megatron's MoEAlltoAllTokenDispatcher): 2 x 2 s b k h bytes with ep > 1; with ep = 1
# only the permuted copy, 2 s b k h. The dispatched copies kept for the backward are counted with
# the layer (moe/dispatched).
TEMPORARIES_FRACTION = 0.05
"""Allocator fragmentation and temporaries, as a share of activations: Megatron's theoretical
memory adds 5% "for optimizer and miscellaneous temporaries" (theoretical_memory_usage.py)."""

# The attention kernel is the layout's `attention` knob (never the dropout): eager attention keeps
# the a s^2 softmax output, plus its dropout mask and output when the recipe has attention dropout;
# flash keeps only the log-sum-exp (dropout runs inside the kernel from its RNG state).
# ModelSpec.attention_dropout > 0 (the HF config's attn_pdrop / attention_dropout; GPT2Config
# defaults to 0.1) also marks the hidden dropout masks of a GPT-3-style recipe.


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
        """DESIGN.md memory_gib keys plus fits and reason."""
        out = {k: getattr(self, k) for k in (*COMPONENTS, "total", "capacity")}
        out.update(fits=self.fits, reason=self.reason)
        return out


# --- pipeline schedule ---------------------------------------------------------------------------


def _inflight(schedule_code, pp, num_microbatches, vpp, stage):
    """Micro-batches whose activations stage ``stage`` holds at its peak (arrays broadcast).

    Units: one micro-batch through all the layers the rank holds (for DualPipe: one chunk).
      pp = 1: 1 (each micro-batch's backward runs before the next forward).
      gpipe: m (all forwards, then all backwards).
      1f1b, zb-h1: min(p - i, m) (stage i runs p - i warm-up forwards; ZB-H1 keeps 1F1B's peak,
        Qi et al. 2024).
      interleaved: Megatron's warm-up on rank i runs 2(p - i - 1) + (v - 1) p chunk forwards before
        its first backward, so it holds that + 1 chunks of 1/v of its layers:
        (2(p - i - 1) + (v - 1) p + 1) / v = p + (p - 1 - 2i)/v, capped at m. For i = 0 this is
        Megatron's (1 + (p - 1)/(p v)) p (theoretical_memory_usage.py).
      dualpipe: p + 1 chunks (DeepSeek-V3 paper, Table 2), capped at m.
    """
    p, m, v, i = (np.asarray(x, dtype=float) for x in (pp, num_microbatches, vpp, stage))
    one_f_one_b = np.minimum(p - i, m)
    interleaved = np.minimum(p + (p - 1 - 2 * i) / v, m)
    counts = np.select(
        [schedule_code == _GPIPE, schedule_code == _INTERLEAVED, schedule_code == _DUALPIPE],
        [m + 0 * i, interleaved, np.minimum(p + 1, m) + 0 * i],
        one_f_one_b,
    )
    return np.where(p == 1, 1.0, counts)


def inflight_microbatches(schedule: Schedule | str, pp: int, num_microbatches: int, vpp: int = 1) -> list[float]:
    """In-flight micro-batches per pipeline stage, closed forms (see _inflight)."""
    code = SCHEDULE_CODES[Schedule(schedule)]
    return [float(x) for x in _inflight(code, pp, num_microbatches, vpp, np.arange(pp))]


def _rank_layouts(spec: ModelSpec, pp: int, vpp: int, dualpipe: bool) -> list[tuple[list[int], bool, bool]]:
    """(layer indices, holds the first stage, holds the last stage) for each pipeline rank."""
    if dualpipe and pp > 1:
        counts = model_layers_per_stage(spec, pp)
        starts = np.concatenate([[0], np.cumsum(counts)])
        stage = [list(range(starts[i], starts[i + 1])) for i in range(pp)]
        return [(stage[i] + stage[pp - 1 - i], i in (0, pp - 1), i in (0, pp - 1)) for i in range(pp)]
    counts = model_layers_per_stage(spec, pp * vpp)
    starts = np.concatenate([[0], np.cumsum(counts)])
    ranks = []
    for i in range(pp):
        layers = [layer for k in range(i, pp * vpp, pp) for layer in range(starts[k], starts[k + 1])]
        ranks.append((layers, i == 0, i == pp - 1))
    return ranks


# --- parameters ----------------------------------------------------------------------------------

_PARAM_KEYS = ("shard", "repl", "kv", "expert", "norm_router")


def _layer_param_parts(model: ModelSpec, lp: LayerParams) -> dict[str, float]:
    """Split one block's parameters by how TP divides them (unsharded counts).

    shard: divided by t; repl: replicated on every TP rank; kv: parameters per key/value head
    (kept as max(g, t)/t heads per rank); expert: routed experts (divided by ep * t);
    norm_router: the non-GEMM part (no fp8 copy).
    """
    h = model.hidden_size
    repl = lp.norms + lp.router
    repl += h if model.o_bias else 0                                  # row-parallel o bias
    repl += h if (model.mlp_bias and lp.dense_mlp) else 0             # row-parallel down bias
    repl += h if (model.shared_expert_gate and lp.shared_experts) else 0
    kv = 0
    if model.attention_type == "mla":
        bias = 1 if model.qkv_bias else 0
        kv_down = model.kv_lora_rank + model.qk_rope_head_dim
        repl += (h + bias) * kv_down + norm_params(model, model.kv_lora_rank)
        if model.q_lora_rank:
            repl += (h + bias) * model.q_lora_rank + norm_params(model, model.q_lora_rank)
    else:
        repl += 2 * norm_params(model, model.head_dim) if model.qk_norm else 0
        kv = 2 * model.head_dim * (h + (1 if model.qkv_bias else 0))
    shard = lp.non_expert - repl - kv * (model.num_kv_heads if model.attention_type == "mha" else 0)
    return {"shard": shard, "repl": repl, "kv": kv, "expert": lp.routed_experts,
            "norm_router": lp.norms + lp.router}


def _mtp_param_parts(model: ModelSpec) -> dict[str, float]:
    """All MTP modules: a block of the last layer's type + eh_proj (2h x h, column-parallel) + 3 norms."""
    n, h = model.num_mtp_layers, model.hidden_size
    parts = _layer_param_parts(model, layer_params(model, model.num_layers))
    parts = {k: n * v for k, v in parts.items()}
    parts["shard"] += n * 2 * h * h
    parts["repl"] += n * 3 * norm_params(model, h)
    parts["norm_router"] += n * 3 * norm_params(model, h)
    return parts


@dataclass(frozen=True)
class _Model:
    """What the memory core needs from a model, computed once."""

    spec: ModelSpec
    layer_parts: list[dict[str, float]]
    is_moe: list[bool]
    mtp_parts: dict[str, float]
    embed_vocab: float
    """V x e: the vocab-parallel rows (also the size of a tied or MTP embedding copy)"""
    embed_repl: float
    """learned positions, embedding norm and extra parameters (OPT project_in/out): replicated"""
    head: float
    final_norm: float


def _prepare(model: ModelSpec) -> _Model:
    counts = count_params(model)
    embed_vocab = model.vocab_size * (model.embedding_dim or model.hidden_size)
    return _Model(
        spec=model,
        layer_parts=[_layer_param_parts(model, lp) for lp in counts.layers],
        is_moe=[lp.routed_experts > 0 for lp in counts.layers],
        mtp_parts=_mtp_param_parts(model) if model.num_mtp_layers else dict.fromkeys(_PARAM_KEYS, 0.0),
        embed_vocab=embed_vocab,
        embed_repl=counts.embedding - embed_vocab + counts.extra,
        head=counts.lm_head,
        final_norm=counts.final_norm,
    )


def _rank_data(m: _Model, pp: int, vpp: int, dualpipe: bool) -> dict[str, np.ndarray]:
    """Per-rank sums (shape (1, pp)): parameter parts, dense/MoE layer counts, first/last flags,
    and the largest dense and MoE layer (for ZeRO transients and the recompute working set)."""
    rows = []
    for layers, first, last in _rank_layouts(m.spec, pp, vpp, dualpipe):
        row = {k: sum(m.layer_parts[i][k] for i in layers) for k in _PARAM_KEYS}
        for kind, moe in (("dense", False), ("moe", True)):
            members = [i for i in layers if m.is_moe[i] == moe]
            row[f"n_{kind}"] = len(members)
            for k in _PARAM_KEYS:
                row[f"{kind}_{k}"] = max((m.layer_parts[i][k] for i in members), default=0)
        row.update(first=first, last=last, num_layers=len(layers))
        rows.append(row)
    data = {k: np.array([[row[k] for row in rows]], dtype=float) for k in rows[0]}
    data["stage"] = np.arange(pp, dtype=float)[None, :]
    return data


def _per_rank_params(m: _Model, parts, t, ep):
    """(non-expert, expert) parameters on one GPU of a block sum ``parts`` after TP and EP."""
    g = m.spec.num_kv_heads
    non_expert = parts["shard"] / t + parts["repl"] + parts["kv"] * np.maximum(g, t) / t
    return non_expert, parts["expert"] / (ep * t)


# --- activations ---------------------------------------------------------------------------------


def _has_dropout(model: ModelSpec) -> bool:
    return model.attention_dropout > 0


def _layer_tensors(model: ModelSpec, moe: bool, s, seq, b, t, r, fp8, eager=False,
                   fp8_activations=False) -> dict[str, np.ndarray]:
    """Bytes one block saves for backward per micro-batch with no recompute, per tensor group.

    s: local tokens per sequence (seq / cp); seq: full length (keys of eager attention).
    Residual-stream tensors (h wide) are divided by r (= t with sequence parallelism); tensors
    inside the TP region (heads, MLP width) by t. GEMM inputs take 1 B per element with fp8
    (Transformer Engine caches the fp8 cast for wgrad), else 2.

    GPT-3 style (Korthikanti et al. 2022, Eq. (1) and Table 2): norm inputs 2 x 2sbh; attention:
    QKV input 2sbh, Q and K 4sbh, V 2sbh, softmax 2as^2b, its dropout mask as^2b and output
    2as^2b, out-proj input 2sbh, dropout mask sbh (= 11sbh + 5as^2b); MLP: fc1 input 2sbh, GeLU input 8sbh, fc2
    input 8sbh, mask sbh (= 19sbh). Total sbh(34 + 5as/h); with TP the norm inputs, the QKV and
    fc1 inputs and the masks (10sbh) are not divided by t unless sequence parallel.
    Llama style: no dropout; flash attention saves Q, K, V (g kv heads), its output O (also the
    out-proj input; with fp8 TE keeps an extra fp8 copy) and the fp32 log-sum-exp 4sab, no s^2
    tensor. SwiGLU keeps gate and up outputs (4sbf) and the down-proj input (2sbf), as Megatron's
    fused bias_swiglu and TE's fused activation, which save only their input (unfused PyTorch
    also keeps silu(gate) for the product: + 2sbf). Norm statistics (4 B per token) are left out,
    as in the paper.
    MLA: the down-projection input 2sbh, the q and kv latents twice each (latent-norm input 2sb r,
    and its output, the up-projection input), Q and K with a (d_nope + d_rope), V and O with a d_v.
    MoE: the MoE input 2sbh (router, shared experts and dispatch read it), fp32 router scores 4sbE,
    the s b k dispatched token copies (balanced routing: a rank receives as many copies as its
    tokens send; with expert TP the TP group's tokens are gathered, so not divided by t) with the
    expert's gate/up outputs, its fp32 routing probability 4sbk and down input, and the shared
    experts' intermediates. The expert outputs are not kept: Megatron-Core multiplies the routing
    probabilities inside the experts' activation (activation_func_with_probs in experts.py, "memory
    efficient token permutation", MCore v0.13), so the combine is a plain sum that saves nothing.
    fp8_activations (DeepSeek-V3 §3.3.3, "Low-Precision Storage"): the SwiGLU inputs of the routed
    and shared experts are cached in FP8 (1 B, so 2sbf_e for gate and up), and the attention output
    O, read by the attention backward and the output projection, is one 16-bit copy (DeepSeek's
    E5M6, taken at 2 B: the report does not say it is packed) instead of bf16 O plus an FP8 cache.
    """
    h, a = model.hidden_size, model.num_attention_heads
    tok = s * b
    gemm_in = np.where(fp8, 1.0, 2.0)
    dropout = _has_dropout(model)
    act = 4.0 if model.gated_mlp else 2.0      # gate + up outputs, or the activation's input
    x: dict[str, np.ndarray] = {"norm/inputs": model.norms_per_layer * 2 * tok * h / r,
                                "attention/qkv_input": gemm_in * tok * h / r}
    if model.attention_type == "mla":
        r_q = model.q_lora_rank or 0
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        x["attention/latents"] = 2 * tok * (r_q + model.kv_lora_rank) / r
        x["attention/latent_norm_out"] = gemm_in * tok * (r_q + model.kv_lora_rank) / r
        x["attention/qkv"] = 2 * tok * a * (2 * qk + model.v_head_dim) / t
        v_width = a * model.v_head_dim
    else:
        d, g = model.head_dim, model.num_kv_heads
        x["attention/qkv"] = 2 * tok * d * (a + 2 * np.maximum(g, t)) / t
        v_width = a * d
    # eager: softmax output 2 B (+ dropout mask 1 B and dropout output 2 B), a s x seq each, and the
    # context as the out-proj GEMM input; flash: fp32 log-sum-exp, O in bf16 (+ fp8 copy for the GEMM)
    x["attention/core"] = np.where(eager, (2 + 3 * dropout) * a * tok * seq / t, 4 * a * tok / t)
    context_bytes = np.where(fp8_activations, 2.0, 2 + np.where(fp8, 1.0, 0.0))
    x["attention/context"] = np.where(eager, gemm_in, context_bytes) * tok * v_width / t
    if dropout:
        x["attention/dropout_mask"] = tok * h / r
    if not moe:
        shares_input = model.parallel_attention_mlp and model.norms_per_layer == 1
        x["mlp/fc1_input"] = 0 * tok if shares_input else gemm_in * tok * h / r
        x["mlp/act_input"] = act * tok * model.intermediate_size / t
        x["mlp/fc2_input"] = gemm_in * tok * model.intermediate_size / t
    else:
        act = act * np.where(fp8_activations, 0.5, 1.0)   # SwiGLU inputs cached in FP8
        rows = tok * model.experts_per_token
        fe = model.moe_intermediate_size
        fs = model.num_shared_experts * model.shared_expert_intermediate_size
        x["moe/input"] = 2 * tok * h / r
        x["moe/router_scores"] = 4 * tok * model.num_experts / r
        x["moe/dispatched"] = gemm_in * rows * h
        x["moe/probs"] = 4 * rows
        x["moe/expert_act_input"] = act * rows * fe / t
        x["moe/expert_fc2_input"] = gemm_in * rows * fe / t
        x["moe/shared_experts"] = (act + gemm_in) * tok * fs / t
    if dropout:
        x["mlp/dropout_mask" if not moe else "moe/dropout_mask"] = tok * h / r
    return x


def _stored(tensors: dict, recompute, modules, layer_input):
    """Apply recompute (recompute.py): selective drops the tensors of the modules in the integer
    mask ``modules``; full keeps only the layer input."""
    out = {}
    for key, v in tensors.items():
        selective_keeps = ~recompute_rules.dropped(key, modules)
        out[key] = np.where((recompute == _NONE) | ((recompute == _SELECTIVE) & selective_keeps), v, 0.0)
    for module, key in recompute_rules.CHECKPOINT_INPUT.items():   # the bf16 input a checkpoint keeps
        if key in out:
            keeps_input = (recompute == _SELECTIVE) & ((np.asarray(modules, dtype=np.int64)
                                                        & recompute_rules.MODULE_BITS[module]) > 0)
            out[key] = np.where(keeps_input & ~recompute_rules.dropped(key, modules), layer_input, out[key])
    out["layer_input"] = np.where(recompute == _FULL, layer_input, 0.0)
    return out


def _knob_arrays(cfg: ParallelConfig) -> dict[str, np.ndarray]:
    values = dict(tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep, dp=cfg.dp, vpp=cfg.vpp, zero=cfg.zero, mbs=cfg.mbs,
                  num_microbatches=cfg.num_microbatches, seq=cfg.seq,
                  recompute=RECOMPUTE_CODES[cfg.recompute], recompute_modules=recompute_rules.config_mask(cfg),
                  schedule=SCHEDULE_CODES[cfg.schedule],
                  precision=PRECISION_CODES[cfg.precision], attention=ATTENTION_CODES[cfg.attention],
                  sequence_parallel=cfg.sequence_parallel,
                  optimizer_offload=cfg.optimizer_offload, bf16_grads=cfg.bf16_grads,
                  bf16_moments=cfg.bf16_moments, fp8_activations=cfg.fp8_activations)
    return {k: np.array([[v]], dtype=float) for k, v in values.items()}


def _seq_divisor(k: dict):
    """r: residual-stream tensors are split over t with sequence parallelism, else replicated."""
    return np.where((k["sequence_parallel"] > 0) & (k["tp"] > 1), k["tp"], 1.0)


def _activation_layer(model: ModelSpec, moe: bool, k: dict) -> tuple[dict, dict]:
    """(stored tensors, no-recompute tensors) of one block for knob arrays k."""
    t, r = k["tp"], _seq_divisor(k)
    s = k["seq"] / k["cp"]
    full = _layer_tensors(model, moe, s, k["seq"], k["mbs"], t, r, k["precision"] == PRECISION_CODES[Precision.fp8],
                          k["attention"] == ATTENTION_CODES[Attention.eager], k["fp8_activations"] > 0)
    layer_input = 2 * s * k["mbs"] * model.hidden_size / r
    return _stored(full, k["recompute"], k["recompute_modules"], layer_input), full


def activation_bytes_per_layer(model: ModelSpec, cfg: ParallelConfig, layer_index: int) -> dict[str, float]:
    """Bytes block ``layer_index`` keeps for backward per micro-batch, per tensor group, on one GPU,
    after TP/SP/CP and recompute (see _layer_tensors; 'layer_input' is full recompute's checkpoint)."""
    stored, _ = _activation_layer(model, is_moe_layer(model, layer_index), _knob_arrays(cfg))
    return {key: float(v.squeeze()) for key, v in stored.items() if float(v.squeeze())}


# --- the core: every breakdown key for every rank ------------------------------------------------


def _core(m: _Model, rank: dict[str, np.ndarray], k: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Bytes per breakdown key, shape (candidates, pp); knob arrays k have shape (candidates, 1)."""
    model = m.spec
    t, ep, zero = k["tp"], k["ep"], k["zero"]
    group = k["dp"] * k["cp"]                               # non-expert data-parallel group
    expert_group = np.maximum(np.floor(group / ep), 1.0)    # expert data-parallel group
    first, last = rank["first"], rank["last"]
    embed_copy = last * (1 - first) * float(model.tie_word_embeddings or model.num_mtp_layers > 0)
    layers_ne, layers_ex = _per_rank_params(m, rank, t, ep)
    mtp_ne, mtp_ex = _per_rank_params(m, m.mtp_parts, t, ep)
    modules = {  # (non-expert, expert) parameters on this GPU
        "layers": (layers_ne, 0.0),
        "experts": (0.0, layers_ex),
        "embedding": (first * (m.embed_vocab / t + m.embed_repl) + embed_copy * m.embed_vocab / t, 0.0),
        "lm_head": (last * (m.head / t + m.final_norm), 0.0),
        "mtp": (last * mtp_ne, last * mtp_ex),
    }
    grad_bytes = np.where(k["bf16_grads"] > 0, GRAD_BYTES_BF16, GRAD_BYTES)
    optimizer_bytes = np.where(k["bf16_moments"] > 0, OPTIMIZER_BYTES_BF16_MOMENTS, OPTIMIZER_BYTES)

    def sharded(ne, ex, min_zero):
        """Parameters per GPU once ZeRO stage >= min_zero shards them over their data-parallel group."""
        return ne / np.where(zero >= min_zero, group, 1) + ex / np.where(zero >= min_zero, expert_group, 1)

    out: dict[str, np.ndarray] = {}
    for name, (ne, ex) in modules.items():
        out[f"weights/{name}"] = WEIGHT_BYTES * sharded(ne, ex, 3)
        out[f"gradients/{name}"] = grad_bytes * sharded(ne, ex, 2)
        out[f"optimizer/{name}"] = np.where(k["optimizer_offload"] > 0, 0.0, optimizer_bytes * sharded(ne, ex, 1))
    # fp8: TE's fp8 weight + transpose for GEMM weights (blocks and MTP), sharded like the weights.
    gemm_ne = layers_ne - rank["norm_router"] + last * (mtp_ne - m.mtp_parts["norm_router"])
    gemm_ex = layers_ex + last * mtp_ex
    fp8 = k["precision"] == PRECISION_CODES[Precision.fp8]
    out["weights/fp8_cache"] = np.where(fp8, FP8_WEIGHT_CACHE_BYTES, 0.0) * sharded(gemm_ne, gemm_ex, 3)
    # ZeRO transients: the largest block of the rank, unsharded over the groups that shard it.
    unit = 0.0
    for kind in ("dense", "moe"):
        parts = {key: rank[f"{kind}_{key}"] for key in _PARAM_KEYS}
        ne, ex = _per_rank_params(m, parts, t, ep)
        unit = np.maximum(unit, np.where(rank[f"n_{kind}"] > 0, ne * (group > 1) + ex * (expert_group > 1), 0.0))
    out["weights/zero3_prefetch"] = np.where(zero >= 3, 2 * WEIGHT_BYTES * unit, 0.0)
    out["gradients/zero2_bucket"] = np.where(zero >= 2, grad_bytes * unit, 0.0)

    # Activations: per-layer tensors x layers x in-flight micro-batches (+ extras, working set).
    inflight = _inflight(k["schedule"], k["pp"], k["num_microbatches"], k["vpp"], rank["stage"])
    chunk = np.where((k["schedule"] == _DUALPIPE) & (k["pp"] > 1), 0.5, 1.0)   # 2 chunks per rank
    head_inflight = np.where((k["schedule"] == _GPIPE) & (k["pp"] > 1), k["num_microbatches"], 1.0)
    kinds = [(False, rank["n_dense"])] + ([(True, rank["n_moe"])] if model.is_moe else [])
    working = 0.0
    for moe, count in kinds:
        stored, full = _activation_layer(model, moe, k)
        for key, v in stored.items():
            out[f"activations/{key}"] = out.get(f"activations/{key}", 0.0) + inflight * chunk * count * v
        extra = sum(full.values()) - sum(stored.values())
        working = np.maximum(working, np.where(count > 0, extra, 0.0))
    out["activations/recompute_working_set"] = working
    if model.is_moe:   # transient all-to-all buffers of one MoE layer (see 'MoE token buffers' above)
        rows = k["seq"] / k["cp"] * k["mbs"] * model.experts_per_token
        copies = np.where(k["ep"] > 1, 2.0, 1.0)
        out["activations/moe_token_buffers"] = np.where(rank["n_moe"] > 0, copies * 2 * rows * model.hidden_size, 0.0)
    tok, h, r = k["seq"] / k["cp"] * k["mbs"], model.hidden_size, _seq_divisor(k)
    dropout_mask = tok * h / r if _has_dropout(model) else 0.0
    out["activations/embedding"] = first * inflight * chunk * (8 * tok + dropout_mask)   # int64 ids (+ mask)
    # Last stage: final-norm input, LM-head input (2sbh/r each) and the fp32 softmax of the
    # vocab-parallel cross-entropy, 4 s b V / t; the loss backward follows the last forward at
    # once, so one micro-batch of logits is live (m with gpipe).
    head_inputs = (2 * float(model.final_norm) + 2) * tok * h / r
    logits = 4 * tok * model.vocab_size / t
    out["activations/lm_head/inputs"] = last * head_inflight * head_inputs
    out["activations/lm_head/logits"] = last * head_inflight * logits
    if model.num_mtp_layers:   # each MTP module: a block, enorm/hnorm and eh_proj inputs, its own head
        stored, _ = _activation_layer(model, is_moe_layer(model, model.num_layers), k)
        mtp = sum(stored.values()) + 8 * tok * h / r + head_inputs + logits
        out["activations/mtp"] = last * head_inflight * model.num_mtp_layers * mtp

    activations = sum(v for key, v in out.items() if key.startswith("activations/"))
    groups = sum((k[n] > 1).astype(float) for n in ("tp", "pp", "cp", "dp", "ep"))
    out["other/cuda_context"] = CUDA_CONTEXT_GIB * GIB + 0 * first
    out["other/nccl"] = NCCL_GIB_PER_GROUP * GIB * groups + 0 * first
    out["other/temporaries"] = TEMPORARIES_FRACTION * activations
    shape = np.broadcast_shapes(t.shape, first.shape)
    return {key: np.broadcast_to(np.asarray(v, dtype=float), shape) for key, v in out.items()}


def _components(parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    comps = {c: sum(v for key, v in parts.items() if key.startswith(c + "/")) for c in COMPONENTS}
    comps["total"] = sum(comps[c] for c in COMPONENTS)
    return comps


# --- public entry points -------------------------------------------------------------------------


def _reason(comps: dict[str, float], stage: int, available: float, cfg: ParallelConfig) -> str:
    """'needs X GiB on stage i, Y GiB available: <largest> Z GiB dominate; try ...'."""
    largest = max(COMPONENTS, key=lambda c: comps[c])
    hints = {
        "activations": ([] if cfg.recompute is Recompute.full else ["recompute=full"])
        + ["a larger tp/pp"] + (["a smaller mbs"] if cfg.mbs > 1 else ["a larger cp"]),
        "optimizer": ["zero=1 or more over a larger dp", "optimizer_offload"],
        "weights": ["a larger tp/pp", "zero=3"],
        "gradients": ["zero=2", "a larger tp/pp", "bf16_grads"],
        "other": ["fewer parallel groups", "a larger GPU"],
    }[largest]
    return (f"needs {comps['total']:.1f} GiB on stage {stage}, {available:.1f} GiB available: "
            f"{largest} {comps[largest]:.1f} GiB dominate; try {', '.join(hints[:-1])} or {hints[-1]}")


def memory_breakdown(model: ModelSpec, cfg: ParallelConfig, gpu: GPUSpec, headroom_gib: float = 0.0) -> MemoryResult:
    """Memory per GPU of every pipeline rank; the result reports the most loaded one.

    fits = total <= capacity - headroom_gib. The module docstring states the conventions.
    """
    m = _prepare(model)
    rank = _rank_data(m, cfg.pp, cfg.vpp, cfg.schedule is Schedule.dualpipe)
    knobs = _knob_arrays(cfg)
    parts = {key: v[0] / GIB for key, v in _core(m, rank, knobs).items()}
    comps = _components(parts)
    inflight = _inflight(knobs["schedule"], cfg.pp, cfg.num_microbatches, cfg.vpp, rank["stage"])[0]
    per_stage = [
        {"stage": i, "num_layers": int(rank["num_layers"][0, i]), "inflight_microbatches": float(inflight[i]),
         **{c: float(comps[c][i]) for c in (*COMPONENTS, "total")}}
        for i in range(cfg.pp)
    ]
    worst = int(np.argmax(comps["total"]))
    worst_comps = {c: float(comps[c][worst]) for c in (*COMPONENTS, "total")}
    available = gpu.memory_gib - headroom_gib
    fits = worst_comps["total"] <= available
    return MemoryResult(
        **worst_comps, capacity=gpu.memory_gib, fits=fits,
        reason=None if fits else _reason(worst_comps, worst, available, cfg),
        worst_stage=worst, per_stage=per_stage,
        breakdown={key: float(v[worst]) for key, v in parts.items() if v[worst]},
    )


VECTOR_KEYS = ("tp", "pp", "cp", "ep", "dp", "vpp", "zero", "mbs", "num_microbatches", "seq",
               "recompute", "schedule", "precision")
"""Required keys of memory_totals_vectorised; optional: sequence_parallel (default 1),
optimizer_offload (0), bf16_grads (0), bf16_moments (0), fp8_activations (0), attention (0: flash; 1: eager), recompute_modules (an integer
mask of recompute.MODULE_BITS; default: recompute.DEFAULT_MASK where recompute is selective).
Codes: recompute 0 none, 1 selective, 2 full; schedule
in Schedule order (0 gpipe, 1 1f1b, 2 interleaved, 3 zb-h1, 4 dualpipe); precision 0 bf16, 1 fp8."""


def memory_totals_vectorised(model: ModelSpec, gpu: GPUSpec, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The scalar path's worst-stage components (GiB) for many already-valid layouts at once.

    Layouts are grouped by (pp, vpp, dualpipe), which fix each rank's layers; within a group
    everything is numpy arithmetic over candidates x ranks, through the same core as
    memory_breakdown. Returns weights, gradients, optimizer, activations, other, total and
    worst_stage arrays; ``gpu`` is accepted for symmetry (capacity is gpu.memory_gib).
    """
    defaults = {"sequence_parallel": 1, "optimizer_offload": 0, "bf16_grads": 0, "bf16_moments": 0,
                "fp8_activations": 0,
                "attention": ATTENTION_CODES[Attention.flash]}
    given = {key: arrays.get(key, defaults.get(key)) for key in (*VECTOR_KEYS, *defaults)}
    if given["recompute"] is not None:
        default_mask = np.where(np.asarray(given["recompute"]) == _SELECTIVE, recompute_rules.DEFAULT_MASK, 0)
        given["recompute_modules"] = arrays.get("recompute_modules", default_mask)
    missing = [key for key, v in given.items() if v is None]
    if missing:
        raise KeyError(f"memory_totals_vectorised needs arrays for: {', '.join(missing)}")
    flat = dict(zip(given, np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in given.values()))))
    n = flat["tp"].size
    flat = {key: v.reshape(n) for key, v in flat.items()}
    out = {key: np.zeros(n) for key in (*COMPONENTS, "total", "worst_stage")}
    m = _prepare(model)
    dual = (flat["schedule"] == _DUALPIPE) & (flat["pp"] > 1)
    combos = np.stack([flat["pp"], flat["vpp"], dual]).T
    for pp, vpp, is_dual in np.unique(combos, axis=0):
        idx = np.nonzero((combos == (pp, vpp, is_dual)).all(axis=1))[0]
        rank = _rank_data(m, int(pp), int(vpp), bool(is_dual))
        knobs = {key: v[idx][:, None] for key, v in flat.items()}
        comps = _components(_core(m, rank, knobs))
        worst = np.argmax(comps["total"], axis=1)
        for key in (*COMPONENTS, "total"):
            out[key][idx] = comps[key][np.arange(idx.size), worst] / GIB
        out["worst_stage"][idx] = worst
    return out
