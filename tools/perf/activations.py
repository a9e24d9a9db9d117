"""Activations one GPU keeps for the backward pass: tensors per block, recompute, in-flight micro-batches.

Symbols as in memory.py: s sequence length, b micro-batch (mbs), h hidden size, a query heads, g
key/value heads, d head dim, f MLP width, V vocabulary, t tensor-parallel size, r = t with sequence
parallelism (else 1), E routed experts, k experts per token.

Per tensor after Korthikanti et al. 2022 (16-bit activations, 1-byte dropout masks); _layer_tensors
derives each tensor group. CP divides s by cp. Recompute (recompute.py): none keeps every tensor;
selective drops the tensors of the named modules; full keeps only the layer input. In-flight
micro-batches per schedule: inflight_microbatches. memory.py multiplies these by the layers and
micro-batches each rank holds.
"""

from __future__ import annotations

import numpy as np

from trainplan.tools.perf import offload as offload_rules
from trainplan.tools.perf import finetune
from trainplan.tools.perf import finetune_tensors
from trainplan.tools.perf import recompute as recompute_rules
from trainplan.tools.perf.loss import LOSS_CODES
from trainplan.tools.config.resolve import dropout_on_output, resolved_fp32_norms, resolved_loss_kernel
from trainplan.tools.config.codes import ATTENTION_CODES, PRECISION_CODES, RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.hardware.counting import is_moe_layer
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Attention, Precision, Recompute, Schedule

# The attention kernel is the layout's `attention` knob (never the dropout): eager attention keeps
# the a s^2 softmax output, plus its dropout mask and output when the recipe has attention dropout;
# flash keeps only the log-sum-exp (dropout runs inside the kernel from its RNG state).
# ModelSpec.attention_dropout > 0 (the HF config's attn_pdrop / attention_dropout; GPT2Config
# defaults to 0.1) also marks the hidden dropout masks of a GPT-3-style recipe.


FP8_TILE = 128
"""elements per quantization tile of a cached FP8 activation with fp8_activations: DeepSeek-V3 §3.3.2
("for activations, we group and scale elements on a 1x128 tile basis (i.e., per token per 128 channels)")"""
FP8_SCALE_BYTES = 4.0
"""bytes of one tile's scale: fp32, as DeepEP's FP8 dispatch carries them (deep_ep Buffer.dispatch: an
FP8 [num_tokens, hidden] tensor with torch.float scales [num_tokens, hidden // 128])"""
E5M6_BYTES = 1.5
"""bytes per element of the attention output with fp8_activations: DeepSeek-V3 §3.3.3 keeps "the inputs
of the Linear after the attention operator" in "a customized E5M6 data format" (1 sign + 5 exponent +
6 mantissa bits = 12 bits) when "compressing cached activations ... into lower-precision formats" to
reduce memory: in a 16-bit container E5M6 would save nothing over bf16 (which has 7 mantissa bits), so
it is counted packed, 12 bits per element, plus its 1x128 tile scales"""

_NONE, _SELECTIVE, _FULL = (RECOMPUTE_CODES[m] for m in Recompute)
_GPIPE, _INTERLEAVED, _DUALPIPE = (SCHEDULE_CODES[s] for s in (Schedule.gpipe, Schedule.interleaved,
                                                               Schedule.dualpipe))


# --- pipeline schedule ---------------------------------------------------------------------------


def inflight(schedule_code, pp, num_microbatches, vpp, stage):
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


def chunk_inflight(pp, num_microbatches, vpp, stage, chunk):
    """Interleaved schedule: micro-batches of model chunk ``chunk`` that rank ``stage`` holds at its
    peak (arrays broadcast). Megatron runs forwards in groups of p micro-batches per chunk, chunks
    0..v-1 in turn (microbatch_group_size_per_vp_stage = p), and rank i takes its first backward
    after W_i = 2(p - i - 1) + (v - 1) p warm-up forwards, so it then holds F = min(W_i + 1, m v)
    chunk forwards, of which chunk c has p floor(F / pv) + min(max(F mod pv - c p, 0), p). Summed
    over the chunks this is F = v x the uniform count of inflight; apart, it weights chunks that
    hold different numbers of layers (Llama 3 405B's first chunk holds only the embedding, §3.3.2).
    This is the composition at the end of the warm-up; in the steady state a forward and a backward
    alternate, so when chunks differ in size the held bytes can rise by at most one chunk's
    activations later on (+1 of 112 layer-micro-batches on Llama 3 405B's last rank at m = 32).
    """
    p, m, v, i, c = (np.asarray(x, dtype=float) for x in (pp, num_microbatches, vpp, stage, chunk))
    forwards = np.minimum(2 * (p - i - 1) + (v - 1) * p + 1, m * v)
    rounds, rest = np.floor(forwards / (p * v)), np.mod(forwards, p * v)
    return p * rounds + np.clip(rest - c * p, 0.0, p)


def inflight_microbatches(schedule: Schedule | str, pp: int, num_microbatches: int, vpp: int = 1) -> list[float]:
    """In-flight micro-batches per pipeline stage, closed forms (see _inflight)."""
    code = SCHEDULE_CODES[Schedule(schedule)]
    return [float(x) for x in inflight(code, pp, num_microbatches, vpp, np.arange(pp))]




def has_dropout(model: ModelSpec) -> bool:
    return model.attention_dropout > 0


def _layer_tensors(model: ModelSpec, moe: bool, k: dict) -> dict[str, np.ndarray]:
    """Bytes one block saves for backward per micro-batch with no recompute, per tensor group, for knob arrays k.

    s: local tokens per sequence (seq / cp); seq: full length (keys of eager attention); b: mbs.
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
    experts' activation input (4sbf_s) and fc2 input (2sbf_s). The expert outputs are not kept:
    Megatron-Core multiplies the routing probabilities inside the experts' activation
    (activation_func_with_probs in experts.py, "memory efficient token permutation", MCore v0.13),
    so the combine is a plain sum that saves nothing.
    fp8_activations (DeepSeek-V3 §3.3.3, "Low-Precision Storage"): the SwiGLU inputs of the routed
    and shared experts are cached in FP8 (1 B, so 2sbf_e for gate and up), and the attention output
    O, read by the attention backward and the output projection, is one E5M6 copy (12 bits,
    E5M6_BYTES) instead of bf16 O plus an FP8 cache. Every FP8 (and E5M6) activation it caches is
    quantized in 1x128 tiles (§3.3.2) and carries one fp32 scale per tile: 4/128 B per element
    (FP8_SCALE_BYTES / FP8_TILE). The SwiGLU outputs (the fc2 inputs) are recomputed, not stored:
    activation_layer drops them (§3.3.3 (2)).
    unfused (fused_kernels=false: PyTorch eager ops, as Hugging Face's LlamaRMSNorm and LlamaMLP run
    them; what each op saves is pytorch/pytorch:tools/autograd/derivatives.yaml): RMSNorm casts its input
    to fp32, which pow and the rsqrt multiply save (4 B), and the weight multiply saves the bf16
    normalized tensor (2 B), instead of the fused kernel's bf16 input (2 B): + 4 B per element per
    norm. LayerNorm is one ATen kernel (native_layer_norm) even in eager mode: unchanged. SwiGLU as
    silu then mul keeps silu(gate) as well, 2 s b f / t more (routed and shared experts alike).
    Rotary multiplies by the cos/sin tables, which do not require grad: nothing per token.
    """
    s, seq, b, t, r = k["seq"] / k["cp"], k["seq"], k["mbs"], k["tp"], seq_divisor(k)
    fp8 = k["precision"] == PRECISION_CODES[Precision.fp8]
    eager = k["attention"] == ATTENTION_CODES[Attention.eager]
    fp8_activations, unfused = k["fp8_activations"] > 0, k["fused_kernels"] < 1
    h, a = model.hidden_size, model.num_attention_heads
    tok = s * b
    tile_scale = np.where(fp8_activations, FP8_SCALE_BYTES / FP8_TILE, 0.0)   # per cached FP8 element
    gemm_in = np.where(fp8, 1.0 + tile_scale, 2.0)
    dropout = has_dropout(model)
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
    context_bytes = np.where(fp8_activations, E5M6_BYTES + tile_scale, 2 + np.where(fp8, 1.0, 0.0))
    x["attention/context"] = np.where(eager, gemm_in, context_bytes) * tok * v_width / t
    if dropout:
        x["attention/dropout_mask"] = tok * h / r
    eager_glu = np.where(unfused, 2.0, 0.0) * model.gated_mlp   # silu(gate), which the mul saves
    if model.norm_type == "rmsnorm":
        x["norm/eager_fp32"] = np.where(unfused, 4.0, 0.0) * model.norms_per_layer * tok * h / r
    if not moe:
        shares_input = model.parallel_attention_mlp and model.norms_per_layer == 1
        x["mlp/fc1_input"] = 0 * tok if shares_input else gemm_in * tok * h / r
        x["mlp/act_input"] = act * tok * model.intermediate_size / t
        x["mlp/eager_silu_output"] = eager_glu * tok * model.intermediate_size / t
        x["mlp/fc2_input"] = gemm_in * tok * model.intermediate_size / t
    else:
        act = act / 2 * np.where(fp8_activations, 1.0 + tile_scale, 2.0)   # SwiGLU inputs cached in FP8
        rows = tok * model.experts_per_token
        fe = model.moe_intermediate_size
        fs = model.num_shared_experts * model.shared_expert_intermediate_size
        x["moe/input"] = 2 * tok * h / r
        x["moe/router_scores"] = 4 * tok * model.num_experts / r
        x["moe/dispatched"] = gemm_in * rows * h
        x["moe/probs"] = 4 * rows
        x["moe/expert_act_input"] = act * rows * fe / t
        x["moe/expert_fc2_input"] = gemm_in * rows * fe / t
        x["moe/shared_act_input"] = act * tok * fs / t
        x["moe/shared_fc2_input"] = gemm_in * tok * fs / t
        x["moe/eager_silu_output"] = eager_glu * (rows * fe + tok * fs) / t
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


def knob_arrays(cfg: ParallelConfig) -> dict[str, np.ndarray]:
    values = dict(tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep, etp=cfg.expert_tp, dp=cfg.dp, dp_shard=cfg.dp_shard_size,
                  vpp=cfg.vpp, zero=cfg.zero, mbs=cfg.mbs,
                  num_microbatches=cfg.num_microbatches, seq=cfg.seq,
                  recompute=RECOMPUTE_CODES[cfg.recompute], recompute_modules=recompute_rules.config_mask(cfg),
                  schedule=SCHEDULE_CODES[cfg.schedule],
                  precision=PRECISION_CODES[cfg.precision], attention=ATTENTION_CODES[cfg.attention],
                  sequence_parallel=cfg.sequence_parallel,
                  optimizer_offload=cfg.optimizer_offload, bf16_grads=cfg.bf16_grads,
                  bf16_moments=cfg.bf16_moments, fp32_params=cfg.fp32_params, pure_bf16=cfg.pure_bf16,
                  optimizer_8bit=cfg.optimizer_8bit, fp8_activations=cfg.fp8_activations,
                  deallocate_pipeline_outputs=cfg.deallocate_pipeline_outputs,
                  save_mlp_act_output=cfg.save_mlp_act_output, fused_kernels=cfg.fused_kernels,
                  offload_modules=offload_rules.config_mask(cfg),
                  method=finetune.METHOD_CODES[cfg.method], lora_rank=cfg.lora_rank or 0,
                  lora_targets=finetune.TARGET_CODES[cfg.lora_targets] if cfg.lora_targets else 0,
                  loss_kernel=LOSS_CODES[resolved_loss_kernel(cfg.loss_kernel, cfg.method)],
                  fp32_norms=resolved_fp32_norms(cfg.fp32_norms, cfg.method), lora_dropout=cfg.lora_dropout,
                  lora_dropout_post=dropout_on_output(cfg),
                  double_quant=cfg.double_quant is not False)
    return {k: np.array([[v]], dtype=float) for k, v in values.items()}


def seq_divisor(k: dict):
    """r: residual-stream tensors are split over t with sequence parallelism, else replicated."""
    return np.where((k["sequence_parallel"] > 0) & (k["tp"] > 1), k["tp"], 1.0)


SWIGLU_OUTPUTS_RECOMPUTED = ("moe/expert_fc2_input", "moe/shared_fc2_input", "moe/eager_silu_output")
"""Tensor groups fp8_activations stops storing: DeepSeek-V3 §3.3.3 (2), "Inputs of the SwiGLU operator
in MoE. ... we cache the inputs of the SwiGLU operator and recompute its output in the backward pass",
for the routed and the shared experts (both are the MoE's SwiGLUs; Megatron's moe_act covers only the
routed experts, whose SequentialMLP/TEGroupedMLP read it, while SharedExpertMLP is a plain MLP).
recompute.recomputed_forward_s times the recomputation."""


def rope_key_bytes(model: ModelSpec, tokens, r):
    """MLA with its up-projections recomputed (mla_up_proj): K is rebuilt from the stored latents and
    the decoupled RoPE key k^R, d_h^R wide per token and shared by the heads (DeepSeek-V2 §2.1.3), the
    part of the kv down-projection output that no latent norm reads; it is kept in bf16 (2 B)."""
    return 2 * tokens * model.qk_rope_head_dim / r


def activation_layer(model: ModelSpec, moe: bool, k: dict) -> tuple[dict, dict]:
    """(stored tensors, no-recompute tensors) of one block for knob arrays k.

    save_mlp_act_output = 0 (contract.Layout): the dense MLP's fc2 input, silu(gate) * up, is not
    stored; the fused SwiGLU backward recomputes it from the saved gate and up outputs
    (xformers.ops.swiglu: _SwiGLUFusedFunc saves x, x1, x2 and silu_bw_fused returns x4 for the
    down-projection's weight gradient). It stays among the no-recompute tensors, so the recompute
    working set (memory.py) holds one layer's recomputed product during the backward."""
    r = seq_divisor(k)
    s = k["seq"] / k["cp"]
    full = _layer_tensors(model, moe, k)
    if np.any(k.get("method", 0) > 0):   # LoRA/QLoRA: frozen linears save no input; the x A products
        full = finetune_tensors.saved_tensor_changes(model, moe, full, s * k["mbs"], k["method"], k["lora_rank"],
                                             k["lora_targets"])
    if np.any(k.get("fp32_norms", 0) > 0):   # PEFT's fp32 norms: fp32 block tensors and residual stream
        full = finetune_tensors.fp32_norm_changes(model, moe, full, k["method"], k["lora_targets"], k["fp32_norms"])
    if np.any(k.get("lora_dropout", 0) > 0):   # each adapter's dropout output and mask
        full = finetune_tensors.dropout_changes(model, moe, full, s * k["mbs"], k, r)
    residual_bytes = np.where(k.get("fp32_norms", 0) > 0, 4.0, 2.0) if not moe else 2.0
    layer_input = residual_bytes * s * k["mbs"] * model.hidden_size / r
    stored = _stored(full, k["recompute"], k["recompute_modules"], layer_input)
    if moe:   # fp8_activations: the MoE SwiGLU outputs are recomputed from their cached FP8 inputs
        for key in SWIGLU_OUTPUTS_RECOMPUTED:
            stored[key] = np.where(k["fp8_activations"] > 0, 0.0, stored[key])
    if model.attention_type == "mla":   # see rope_key_bytes
        recomputes_k = (k["recompute"] == _SELECTIVE) & recompute_rules.dropped("attention/qkv", k["recompute_modules"])
        stored["attention/rope_key"] = np.where(recomputes_k, rope_key_bytes(model, s * k["mbs"], r), 0.0)
    if "mlp/fc2_input" in stored:   # a fused SwiGLU that recomputes its product keeps no down-proj input
        stored["mlp/fc2_input"] = np.where(k["save_mlp_act_output"] > 0, stored["mlp/fc2_input"], 0.0)
    return stored, full


def activation_bytes_per_layer(model: ModelSpec, cfg: ParallelConfig, layer_index: int) -> dict[str, float]:
    """Bytes block ``layer_index`` keeps for backward per micro-batch, per tensor group, on one GPU,
    after TP/SP/CP and recompute (see _layer_tensors; 'layer_input' is full recompute's checkpoint)."""
    stored, _ = activation_layer(model, is_moe_layer(model, layer_index), knob_arrays(cfg))
    return {key: float(v.squeeze()) for key, v in stored.items() if float(v.squeeze())}


def offloaded_stage_bytes(model: ModelSpec, cfg: ParallelConfig, layer_ids: list[int]) -> float:
    """Bytes one stage copies to host memory per micro-batch (and back in its backward)."""
    mask = offload_rules.config_mask(cfg)
    per_kind: dict[bool, float] = {}
    total = 0.0
    for i in layer_ids:
        moe = is_moe_layer(model, i)
        if moe not in per_kind:
            stored = {k: np.asarray(v) for k, v in activation_bytes_per_layer(model, cfg, i).items()}
            per_kind[moe] = float(offload_rules.offloaded_bytes(model, stored, mask))
        total += per_kind[moe]
    return total
