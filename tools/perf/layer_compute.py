"""Compute time of one transformer layer, the embedding and the LM head for one micro-batch on one GPU:
the shapes of each block's GEMMs, attention core and memory-bound passes, timed by the kernel models of
tools/perf/compute.py (MoE layers by tools/perf/moe.py). Communication is apart (collectives.py).
"""

from __future__ import annotations

from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.config.resolve import kernel_span
from trainplan.tools.core.enums import Attention, Precision
from trainplan.tools.hardware.specs import GPUSpec, ModelSpec
from trainplan.tools.perf.compute import (ELEMENTWISE_PASSES, OpTimes, attention_time_s, eager_attention_time_s, linear,
                                          memory_bound_time_s)
from trainplan.tools.perf.moe import add_moe_compute


def layer_times(model: ModelSpec, cfg: ParallelConfig, gpu: GPUSpec, layer_index: int) -> OpTimes:
    """Compute time of one transformer layer for one micro-batch on one GPU (no communication).

    Tokens per GPU: T = mbs * seq / cp. Tensor parallelism splits heads and MLP width by tp; the
    GEMMs still see all T tokens (sequence parallelism gathers them first). Elementwise work on the
    residual stream is split by tp under sequence parallelism.
    """
    tp, precision = cfg.tp, cfg.precision
    tokens = cfg.mbs * cfg.seq / cfg.cp
    h = model.hidden_size
    times = OpTimes()
    heads = model.num_attention_heads / tp

    # Attention projections.
    if model.attention_type == "mla":
        qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        v_dim = model.v_head_dim
        if model.q_lora_rank:
            linear(times, "attention/qkv", tokens, h, model.q_lora_rank, gpu, precision)
            linear(times, "attention/qkv", tokens, model.q_lora_rank, heads * qk_dim, gpu, precision)
        else:
            linear(times, "attention/qkv", tokens, h, heads * qk_dim, gpu, precision)
        linear(times, "attention/qkv", tokens, h, model.kv_lora_rank + model.qk_rope_head_dim, gpu, precision)
        linear(times, "attention/qkv", tokens, model.kv_lora_rank,
               heads * (model.qk_nope_head_dim + v_dim), gpu, precision)
        linear(times, "attention/out", tokens, heads * v_dim, h, gpu, precision)
        kv_heads_local = heads
    else:
        qk_dim = v_dim = model.head_dim
        kv_heads_local = max(1.0, model.num_kv_heads / tp)
        linear(times, "attention/qkv", tokens, h, (heads + 2 * kv_heads_local) * model.head_dim, gpu, precision)
        linear(times, "attention/out", tokens, heads * model.head_dim, h, gpu, precision)

    # Attention core: queries of this CP rank against the whole sequence (ring attention).
    if cfg.attention is Attention.eager:
        forward, backward = eager_attention_time_s(cfg.mbs, tokens / cfg.mbs, cfg.seq, heads, qk_dim, v_dim, gpu,
                                                   dropout=model.attention_dropout > 0)
    else:   # a document mask (Layout.document_tokens) leaves each query its own document's keys
        forward, backward = attention_time_s(tokens, kernel_span(cfg), heads, qk_dim, v_dim, gpu, causal=True,
                                             kernel=cfg.attention)
    times.add("attention/core", forward, backward)

    # MLP or MoE.
    mlp_matrices = 2 if model.gated_mlp else 1
    if layer_index in model.moe_layers:
        add_moe_compute(times, model, cfg, gpu)
        width = (model.experts_per_token * model.moe_intermediate_size
                 + model.num_shared_experts * (model.shared_expert_intermediate_size or model.moe_intermediate_size))
    else:
        f = model.intermediate_size / tp
        linear(times, "mlp", tokens, h, mlp_matrices * f, gpu, precision)
        linear(times, "mlp", tokens, f, h, gpu, precision)
        width = model.intermediate_size

    # Memory-bound work per token, in 2-byte elements: two norms, two residual adds (read 2h, write h),
    # rotary on q and k and the activation; the passes each takes depend on fusion (ELEMENTWISE_PASSES).
    # Backward moves about twice the bytes of the forward.
    passes = ELEMENTWISE_PASSES[cfg.fused_kernels]
    residual_elements = (2 * passes["norm"] + 2 * 3) * h / (tp if cfg.sequence_parallel else 1)
    activation_elements = (passes["gated_activation"] if model.gated_mlp else 2) * width / tp
    rotary_elements = passes["rotary"] * (heads + kv_heads_local) * qk_dim
    bytes_forward = 2 * tokens * (residual_elements + activation_elements + rotary_elements)
    forward = memory_bound_time_s(bytes_forward, gpu, kernels=passes["kernels"])
    times.add("elementwise", forward, 2 * forward)
    return times


def embedding_times(model: ModelSpec, cfg: ParallelConfig, gpu: GPUSpec) -> OpTimes:
    """First-stage extra work: the embedding lookup (memory-bound) and its gradient scatter."""
    tokens = cfg.mbs * cfg.seq / cfg.cp
    forward = memory_bound_time_s(2 * 2 * tokens * model.hidden_size / cfg.tp, gpu, kernels=2)
    times = OpTimes()
    times.add("embedding", forward, 0.0, 2 * forward)
    return times


def head_times(model: ModelSpec, cfg: ParallelConfig, gpu: GPUSpec) -> OpTimes:
    """Last-stage extra work: final norm, the LM head GEMM over V/tp columns, and the fp32 cross-entropy."""
    tokens = cfg.mbs * cfg.seq / cfg.cp
    times = OpTimes()
    linear(times, "lm_head", tokens, model.hidden_size, model.vocab_size / cfg.tp, gpu, Precision.bf16)
    # Softmax cross-entropy reads and writes the fp32 logits (4 B) a few times.
    loss_forward = memory_bound_time_s(3 * 4 * tokens * model.vocab_size / cfg.tp, gpu, kernels=3)
    times.add("loss", loss_forward, loss_forward)
    return times
