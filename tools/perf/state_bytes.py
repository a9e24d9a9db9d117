"""Bytes per parameter of the model states, defined once: memory.py counts them, step.py streams them
through the optimizer step, finetune.py counts the frozen base and the adapters, and the search's
lower bound on GPUs (tools/search/space.py) sums them.

These are the sizes of number formats (bf16 2 B, fp32 4 B, NF4 with double quantisation) and of the
mixed-precision layouts the engines store, each with its source: conventions, not fitted or assumed
figures (those live in tools/core/calibration.py).
"""

from __future__ import annotations

BF16_BYTES = 2.0
"""one bf16 element, B"""
FP32_BYTES = 4.0
"""one fp32 element, B"""
BOOL_BYTES = 1.0
"""one bool element (a dropout mask: PyTorch native_dropout returns a bool mask), B"""

WEIGHT_BYTES = BF16_BYTES
"""bf16 weights, B/param"""
GRAD_BYTES = FP32_BYTES
"""fp32 gradient buffer (Megatron main_grad), B/param"""
GRAD_BYTES_BF16 = BF16_BYTES
"""bf16 gradients (bf16_grads option), B/param"""
OPTIMIZER_BYTES = 3 * FP32_BYTES
"""fp32 master copy 4 + Adam m 4 + Adam v 4, B/param"""
OPTIMIZER_BYTES_BF16_MOMENTS = FP32_BYTES + 2 * BF16_BYTES
"""fp32 master copy 4 + bf16 Adam m 2 + v 2, B/param (bf16_moments: DeepSeek-V3 §3.3.3)"""
OPTIMIZER_BYTES_PURE_BF16 = 2 * BF16_BYTES
"""bf16 Adam m 2 + v 2 and no master copy, B/param (pure_bf16: torch.optim.Adam/AdamW create their moments with
torch.zeros_like(param), in the parameters' bf16)"""
OPTIMIZER_8BIT_BLOCK = 2048
"""values per block of an 8-bit optimizer state, each block with its own fp32 absmax (Dettmers et al. 2022, "8-bit
Optimizers via Block-wise Quantization", §2: block-wise quantisation, blocks of 2048; bitsandbytes' optimizers)"""
MOMENTS_BYTES_8BIT = 2 * (1.0 + FP32_BYTES / OPTIMIZER_8BIT_BLOCK)
"""Adam m and v in 8 bits with a block-wise fp32 absmax (optimizer_8bit: bitsandbytes AdamW8bit, PagedAdamW8bit),
1 + 4/2048 B each: 2.004 B/param"""
MASTER_BYTES = FP32_BYTES
"""fp32 master copy of the parameters, B/param: part of OPTIMIZER_BYTES and OPTIMIZER_BYTES_BF16_MOMENTS,
or the parameters themselves with fp32_params (memory.py's module doc)"""
FP8_WEIGHT_CACHE_BYTES = 2.0
"""Transformer Engine fp8 weight (1 B) + fp8 transpose (1 B) kept for every GEMM weight with precision=fp8, B/param"""

MODEL_STATE_BYTES_PER_PARAM = WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES
"""Megatron's mixed-precision model states of full training, 2 + 4 + 12 = 18 B/param (Megatron-LM README,
Distributed Optimizer: "bf16 param, fp32 grads: 18")"""

ADAM_BYTES_PER_PARAM = GRAD_BYTES + 2 * OPTIMIZER_BYTES + WEIGHT_BYTES
"""Bytes per parameter of an Adam step on the GPU: read the fp32 grad (4), read master + m + v (12), write
master + m + v (12) and the bf16 weight (2) = 30. Megatron's fused Adam streams exactly these."""
ADAM_BYTES_PER_PARAM_PURE_BF16 = GRAD_BYTES_BF16 + 2 * (WEIGHT_BYTES + OPTIMIZER_BYTES_PURE_BF16)
"""The same step on pure bf16 states: read the bf16 grad (2), read and write the bf16 parameter and m and v
(2 x 6) = 14."""


def adam_step_bytes(pure_bf16: bool, optimizer_8bit: bool) -> float:
    """Bytes per parameter an Adam step streams on the GPU: ADAM_BYTES_PER_PARAM (30) or, on pure bf16 states,
    ADAM_BYTES_PER_PARAM_PURE_BF16 (14); with 8-bit moments m and v are each read and written at 1 B and their absmax
    (2 x MOMENTS_BYTES_8BIT) in place of 4 B (fp32: 16) or 2 B (pure bf16: 8): 18.0 and 10.0."""
    base = ADAM_BYTES_PER_PARAM_PURE_BF16 if pure_bf16 else ADAM_BYTES_PER_PARAM
    if not optimizer_8bit:
        return base
    moments = 2 * (OPTIMIZER_BYTES_PURE_BF16 if pure_bf16 else OPTIMIZER_BYTES - MASTER_BYTES)
    return base - moments + 2 * MOMENTS_BYTES_8BIT


OFFLOAD_BYTES_PER_PARAM = GRAD_BYTES + WEIGHT_BYTES
"""ZeRO-Offload (Ren et al. 2021, §4): fp32 gradients down (4) and bf16 weights up (2) over the host link, B/param"""

NF4_BYTES_PER_PARAM = (4 + 8 / 64 + 32 / (64 * 256)) / 8
"""4-bit NF4 with double quantisation: 4 bits + an 8-bit absmax per 64-weight block + an fp32 constant per 256
absmax = 4.127 bits per weight (Dettmers et al. 2023 §3)."""
NF4_SINGLE_QUANT_BYTES_PER_PARAM = (4 + 32 / 64) / 8
"""4-bit NF4 without double quantisation: 4 bits + an fp32 absmax per 64-weight block = 4.5 bits per weight
(Dettmers et al. 2023 §3: double quantisation "reduces the memory footprint from 32/64 = 0.5 bits, to
8/64 + 32/(64 * 256) = 0.127 bits per parameter"); transformers' BitsAndBytesConfig default
(bnb_4bit_use_double_quant=False)."""
ADAPTER_WEIGHT_BYTES = {"lora": FP32_BYTES, "qlora": BF16_BYTES}
"""adapter weights: fp32 (PEFT autocast_adapter_dtype) for lora, bf16 (qlora.py casts LoraLayer to bf16) for qlora"""
ADAPTER_GRAD_BYTES = {"lora": FP32_BYTES, "qlora": BF16_BYTES}
"""adapter gradients, in the adapter weights' dtype"""
ADAPTER_OPTIMIZER_BYTES = 2 * FP32_BYTES
"""fp32 Adam m and v of each adapter parameter (lora: on the GPU; qlora: paged to CPU RAM)"""
