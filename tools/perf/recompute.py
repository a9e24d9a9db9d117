"""Activation recompute: which saved tensors each mode drops, and what the recomputation costs.

Modes (ParallelConfig.recompute):
  none       keep every tensor a block saves for its backward;
  selective  recompute the named modules (ParallelConfig.recompute_modules), Megatron-Core's
             `--recompute-granularity selective --recompute-modules ...`; the default set is
             Megatron's default, core_attn alone (Korthikanti et al. 2022's selective recompute);
  full       keep only each block's input and rerun its whole forward in the backward.

The modules (Megatron-LM megatron/core/transformer/moe/README.md, "Fine-grained Recomputation";
MCore v0.13 release notes), and the tensor groups of memory._layer_tensors each one drops:
  core_attn    the attention core, by standard checkpointing: its inputs Q, K, V stay, the
               softmax statistics (flash) or the s x s softmax, dropout mask and output (eager) go.
  layernorm    input_layernorm and pre_mlp_layernorm, by output-discarding checkpointing: their
               inputs (the residual stream) stay, their outputs (the QKV / MLA down-projection
               input, the MLP / router / shared-expert input) are recomputed.
  mla_up_proj  the MLA up-projections with their latent norms and RoPE: the latents stay; the
               latent-norm outputs and Q, K, V go.
  moe_act      the experts' activation (SwiGLU), output-discarding: its input stays, its output
               (the experts' fc2 input) goes.
  mlp          a dense MLP, standard checkpointing: its bf16 input stays, the rest goes.
  moe          a whole MoE layer, standard checkpointing: its input stays, the router scores,
               the dispatched tokens and the experts' tensors go.
DeepSeek-V3 recomputes "all RMSNorm operations and MLA up-projections" and caches the SwiGLU
inputs while recomputing its output (DeepSeek-V3 report §3.2.3 and §3.3.3): layernorm,
mla_up_proj and moe_act in this vocabulary.

The recomputed work is timed (recomputed_forward_s) and counted in hardware FLOPs
(recomputed_flops_per_token) with the same module list, so HFU and the step time agree with the
memory saved.

Not a mode: a kernel that recomputes inside its own backward, as flash attention does the softmax.
save_mlp_act_output=false (contract.Layout) is the fused SwiGLU of xformers.ops.swiglu (Meta):
_SwiGLUFusedFunc saves its input and the gate and up outputs, and silu_bw_fused returns the
product again for the down-projection's weight gradient. activations.py stops storing the fc2
input, and recomputed_forward_s times the extra write; it adds no matmul FLOPs.
"""

from __future__ import annotations

import numpy as np

from trainplan.tools.perf import compute
from trainplan.tools.hardware.counting import flops_per_token, is_moe_layer, layer_flops_per_token
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Recompute, RecomputeModule
from trainplan.tools.config.resolve import DEFAULT_RECOMPUTE_MODULES

MODULE_BITS = {module: 1 << i for i, module in enumerate(RecomputeModule)}
"""Bit of each module in the integer masks the vectorised memory path carries."""
DEFAULT_MASK = MODULE_BITS[RecomputeModule.core_attn]

DROPS: dict[RecomputeModule, tuple[str, ...]] = {
    RecomputeModule.core_attn: ("attention/core",),
    RecomputeModule.layernorm: ("attention/qkv_input", "mlp/fc1_input", "moe/input"),
    RecomputeModule.mla_up_proj: ("attention/latent_norm_out", "attention/qkv"),
    RecomputeModule.moe_act: ("moe/expert_fc2_input", "moe/eager_silu_output"),
    RecomputeModule.mlp: ("mlp/act_input", "mlp/eager_silu_output", "mlp/fc2_input"),
    RecomputeModule.moe: ("moe/router_scores", "moe/dispatched", "moe/probs", "moe/expert_act_input",
                          "moe/expert_fc2_input", "moe/shared_act_input", "moe/shared_fc2_input",
                          "moe/eager_silu_output"),
}
"""Tensor groups (memory._layer_tensors keys) a module's recompute stops saving."""
CHECKPOINT_INPUT = {RecomputeModule.mlp: "mlp/fc1_input"}
"""Modules checkpointed the standard way keep their input in bf16 (2 B) even when the GEMM would
have cached an fp8 copy: the tensor group that becomes the bf16 input."""


def modules_of(mask: int) -> tuple[RecomputeModule, ...]:
    return tuple(m for m, bit in MODULE_BITS.items() if mask & bit)


def mask_of(modules) -> int:
    return sum(MODULE_BITS[RecomputeModule(m)] for m in set(modules))


def config_mask(cfg: ParallelConfig) -> int:
    """The module mask of a resolved config (0 unless recompute is selective)."""
    if cfg.recompute is not Recompute.selective:
        return 0
    return mask_of(cfg.recompute_modules if cfg.recompute_modules is not None else DEFAULT_RECOMPUTE_MODULES)


def dropped(key: str, mask) -> np.ndarray:
    """1 where a module in ``mask`` (an integer array) drops tensor group ``key``."""
    bits = sum(MODULE_BITS[m] for m, keys in DROPS.items() if key in keys)
    return (np.asarray(mask, dtype=np.int64) & bits) > 0


# --- the recomputed work ----------------------------------------------------------------------------


def _norm_forward_s(model: ModelSpec, cfg: ParallelConfig, gpu, tokens: float) -> float:
    """input_layernorm + pre_mlp_layernorm forward: read and write the residual stream, 2 B each."""
    r = cfg.tp if cfg.sequence_parallel else 1
    return compute.memory_bound_time_s(2 * 2 * 2 * tokens * model.hidden_size / r, gpu, kernels=2)


def _mla_up_proj_forward_s(model: ModelSpec, cfg: ParallelConfig, gpu, tokens: float) -> float:
    """The q and kv up-projections (layer_compute.layer_times' shapes) plus the latent norms and RoPE."""
    heads = model.num_attention_heads / cfg.tp
    seconds = compute.gemm_time_s(tokens, heads * (model.qk_nope_head_dim + model.v_head_dim), model.kv_lora_rank,
                                  gpu, cfg.precision)
    latents = model.kv_lora_rank
    if model.q_lora_rank:
        seconds += compute.gemm_time_s(tokens, heads * (model.qk_nope_head_dim + model.qk_rope_head_dim),
                                       model.q_lora_rank, gpu, cfg.precision)
        latents += model.q_lora_rank
    qk = heads * (2 * (model.qk_nope_head_dim + model.qk_rope_head_dim) + model.v_head_dim)
    return seconds + compute.memory_bound_time_s(2 * 2 * tokens * (latents + qk), gpu, kernels=3)


def _moe_act_forward_s(model: ModelSpec, cfg: ParallelConfig, gpu, tokens: float) -> float:
    """The experts' activation on this GPU's routed rows: read the fc1 output, write its product."""
    rows = tokens * model.experts_per_token
    width = model.moe_intermediate_size / cfg.tp
    reads = 2 if model.gated_mlp else 1
    return compute.memory_bound_time_s(2 * (reads + 1) * rows * width, gpu)


def _shared_act_forward_s(model: ModelSpec, cfg: ParallelConfig, gpu, tokens: float) -> float:
    """The shared experts' activation on every token: read the fc1 output, write its product."""
    width = model.num_shared_experts * model.shared_expert_intermediate_size / cfg.tp
    reads = 2 if model.gated_mlp else 1
    return compute.memory_bound_time_s(2 * (reads + 1) * tokens * width, gpu)


def _mlp_act_output_s(model: ModelSpec, cfg: ParallelConfig, gpu, tokens: float) -> float:
    """save_mlp_act_output=false: the fused SwiGLU backward, which reads the gate and up outputs
    anyway, also writes the recomputed product for the down-projection's weight gradient: 2 B per
    element of f/t, inside the same kernel (no extra launch)."""
    return compute.memory_bound_time_s(2 * tokens * model.intermediate_size / cfg.tp, gpu, kernels=0)


def recomputed_forward_s(model: ModelSpec, cfg: ParallelConfig, gpu, times: compute.OpTimes,
                         layer_ids: list[int]) -> float:
    """Seconds of forward work the backward repeats on one stage for one micro-batch.

    ``times`` are the stage's compute.OpTimes over ``layer_ids`` (its blocks, and the embedding and
    head on the end stages); full reruns every block's forward, selective the modules' own work.
    With save_mlp_act_output=false each dense MLP the recompute mode does not rerun adds the
    product its fused SwiGLU backward rewrites (_mlp_act_output_s), whatever the mode; with
    fp8_activations each MoE layer reruns its routed (unless moe_act does) and shared experts'
    SwiGLU (activations.SWIGLU_OUTPUTS_RECOMPUTED), whatever the mode short of full.
    """
    forward = times.forward_s
    tokens = cfg.mbs * cfg.seq / cfg.cp
    n_dense = sum(1 for i in layer_ids if not is_moe_layer(model, i))
    n_moe = len(layer_ids) - n_dense
    modules = modules_of(config_mask(cfg))
    reruns_mlp = cfg.recompute is Recompute.full or RecomputeModule.mlp in modules
    seconds = 0.0 if cfg.save_mlp_act_output or reruns_mlp else n_dense * _mlp_act_output_s(model, cfg, gpu, tokens)
    if cfg.fp8_activations and cfg.recompute is not Recompute.full and RecomputeModule.moe not in modules:
        # activations.SWIGLU_OUTPUTS_RECOMPUTED: the MoE SwiGLU outputs, unless moe_act already reruns the routed ones
        routed = 0.0 if RecomputeModule.moe_act in modules else _moe_act_forward_s(model, cfg, gpu, tokens)
        seconds += n_moe * (routed + _shared_act_forward_s(model, cfg, gpu, tokens))
    if cfg.recompute is Recompute.none:
        return seconds
    if cfg.recompute is Recompute.full:
        return sum(v for k, v in forward.items() if k not in ("embedding", "lm_head", "loss"))
    for module in modules:
        if module is RecomputeModule.core_attn:
            seconds += forward.get("attention/core", 0.0)
        elif module is RecomputeModule.layernorm:
            seconds += len(layer_ids) * _norm_forward_s(model, cfg, gpu, tokens)
        elif module is RecomputeModule.mla_up_proj and model.attention_type == "mla":
            seconds += len(layer_ids) * _mla_up_proj_forward_s(model, cfg, gpu, tokens)
        elif module is RecomputeModule.moe_act:
            seconds += n_moe * _moe_act_forward_s(model, cfg, gpu, tokens)
        elif module is RecomputeModule.mlp:
            seconds += forward.get("mlp", 0.0)
        elif module is RecomputeModule.moe:
            seconds += sum(v for k, v in forward.items() if k.startswith("moe/"))
    return seconds


def recomputed_flops_per_token(model: ModelSpec, cfg: ParallelConfig, seq: int) -> float:
    """Matmul FLOPs per token the backward repeats (step.py: hardware FLOPs = executed FLOPs + these),
    counted as the kernels run them: attention causal under flash, full under eager.

    full: the forward of every block; selective: the scores for core_attn, the up-projection GEMMs
    for mla_up_proj, the dense MLP for mlp, the router, experts and shared experts for moe.
    layernorm and moe_act are memory-bound and add no matmul FLOPs.
    """
    if cfg.recompute is Recompute.none:
        return 0.0
    causal = cfg.attention.fused   # the FLOPs the kernels run (step.py's hardware FLOPs)
    if cfg.recompute is Recompute.full:
        flops = flops_per_token(model, seq, causal=causal, include_mtp=True)
        return flops.forward - flops.breakdown.get("lm_head", 0.0)
    modules = set(modules_of(config_mask(cfg)))
    total = 0.0
    for i in range(model.num_layers):
        flops = layer_flops_per_token(model, i, seq, causal=causal)
        if RecomputeModule.core_attn in modules:
            total += flops["attention/scores"]
        if RecomputeModule.mla_up_proj in modules and model.attention_type == "mla":
            a = model.num_attention_heads
            up = model.kv_lora_rank * a * (model.qk_nope_head_dim + model.v_head_dim)
            if model.q_lora_rank:
                up += model.q_lora_rank * a * (model.qk_nope_head_dim + model.qk_rope_head_dim)
            total += 2.0 * up
        if RecomputeModule.mlp in modules:
            total += flops.get("mlp", 0.0)
        if RecomputeModule.moe in modules:
            total += sum(v for k, v in flops.items() if k.startswith("moe/"))
    return total


__all__ = ["DROPS", "MODULE_BITS", "config_mask", "dropped", "mask_of", "modules_of",
           "recomputed_flops_per_token", "recomputed_forward_s"]
