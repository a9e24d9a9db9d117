"""Fine-tuning methods: full fine-tuning, LoRA (Hu et al. 2021) and QLoRA (Dettmers et al. 2023).

One module holds the method math; memory.py and step.py call the hooks at the bottom.

LoRA freezes every base weight W (d_in x d_out) and trains a low-rank update B A beside the chosen
linear layers: y = x W + (x A) B, A: d_in x r, B: r x d_out (Hu et al. 2021, §4.1). Targets:
'attention' (q, k, v, o; MLA: its q/kv down- and up-projections and o) or 'all-linear' (also the
MLP or every expert's gate/up/down: PEFT's target_modules="all-linear", which QLoRA found necessary
to match full fine-tuning, Dettmers et al. 2023 §4). The router, embedding and LM head are not
targeted (PEFT all-linear leaves out the output layer; the MoE router, a tiny h x E matrix, is left
out here).

Memory per parameter (the frozen base has no gradients and no optimizer states):
  full:  the project's default model states (memory.py: 2 + 4 + 12 B/param).
  lora:  frozen base in bf16, 2 B/param.
  qlora: frozen linear weights of the blocks in 4-bit NormalFloat with double quantisation
         (Dettmers et al. 2023 §3): 4 bits + an 8-bit absmax per 64-weight block + an fp32 constant
         per 256 absmax = 4 + 8/64 + 32/(64*256) = 4.127 bits = NF4_BYTES_PER_PARAM; embedding, LM
         head, norms and router stay bf16 (bitsandbytes quantises nn.Linear only and skips lm_head).
         One linear at a time is dequantised to bf16 for its GEMM (bitsandbytes' 4-bit matmul for
         training batches), so a buffer of its largest linear stays allocated.
  adapters, lora: fp32 weights 4, fp32 gradients 4, Adam m and v 8 = 16 B/param (PEFT keeps adapters
         in fp32 under bf16 autocast, autocast_adapter_dtype=True; the fp32 adapter is its own master).
  adapters, qlora: as the QLoRA reference code (artidoro/qlora, qlora.py): LoRA layers cast to bf16
         (2 + 2 B/param) and paged 32-bit AdamW (optim="paged_adamw_32bit"): its 8 B/param of states
         live in CUDA unified memory that the driver evicts to CPU RAM under memory pressure
         (Dettmers et al. 2023 §3, "Paged Optimizers"), so they are not counted on the GPU; the step
         pays for paging them in and out over the host link (ClusterSpec.host_link_gb_s).
  ZeRO shards them as usual (1: optimizer, 2: + gradients, 3: + weights, the frozen base included:
  FSDP + QLoRA as in Answer.AI's fsdp_qlora); optimizer_offload (DeepSpeed offload) removes the
  adapter optimizer states from the GPU.

Activations (per block, tools/perf/finetune_tensors.py, with memory.py's tensors as the baseline): a frozen linear
needs no copy of its input for backward (dX = dY W^T reads only W), so the inputs of untargeted
linears are not saved; a targeted one saves its input for A's gradient, as before, plus the rank-r
product x A for B's gradient (bf16). A non-zero lora_dropout (dropout_changes) gives every adapted module a
dropout of its own on its input, whose bf16 output lora_A saves instead of x, and whose 1 B mask the dropout's
backward reads (Layout.lora_dropout_position pre, PEFT); on its output (post, NeMo AutoModel) only the mask.

Time (adapt_layer_times, per block, before host.py's floor so the floor sees the frozen base's shorter backward):
forward as the full model; backward computes input gradients (dX) for every GEMM but no weight gradient for
frozen weights; each targeted linear adds two skinny GEMMs in the forward, two for dX and two for dA/dB (they
fall to the memory roofline and show the LoRA overhead of rereading x) and PEFT's scale-and-add of the adapter
output (memory-bound; one fused kernel under torch.compile); QLoRA adds the memory-bound dequantisation of
every frozen linear in each forward (recompute included: HF and torchtune checkpoint per decoder layer, so the
recomputed forward dequantises again) and each backward (dX needs W again). host.py counts the adapters' and
the dequantisations' host ops.

FLOPs convention (stated in every result): full = 3 x forward (PaLM/Megatron). lora/qlora = forward +
input-gradient backward (frozen-weight gradients are not computed and not counted) + 3 x the
adapters' forward: 3 F - F_w + 3 F_lora, where F_w is the forward FLOPs of the weight GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainplan.tools.core import assumptions
from trainplan.tools.core.enums import LoraTargets, Method
from trainplan.tools.config.resolve import DEFAULT_LORA_RANK, dropout_on_output, is_lora
from trainplan.tools.perf import state_bytes
from trainplan.tools.perf.state_bytes import (ADAPTER_GRAD_BYTES, ADAPTER_OPTIMIZER_BYTES, ADAPTER_WEIGHT_BYTES, BF16_BYTES,
                                              NF4_BYTES_PER_PARAM, NF4_SINGLE_QUANT_BYTES_PER_PARAM)
from trainplan.tools.hardware.counting import is_moe_layer, layer_params
from trainplan.tools.perf import compute
from trainplan.tools.core.enums import Launch, Precision


METHOD_CODES = {method: i for i, method in enumerate(Method)}      # full 0, lora 1, qlora 2
TARGET_CODES = {target: i for i, target in enumerate(LoraTargets)}  # attention 0, all-linear 1, qv 2


def by_target(targets_code, values: dict) -> np.ndarray:
    """values[target] for each target code (numpy-friendly): the vectorised paths' one lookup of a per-target figure."""
    code = np.asarray(targets_code)
    return np.select([code == TARGET_CODES[target] for target in LoraTargets],
                     [np.asarray(values[target], dtype=float) for target in LoraTargets], default=np.nan)


def adapts_mlp(target) -> bool:
    """Whether the target set puts adapters on the MLP (or the experts)."""
    return LoraTargets(target) is LoraTargets.all_linear
DEFAULT_LORA_ALPHA_PER_RANK = assumptions.DEFAULT_LORA_ALPHA_PER_RANK.value
"""lora_alpha = 2 r in the exports (a common choice; alpha only scales the update, no cost)."""

FLOPS_CONVENTION = {
    Method.full: "model FLOPs = 3 x forward",
    Method.lora: "model FLOPs = forward + input-gradient backward + 3 x adapter forward "
                 "(frozen weights get no weight gradient: not computed, not counted)",
    Method.qlora: "model FLOPs = forward + input-gradient backward + 3 x adapter forward "
                  "(frozen NF4 weights get no weight gradient: not computed, not counted; dequantisation "
                  "is memory-bound, not counted)",
}


@dataclass(frozen=True)
class Linear:
    """One targeted linear layer kind: d_in x d_out, `copies` of it per block (experts), read by
    `rows` token-rows per token (k for routed experts), column- or row-parallel under TP."""

    name: str
    d_in: int
    d_out: int
    copies: int = 1
    rows: float = 1.0
    row_parallel: bool = False
    expert: bool = False


def attention_linears(model) -> list[Linear]:
    h, a = model.hidden_size, model.num_attention_heads
    if model.attention_type == "mla":
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        q = ([Linear("q_a_proj", h, model.q_lora_rank), Linear("q_b_proj", model.q_lora_rank, a * qk)]
             if model.q_lora_rank else [Linear("q_proj", h, a * qk)])
        return q + [Linear("kv_a_proj", h, model.kv_lora_rank + model.qk_rope_head_dim),
                    Linear("kv_b_proj", model.kv_lora_rank, a * (model.qk_nope_head_dim + model.v_head_dim)),
                    Linear("o_proj", a * model.v_head_dim, h, row_parallel=True)]
    d, g = model.head_dim, model.num_kv_heads
    if model.fused_qkv:     # one module, one adapter: PEFT adapts Qwen-1's c_attn whole (QwenLM/Qwen finetune.py)
        return [Linear("c_attn", h, (a + 2 * g) * d), Linear("o_proj", a * d, h, row_parallel=True)]
    return [Linear("q_proj", h, a * d), Linear("k_proj", h, g * d), Linear("v_proj", h, g * d),
            Linear("o_proj", a * d, h, row_parallel=True)]


def _mlp_linears(model, width: int, copies: int = 1, rows: float = 1.0, expert: bool = False) -> list[Linear]:
    h = model.hidden_size
    ins = ["gate_proj", "up_proj"] if model.gated_mlp else ["fc1"]
    return ([Linear(n, h, width, copies, rows, expert=expert) for n in ins]
            + [Linear("down_proj" if model.gated_mlp else "fc2", width, h, copies, rows, True, expert)])


QV_NAMES = ("q_proj", "v_proj", "c_attn")
"""The modules of LoraTargets.qv: q and v, or the one fused qkv projection that makes them (Qwen-1's c_attn, which
PEFT adapts whole: its target_modules default for Qwen-1 is c_attn)."""


def targeted_linears(model, moe_layer: bool, targets: LoraTargets | str) -> list[Linear]:
    """The linear layers of one block that carry adapters."""
    linears = attention_linears(model)
    if LoraTargets(targets) is LoraTargets.qv:
        return [lin for lin in linears if lin.name in QV_NAMES]
    if LoraTargets(targets) is LoraTargets.attention:
        return linears
    if not moe_layer:
        return linears + _mlp_linears(model, model.intermediate_size)
    linears += _mlp_linears(model, model.moe_intermediate_size, model.num_experts,
                            model.experts_per_token / model.num_experts, expert=True)
    if model.num_shared_experts:
        width = model.shared_expert_intermediate_size or model.moe_intermediate_size
        linears += _mlp_linears(model, width, model.num_shared_experts)
    return linears


def adapter_params(model, moe_layer: bool, rank: int, targets) -> tuple[float, float]:
    """(non-expert, routed-expert) adapter parameters of one block: r (d_in + d_out) per linear."""
    dense = expert = 0.0
    for lin in targeted_linears(model, moe_layer, targets):
        n = lin.copies * rank * (lin.d_in + lin.d_out)
        expert, dense = (expert + n, dense) if lin.expert else (expert, dense + n)
    return dense, expert


def total_adapter_params(model, rank: int, targets) -> float:
    """Trainable parameters of a LoRA run (MTP modules are not targeted)."""
    return sum(sum(adapter_params(model, is_moe_layer(model, i), rank, targets)) for i in range(model.num_layers))


def adapter_forward_flops_per_token(model, rank: int, targets) -> float:
    """Forward FLOPs per token of every adapter: 2 r (d_in + d_out) per token-row of each targeted linear."""
    total = 0.0
    for i in range(model.num_layers):
        for lin in targeted_linears(model, is_moe_layer(model, i), targets):
            total += 2.0 * rank * (lin.d_in + lin.d_out) * lin.rows * lin.copies
    return total


# --- resolve ---------------------------------------------------------------------------------------


# --- memory hooks (memory.py; the saved tensors' changes are tools/perf/finetune_tensors.py) ------------


def nf4_bytes(double_quant) -> np.ndarray:
    """Bytes per NF4 weight, with or without double quantisation (numpy-friendly over 0/1 codes)."""
    return np.where(np.asarray(double_quant) > 0, NF4_BYTES_PER_PARAM, NF4_SINGLE_QUANT_BYTES_PER_PARAM)


def frozen_weight_bytes(method_code, gemm_params, other_params, double_quant=1):
    """Bytes of a frozen base: bf16 everywhere (lora), NF4 for the blocks' linears (qlora; Layout.double_quant)."""
    gemm = np.where(method_code == METHOD_CODES[Method.qlora], nf4_bytes(double_quant), BF16_BYTES)
    return gemm * gemm_params + BF16_BYTES * other_params


def adapter_coefficients(model, moe: bool) -> dict[str, float]:
    """Adapter parameters of one block per unit of rank, by target choice and expert/non-expert
    (memory.py sums them per pipeline rank and multiplies by r)."""
    out = {}
    for target in LoraTargets:
        dense, expert = adapter_params(model, moe, 1, target)
        out[f"lora_{TARGET_CODES[target]}_ne"], out[f"lora_{TARGET_CODES[target]}_ex"] = dense, expert
    return out


def largest_linear(model, moe: bool) -> float:
    """Parameters of the block's largest linear layer (the QLoRA dequantisation buffer, one at a time)."""
    every = attention_linears(model) + (_mlp_linears(model, model.moe_intermediate_size) if moe
                                         else _mlp_linears(model, model.intermediate_size))
    return max(lin.d_in * lin.d_out for lin in every)


# --- time hooks (step.py) ----------------------------------------------------------------------------


ADAPTER_KEY = "lora"
"""OpTimes key of the adapters' GEMMs: the only weight gradients a LoRA/QLoRA step computes."""
ADAPTER_SCALE_ADD_BYTES = (4.0, 6.0)
"""PEFT's LoRA Linear forward, result = result + lora_B(lora_A(dropout(x))) * scaling (peft/tuners/lora/layer.py):
the scaling multiply reads and writes B's bf16 output (2 + 2 B per output element), the add reads both and writes the
sum (2 + 2 + 2 B); in the backward, the multiply's gradient (2 + 2 B per output element) and autograd's
accumulation of the two input gradients of x (base linear and lora_A: 2 + 2 + 2 B per input element)."""
COMPILED_SCALE_ADD_FORWARD_BYTES = 6.0
"""Under torch.compile the scaling multiply and the add fuse into one kernel: B's output and the base output read,
the sum written (2 + 2 + 2 B per output element)."""
DROPOUT_BYTES = (5.0, 5.0)
"""Bytes per element an adapter's dropout kernel drops, with lora_dropout > 0: its input's, or with
Layout.lora_dropout_position post its output's (PyTorch native_dropout and
native_dropout_backward): forward reads x (2 B) and writes the bf16 output and the bool mask (2 + 1 B); backward
reads the output's gradient and the mask (2 + 1 B) and writes x's gradient (2 B). One kernel each way per module."""
DEQUANT_KERNELS = 2
"""bitsandbytes dequantize_4bit with double quantisation (bitsandbytes/functional.py): dequantize_blockwise of the
8-bit absmax, then the NF4 kernel writing the bf16 weight; without it the NF4 kernel alone (dequant_kernels)."""


def dequant_kernels(cfg) -> int:
    """Kernels of one 4-bit linear's dequantisation (DEQUANT_KERNELS with double quantisation, else 1)."""
    return DEQUANT_KERNELS if cfg.double_quant is not False else 1


def adapt_layer_times(layer, model, cfg, gpu, moe: bool):
    """One block's OpTimes under LoRA/QLoRA: no weight gradients for the frozen base, plus the adapter GEMMs
    (x A and its result times B, forward, dX and dA/dB), PEFT's scale-and-add of each adapter's output, each
    adapter's dropout kernel with lora_dropout > 0 (DROPOUT_BYTES) and, for
    QLoRA, bitsandbytes' dequantisation of every frozen 4-bit linear in the forward and again in the backward (the
    input gradient dX = dY W^T needs W in bf16; MatMul4Bit.backward dequantises it again). Gradient checkpointing
    reruns the forward keys, so a recomputed block dequantises a third time (recompute.recomputed_forward_s)."""
    out = compute.OpTimes(dict(layer.forward_s), dict(layer.backward_input_s),
                          {key: 0.0 for key in layer.backward_weight_s})
    tokens = cfg.mbs * cfg.seq / cfg.cp
    tp, rank = cfg.tp, cfg.lora_rank
    compiled = cfg.launch is Launch.compile
    forward_bytes, backward_bytes = ADAPTER_SCALE_ADD_BYTES
    if compiled:
        forward_bytes = COMPILED_SCALE_ADD_FORWARD_BYTES
    scale_add_forward = scale_add_backward = dropout_elements = 0.0
    kernels = 0
    on_output = dropout_on_output(cfg)
    for lin in targeted_linears(model, moe, cfg.lora_targets):
        # Column-parallel: x is whole on every TP rank, B's output split; row-parallel: x split.
        d_in = lin.d_in / tp if lin.row_parallel else lin.d_in
        d_out = lin.d_out if lin.row_parallel else lin.d_out / tp
        copies = max(1, round(lin.copies / (cfg.ep if lin.expert else 1)))
        rows = tokens * lin.rows * lin.copies / copies
        compute.linear(out, ADAPTER_KEY, rows, d_in, rank, gpu, Precision.bf16, copies)
        compute.linear(out, ADAPTER_KEY, rows, rank, d_out, gpu, Precision.bf16, copies)
        scale_add_forward += forward_bytes * rows * d_out * copies
        scale_add_backward += backward_bytes * rows * d_in * copies + 4.0 * rows * d_out * copies
        dropout_elements += rows * (d_out if on_output else d_in) * copies
        kernels += copies
    if cfg.lora_dropout > 0:
        forward, backward = DROPOUT_BYTES
        out.add("lora/dropout", compute.memory_bound_time_s(forward * dropout_elements, gpu, kernels=kernels),
                compute.memory_bound_time_s(backward * dropout_elements, gpu, kernels=kernels))
    forward_kernels = (1 if compiled else 2) * kernels
    out.add("lora/scale_add", compute.memory_bound_time_s(scale_add_forward, gpu, kernels=forward_kernels),
            compute.memory_bound_time_s(scale_add_backward, gpu, kernels=2 * kernels))
    if Method(cfg.method) is Method.qlora:
        lp = layer_params(model, next(i for i in range(model.num_layers) if _is_moe(model, i) is moe))
        frozen = (lp.non_expert - lp.norms - lp.router) / tp + lp.routed_experts / (tp * cfg.ep)
        linears = len(frozen_linears(model, moe))
        streamed = float(nf4_bytes(cfg.double_quant is not False)) + BF16_BYTES   # packed weight in, bf16 weight out
        seconds = compute.memory_bound_time_s(streamed * frozen, gpu, kernels=dequant_kernels(cfg) * linears)
        out.add("qlora/dequant", seconds, seconds)
    return out


def _is_moe(model, index: int) -> bool:
    return is_moe_layer(model, index)


def frozen_linears(model, moe: bool) -> list[Linear]:
    """The nn.Linear modules of one block (HF layout: q, k, v, o and the MLP or router + shared experts; routed
    experts are grouped weights, not counted here): what bitsandbytes replaces by Linear4bit."""
    every = attention_linears(model)
    if not moe:
        return every + _mlp_linears(model, model.intermediate_size)
    shared = (_mlp_linears(model, model.shared_expert_intermediate_size or model.moe_intermediate_size)
              if model.num_shared_experts else [])
    return every + shared + [Linear("router", model.hidden_size, model.num_experts)]


def adapted_linears_per_block(model, cfg, moe: bool) -> int:
    """Targeted linear modules the host issues per block (routed experts carry their own host term, moe.py)."""
    if not is_lora(cfg.method):
        return 0
    return sum(1 for lin in targeted_linears(model, moe, cfg.lora_targets) if not lin.expert)


def adapt_stage_times(times, model, cfg, gpu, layer_ids, moe_layers):
    """OpTimes of a stage under LoRA/QLoRA after its blocks were adapted (adapt_layer_times, before the host
    floor): the embedding and LM head are frozen too, so only the adapters keep weight gradients."""
    return compute.OpTimes(dict(times.forward_s), dict(times.backward_input_s),
                           {key: (value if key == ADAPTER_KEY else 0.0) for key, value in times.backward_weight_s.items()})


def trainable_stage_params(model, cfg, stage_layers) -> list[tuple[float, float]]:
    """(dense, expert) trainable parameters per rank of each stage: the adapters, after TP and EP."""
    out = []
    for layer_ids in stage_layers:
        dense = expert = 0.0
        for i in layer_ids:
            d, e = adapter_params(model, is_moe_layer(model, i), cfg.lora_rank, cfg.lora_targets)
            dense, expert = dense + d, expert + e
        out.append((dense / cfg.tp, expert / (cfg.tp * cfg.ep)))
    return out


def paged_optimizer_s(adapter_params_per_rank: float, method, host_link_gb_s: float,
                      optimizer_8bit: bool = False) -> float:
    """QLoRA's paged AdamW: the states (32-bit, or 8-bit with optimizer_8bit: paged_adamw_8bit) page in before the
    step and out after it, over the host link (PCIe, ClusterSpec.host_link_gb_s GB/s each way)."""
    if Method(method) is not Method.qlora:
        return 0.0
    moments = state_bytes.MOMENTS_BYTES_8BIT if optimizer_8bit else ADAPTER_OPTIMIZER_BYTES
    return 2 * moments * adapter_params_per_rank / (host_link_gb_s * 1e9)


def adapter_bytes(method_code, table: dict):
    """Per-parameter bytes of the adapters for method codes (numpy-friendly)."""
    return np.where(np.asarray(method_code) == METHOD_CODES[Method.qlora], table["qlora"], table["lora"])


def frozen_bytes_per_param(method, double_quant: bool | None = None) -> float:
    """Mean bytes per frozen GEMM weight (for ZeRO-3 all-gathers of the frozen base; double_quant: Layout's, null
    true)."""
    return float(nf4_bytes(double_quant is not False)) if Method(method) is Method.qlora else BF16_BYTES


def training_flops_per_token(flops, model, cfg) -> float:
    """Model FLOPs per token of forward + backward under the method (FLOPS_CONVENTION)."""
    if not is_lora(cfg.method):
        return flops.training()
    weight_gemms = flops.forward - flops.breakdown.get("attention/scores", 0.0)
    return 3.0 * flops.forward - weight_gemms + 3.0 * adapter_forward_flops_per_token(model, cfg.lora_rank,
                                                                                        cfg.lora_targets)


# --- the report's sentence ---------------------------------------------------------------------------


TARGET_PHRASES = {LoraTargets.attention: "the attention projections",
                  LoraTargets.all_linear: "every linear layer of the blocks",
                  LoraTargets.qv: "the q and v projections"}
"""How the report names each target set."""


def _bytes(value: float) -> str:
    return f"{value:.4g}"


def model_states_sentence(config: dict) -> str:
    """How the model states of a resolved config are counted, in one sentence built from the byte
    figures of state_bytes.py: what is frozen, what trains, where its
    optimizer states live, and what ZeRO shards; and, with optimizer_8bit, that the Adam moments are 8-bit."""
    sentence = _states_sentence(config)
    if config.get("optimizer_8bit"):
        sentence += (f" Adam's m and v are 8-bit with a block-wise fp32 absmax (bitsandbytes AdamW8bit): "
                     f"{state_bytes.MOMENTS_BYTES_8BIT:.3f} B/param in place of the moments above.")
    return sentence


def _states_sentence(config: dict) -> str:
    method = Method(config.get("method") or Method.full)
    zero = config.get("zero", 0)
    offload = bool(config.get("optimizer_offload"))
    if method is Method.full:
        grads = state_bytes.GRAD_BYTES_BF16 if config.get("bf16_grads") else state_bytes.GRAD_BYTES
        states = state_bytes.OPTIMIZER_BYTES_BF16_MOMENTS if config.get("bf16_moments") else state_bytes.OPTIMIZER_BYTES
        moments = "bf16 Adam m + v" if config.get("bf16_moments") else "Adam m + v"
        where = " on the CPU (optimizer offload)" if offload else ""
        grads_text = f"{'bf16' if config.get('bf16_grads') else 'fp32'} gradients ({_bytes(grads)})"
        if config.get("pure_bf16"):
            return (f"Model states are pure bf16: bf16 parameters ({_bytes(state_bytes.WEIGHT_BYTES)} B/param), bf16 "
                    f"gradients ({_bytes(state_bytes.GRAD_BYTES_BF16)}) and bf16 Adam m + v "
                    f"({_bytes(state_bytes.OPTIMIZER_BYTES_PURE_BF16)}) with no fp32 master, sharded by ZeRO-{zero}.")
        if config.get("fp32_params"):
            bf16_copy = ("gathered a layer at a time" if zero >= 3 else
                         f"held unsharded ({_bytes(state_bytes.WEIGHT_BYTES)} B/param)")
            return (f"Model states follow PyTorch FSDP mixed precision: fp32 parameters that are the master copy "
                    f"({_bytes(state_bytes.MASTER_BYTES)} B/param{where}), bf16 copies {bf16_copy}, {grads_text}, "
                    f"{moments} ({_bytes(states - state_bytes.MASTER_BYTES)}){where}, sharded by ZeRO-{zero}.")
        return (f"Model states follow Megatron: bf16 weights ({_bytes(state_bytes.WEIGHT_BYTES)} B/param), "
                f"{grads_text}, fp32 master + {moments} ({_bytes(states)}){where}, sharded by ZeRO-{zero}.")
    targets = LoraTargets(config.get("lora_targets") or LoraTargets.all_linear)
    where = TARGET_PHRASES[targets]
    if method is Method.qlora:
        double = config.get("double_quant") is not False
        nf4 = float(nf4_bytes(double))
        base = (f"a frozen base (no gradients, no optimizer states) with the blocks' linear weights in 4-bit NF4 "
                f"{'with' if double else 'without'} double quantisation ({nf4 * 8:.3f} bits = {_bytes(nf4)} "
                f"B/param, block scales included), embedding, LM head and norms in bf16 ({_bytes(BF16_BYTES)})")
        optimizer = (f"paged 32-bit AdamW m + v ({_bytes(ADAPTER_OPTIMIZER_BYTES)}) in CPU memory, not counted on "
                     "the GPU")
        dtype = "bf16"
    else:
        base = (f"a frozen bf16 base ({_bytes(BF16_BYTES)} B/param, no gradients, no optimizer states)")
        optimizer = (f"fp32 Adam m + v ({_bytes(ADAPTER_OPTIMIZER_BYTES)})"
                     + (" on the CPU (optimizer offload)" if offload else ""))
        dtype = "fp32"
    return (f"Model states follow {'QLoRA' if method is Method.qlora else 'LoRA'}: {base}; "
            f"rank-{config.get('lora_rank') or DEFAULT_LORA_RANK} adapters on {where} with {dtype} weights "
            f"({_bytes(ADAPTER_WEIGHT_BYTES[method.value])} B/param), {dtype} gradients "
            f"({_bytes(ADAPTER_GRAD_BYTES[method.value])}) and {optimizer}; sharded by ZeRO-{zero}.")
