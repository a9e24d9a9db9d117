"""Time of the work one GPU does for one layer and one micro-batch: GEMMs, attention, memory-bound ops.

Everything is a roofline, time = max(FLOPs / (peak * efficiency), bytes / (HBM bandwidth * efficiency)),
plus a launch cost per kernel, with the efficiencies named below. GEMM efficiency depends on the
shape (gemm_time_s, gemm_efficiency): a GEMM of M x N output is cut into tiles; the SMs run them in
waves, and the last, partly filled wave costs as much as a full one (NVIDIA, "Matrix Multiplication
Background User's Guide", section "Wave Quantization"); small inner dimensions fall to the memory
roofline, and kernels of a few microseconds to the launch floor, by themselves.
benchmarks/bench_gemm.py prints the resulting efficiency over shapes.

Conventions: FLOPs are 2 per multiply-add. Forward GEMMs cost F; backward costs 2F (input
gradient B = F, weight gradient W = F). The layout's `attention` knob picks the kernel, never the
config's dropout. Flash attention (Dao 2023) stores only the output and log-sum-exp, its backward
recomputes the scores and costs 2.5x the forward FLOPs (five matmuls against two), and causal
masking halves the work; the first-generation kernels (flash1: FlashAttention 1 and its Triton port) do
the same work more slowly, and FlashAttention-2 (flash2, PyTorch SDPA's kernel) runs Ampere's instructions on
newer GPUs (attention_efficiencies). Eager attention (Megatron 2021-22, HF "eager") runs full s x s GEMMs plus
the memory-bound softmax (and dropout when the recipe has it): eager_attention_time_s. The FLOPs
that step.py counts as hardware FLOPs are the FLOPs timed here (causal for flash, full for eager).

The fitted constants (each GPU family's gemm_efficiency and attention_efficiency, and
MEMORY_BOUND_EFFICIENCY) live in the calibration table, tools/core/calibration.py, with what each was
fitted on and what was held out. Everything else here is a physical count with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainplan.tools.core import assumptions
from trainplan.tools.core import calibration
from trainplan.tools.hardware.catalog import load_gpu
from trainplan.tools.hardware.specs import GPUSpec
from trainplan.tools.core.enums import Attention, Precision
from trainplan.tools.perf.state_bytes import FP32_BYTES

# Output tile of one thread block of the GEMM kernels, rows x columns. NVIDIA's "Matrix Multiplication
# Background User's Guide" (DU-09799-001, §2.3 "Typical Tile Dimensions in cuBLAS and Performance")
# lists the tiles cuBLAS chooses from, 256x128 down to 64x64, larger tiles reusing more data; 128x128
# is the middle of that list, the one class every family (Ampere, Hopper, Blackwell) has. A single
# tile for every family: 256x128 (Ampere, Blackwell) and 128x256 (Hopper) tiles were tried and made
# held-out errors worse (dense step-time MAPE 5.8% -> 6.0%, the IBM FSDP 7B H100 row +16.7% -> +20.3%
# after refitting eta_max), and so did counting the padding of partial tiles (5.8% -> 5.8%, no gain).
GEMM_TILE_M = assumptions.GEMM_TILE_M.value
GEMM_TILE_N = assumptions.GEMM_TILE_N.value
# Fraction of HBM bandwidth that streaming kernels (norms, activations, softmax, Adam) reach.
MEMORY_BOUND_EFFICIENCY = calibration.MEMORY_BOUND_EFFICIENCY.value
# Fixed cost of one kernel launch, seconds, counted once per kernel launched (every GEMM, attention
# kernel and memory-bound kernel of every layer): the host's launch call and the gap between
# back-to-back kernels on a stream. NVIDIA's "Getting Started with CUDA Graphs" (Technical Blog,
# A. Gray 2019) measures a 2.9 us kernel at 3.8 us per launch when kernels are issued back to back
# (9.6 us with a synchronisation after each); the CUDA Programming Guide §4.2 (CUDA Graphs) names
# this per-kernel launch overhead. It is what sets the time of tiny kernels (bench_gemm.py).
KERNEL_LAUNCH_S = assumptions.KERNEL_LAUNCH_S.value
# Split-K (split_k_slices): the shortest K slice one thread block reduces.
SPLIT_K_MIN_DEPTH = assumptions.SPLIT_K_MIN_DEPTH.value


@dataclass
class OpTimes:
    """Forward and backward seconds of one piece of work, split by kind."""

    forward_s: dict[str, float] = field(default_factory=dict)
    backward_input_s: dict[str, float] = field(default_factory=dict)   # B: gradients w.r.t. inputs
    backward_weight_s: dict[str, float] = field(default_factory=dict)  # W: gradients w.r.t. weights

    def add(self, key: str, forward: float, backward_input: float, backward_weight: float = 0.0) -> None:
        self.forward_s[key] = self.forward_s.get(key, 0.0) + forward
        self.backward_input_s[key] = self.backward_input_s.get(key, 0.0) + backward_input
        self.backward_weight_s[key] = self.backward_weight_s.get(key, 0.0) + backward_weight

    def merged(self, other: OpTimes) -> OpTimes:
        out = OpTimes(dict(self.forward_s), dict(self.backward_input_s), dict(self.backward_weight_s))
        for key in other.forward_s:
            out.add(key, other.forward_s[key], other.backward_input_s[key], other.backward_weight_s[key])
        return out

    @property
    def forward(self) -> float:
        return sum(self.forward_s.values())

    @property
    def backward_input(self) -> float:
        return sum(self.backward_input_s.values())

    @property
    def backward_weight(self) -> float:
        return sum(self.backward_weight_s.values())


def efficiency_ceiling(gpu: GPUSpec) -> float:
    """The largest share of the dense peak any kernel on this GPU runs at: no operation is timed faster,
    so hardware FLOPs / (step time x peak) can never exceed it."""
    return max(gpu.gemm_efficiency, gpu.attention_efficiency)


def split_k_slices(m: float, n: float, k: float, gpu: GPUSpec, batch: int = 1) -> int:
    """Slices of the inner dimension K that one GEMM kernel reduces in parallel (split-K).

    A GEMM whose ceil(m/128) x ceil(n/128) output tiles fill less than one wave of the SMs leaves most of them idle;
    the GEMM libraries then partition K so that each slice runs on its own thread block and the fp32 partial sums are
    added afterwards (CUTLASS efficient_gemm.md, "Parallelized Reductions": Split K; cuBLAS picks such kernels for
    small-M-N, large-K shapes): S = min(floor(sm_count / tiles), floor(k / SPLIT_K_MIN_DEPTH)), at least 1. This is
    the x A product of a LoRA adapter (m tokens, n the rank, k the model width) and a short sequence's skinny GEMMs.
    """
    tiles = batch * math.ceil(m / GEMM_TILE_M) * math.ceil(n / GEMM_TILE_N)
    if tiles >= gpu.sm_count:
        return 1
    return max(1, min(gpu.sm_count // tiles, int(k // SPLIT_K_MIN_DEPTH)))


def split_k_partial_bytes(m: float, n: float, slices: int) -> float:
    """HBM bytes of a split-K GEMM's fp32 partial outputs: each of the `slices` writes its m x n sums and the
    reduction reads them back."""
    return 2 * FP32_BYTES * slices * m * n


def wave_efficiency(m: float, n: float, gpu: GPUSpec, batch: int = 1, slices: int = 1) -> float:
    """Useful share of the SMs' waves for `batch` GEMMs of an m x n output, run as one kernel.

    The output is cut into ceil(m/128) x ceil(n/128) tiles per GEMM, each K-split into `slices` thread blocks
    (split_k_slices); the SMs run them in waves of sm_count blocks, and the last, partly filled wave costs as much
    as a full one (NVIDIA, "Matrix Multiplication Background User's Guide", §3.2 "Wave Quantization"):
    blocks / (waves x SMs).
    """
    blocks = batch * math.ceil(m / GEMM_TILE_M) * math.ceil(n / GEMM_TILE_N) * slices
    waves = math.ceil(blocks / gpu.sm_count)
    return blocks / (waves * gpu.sm_count)


def gemm_time_s(m: float, n: float, k: float, gpu: GPUSpec, precision: Precision, count: int = 1,
                batch: int = 1) -> float:
    """Seconds for `count` kernels, each running `batch` GEMMs of (m x k) @ (k x n), on one GPU.

    t = max(F / (peak x eta_max x wave_efficiency), bytes / (HBM bandwidth x MEMORY_BOUND_EFFICIENCY))
        + KERNEL_LAUNCH_S
    with F = 2 m n k x batch, eta_max the family's gemm_efficiency (calibration table) and bytes the
    operands read and the bf16 output written once; a split-K GEMM (split_k_slices S > 1) fills the wave with S
    slices per tile and also writes and reads back its S fp32 partial outputs (8 S m n bytes). The `count`
    kernels are launched one after another (per-expert GEMMs issued by the host); the tiles of the `batch` GEMMs of one kernel (a
    strided-batched or grouped GEMM: torch.bmm / baddbmm, which Megatron's and Hugging Face's unfused
    attention call once for all sequences and heads) share the SMs' waves and pay one launch.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    bytes_per_element = 1 if precision is Precision.fp8 else 2
    slices = split_k_slices(m, n, k, gpu, batch)
    bytes_moved = batch * (bytes_per_element * (m * k + k * n) + 2 * m * n
                           + (split_k_partial_bytes(m, n, slices) if slices > 1 else 0.0))
    peak = gpu.peak_tflops(precision) * 1e12 * gpu.gemm_efficiency * wave_efficiency(m, n, gpu, batch, slices)
    compute_s = flops / peak
    memory_s = bytes_moved / (gpu.hbm_bandwidth_gb_s * 1e9 * MEMORY_BOUND_EFFICIENCY)
    return count * (max(compute_s, memory_s) + KERNEL_LAUNCH_S)


def gemm_efficiency(m: float, n: float, k: float, gpu: GPUSpec, precision: Precision, batch: int = 1) -> float:
    """Share of the dense peak one GEMM kernel reaches, from gemm_time_s: 2 m n k batch / (t x peak).
    At most the family's gemm_efficiency (eta_max); lower for partial waves, memory-bound shapes and
    kernels short enough for the launch to count."""
    return 2.0 * m * n * k * batch / (gemm_time_s(m, n, k, gpu, precision, batch=batch)
                                      * gpu.peak_tflops(precision) * 1e12)


def memory_bound_time_s(bytes_moved: float, gpu: GPUSpec, kernels: int = 1) -> float:
    """Seconds for streaming kernels that move `bytes_moved` bytes through HBM."""
    return bytes_moved / (gpu.hbm_bandwidth_gb_s * 1e9 * MEMORY_BOUND_EFFICIENCY) + kernels * KERNEL_LAUNCH_S


# Kernels of one flash-attention backward: FlashAttention-2's run_flash_bwd_seqk_parallel launches
# flash_bwd_dot_do_o_kernel (rowsum(dO * O)), flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel and
# flash_bwd_convert_dq_kernel (fp32 dQ accumulator to bf16); csrc/flash_attn/src/flash_bwd_launch_template.h.
FLASH_BACKWARD_KERNELS = 3


# First-generation fused attention (Attention.flash1) against FlashAttention-2 on A100 (Dao 2023, "FlashAttention-2",
# §4.1): "FlashAttention-2 is around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x
# faster in the backward pass" (and 1.7-3.0x faster than FlashAttention 1 overall, §4). The forward takes the middle of
# the range; these are the Triton port's figures, the lower end of FlashAttention 1's.
FLASH1_FORWARD_SLOWDOWN = assumptions.FLASH1_FORWARD_SLOWDOWN.value
FLASH1_BACKWARD_SLOWDOWN = assumptions.FLASH1_BACKWARD_SLOWDOWN.value
# Kernels written for Ampere's instructions (mma.sync; no TMA, no wgmma) on a newer family, as a share of the dense
# peak relative to the share they reach on Ampere. FlashAttention-2 peaks at 230 TFLOP/s of A100's 312 and, "just
# running the same implementation on H100 GPUs (using no special instructions to make use of new features such as
# TMA and 4th-gen Tensor Cores)", at 335 of H100's 989 (Dao 2023 §4.1): (335/989) / (230/312), the peaks read from
# the GPU catalog (tools/hardware/catalog/gpus/h100-sxm-80gb.json, a100-sxm-80gb.json). A family without a
# measurement keeps its own efficiency.
AMPERE_KERNEL_SHARE_RATIO = {"hopper": (assumptions.FLASH2_SHARE_ON_HOPPER_TFLOPS.value / load_gpu("h100-sxm-80gb").bf16_tflops)
                                       / (assumptions.FLASH2_SHARE_ON_AMPERE_TFLOPS.value / load_gpu("a100-sxm-80gb").bf16_tflops)}


def attention_efficiencies(gpu: GPUSpec, kernel: Attention = Attention.flash) -> tuple[float, float]:
    """(forward, backward) share of the dense BF16 peak that a fused attention kernel sustains on this GPU.

    flash: the family's attention_efficiency (calibration table) both ways. flash2: the FlashAttention-2 level of
    the family both ways. That level is the family's own efficiency on Ampere (set from FlashAttention-2), and on a
    family in AMPERE_KERNEL_SHARE_RATIO the Ampere level scaled by the ratio (FlashAttention-2 uses Ampere's
    instructions), never above the family's own. flash1: the FlashAttention-2 level divided by
    FLASH1_FORWARD_SLOWDOWN and FLASH1_BACKWARD_SLOWDOWN.
    """
    if kernel not in (Attention.flash1, Attention.flash2):
        return gpu.attention_efficiency, gpu.attention_efficiency
    level = gpu.attention_efficiency
    if gpu.architecture in AMPERE_KERNEL_SHARE_RATIO:
        ampere = calibration.FAMILY_EFFICIENCY["ampere"]["attention_efficiency"].value
        level = min(level, ampere * AMPERE_KERNEL_SHARE_RATIO[gpu.architecture])
    if kernel is Attention.flash2:
        return level, level
    return level / FLASH1_FORWARD_SLOWDOWN, level / FLASH1_BACKWARD_SLOWDOWN


def attention_time_s(tokens_q: float, tokens_kv: float, heads: float, qk_dim: int, v_dim: int,
                     gpu: GPUSpec, causal: bool = True, kernel: Attention = Attention.flash) -> tuple[float, float]:
    """Forward and backward seconds of fused (flash) attention for one GPU's heads.

    Forward FLOPs = 2 * Tq * Tkv * heads * (qk_dim + v_dim), halved when causal; backward is 2.5x, each at
    attention_efficiencies(gpu, kernel) of the BF16 peak. One kernel forward, FLASH_BACKWARD_KERNELS backward,
    each paying KERNEL_LAUNCH_S. Attention runs in bf16 even under FP8 recipes (DeepSeek-V3 report §3.3;
    Transformer Engine).
    """
    flops = 2.0 * tokens_q * tokens_kv * heads * (qk_dim + v_dim)
    if causal:
        flops /= 2
    forward_efficiency, backward_efficiency = attention_efficiencies(gpu, kernel)
    peak = gpu.bf16_tflops * 1e12
    forward = flops / (peak * forward_efficiency) + KERNEL_LAUNCH_S
    backward = 2.5 * flops / (peak * backward_efficiency) + FLASH_BACKWARD_KERNELS * KERNEL_LAUNCH_S
    return forward, backward


# Bytes per score element that eager attention streams through HBM. Fused scale-mask-softmax:
# forward read 2, write 2 = 4; backward read output 2 and gradient 2, write 2 = 6. Dropout on the
# probabilities adds forward read 2, write 2 + a 1-byte mask = 5 and backward read 2 + mask 1,
# write 2 = 5. Megatron's fused kernels (Narayanan et al. 2021 §4.2; Korthikanti et al. 2022 count
# the same 5 bytes kept per element with dropout).
EAGER_SOFTMAX_BYTES_FORWARD = 4
EAGER_SOFTMAX_BYTES_BACKWARD = 6
EAGER_DROPOUT_BYTES = 5


def eager_attention_time_s(batch: float, tokens_q: float, tokens_kv: float, heads: float, qk_dim: int,
                           v_dim: int, gpu: GPUSpec, dropout: bool = False) -> tuple[float, float]:
    """Forward and backward seconds of unfused attention: batched GEMMs plus memory-bound softmax/dropout.

    The full s x s score matrix is computed and masked (no causal saving), one GEMM per head and
    sequence: scores (Tq x d) @ (d x Tkv) and values (Tq x Tkv) @ (Tkv x dv), each a single batched
    kernel over batch x heads (Megatron CoreAttention: torch.baddbmm for the scores, torch.bmm for the
    context; Hugging Face eager_attention_forward: torch.matmul on 4-D tensors). Backward runs two
    GEMMs per forward GEMM.
    """
    count = max(1, round(batch * heads))
    scores = gemm_time_s(tokens_q, tokens_kv, qk_dim, gpu, Precision.bf16, batch=count)
    values = gemm_time_s(tokens_q, v_dim, tokens_kv, gpu, Precision.bf16, batch=count)
    elements = batch * heads * tokens_q * tokens_kv
    extra = EAGER_DROPOUT_BYTES if dropout else 0
    forward = scores + values + memory_bound_time_s((EAGER_SOFTMAX_BYTES_FORWARD + extra) * elements, gpu, kernels=2)
    backward = 2 * (scores + values) + memory_bound_time_s((EAGER_SOFTMAX_BYTES_BACKWARD + extra) * elements, gpu,
                                                           kernels=2)
    return forward, backward


# FP8 GEMMs read FP8 copies of their inputs: each activation entering a GEMM is scaled and cast
# (read 2 B, write 1 B, plus an amax pass reading 2 B), in the forward for the input and in the
# backward for the output gradient (Transformer Engine's delayed/current scaling recipes;
# DeepSeek-V3 report §3.3 quantises 1x128 activation tiles online the same way).
FP8_CAST_BYTES_PER_ELEMENT = 5


def linear(times: OpTimes, key: str, tokens: float, k_in: float, n_out: float, gpu: GPUSpec,
           precision: Precision, count: int = 1) -> None:
    """A Linear layer: forward (T x k) @ (k x n); backward input grad and weight grad of the same size.
    `count` as in gemm_time_s: separately launched copies (per-expert GEMMs)."""
    forward = gemm_time_s(tokens, n_out, k_in, gpu, precision, count)
    backward_input = gemm_time_s(tokens, k_in, n_out, gpu, precision, count)
    backward_weight = gemm_time_s(k_in, n_out, tokens, gpu, precision, count)
    if precision is Precision.fp8:
        forward += memory_bound_time_s(FP8_CAST_BYTES_PER_ELEMENT * count * tokens * k_in, gpu)
        backward_input += memory_bound_time_s(FP8_CAST_BYTES_PER_ELEMENT * count * tokens * n_out, gpu)
    times.add(key, forward, backward_input, backward_weight)


# 2-byte elements moved per element of the tensor, forward, for the elementwise work of one block.
# Fused (Megatron / Transformer Engine kernels): RMSNorm reads x and writes y (2); rotary reads and
# writes q or k (2); SwiGLU reads gate and up and writes the product (3); 8 kernels a layer.
# Unfused PyTorch eager, counted from Hugging Face's Llama code (LlamaRMSNorm.forward,
# apply_rotary_pos_emb/rotate_half, LlamaMLP): RMSNorm casts to fp32 (read 2 B, write 4), squares
# (4, 4), means (4), scales (4, 4), casts back (4, 2) and multiplies by the weight (2, 2): 36 B = 18
# elements; rotary: x*cos (2, 2), rotate_half's negate and concatenate (2, 2 each), *sin (2, 2) and
# the sum (4, 2): 22 B = 11; SwiGLU: silu(gate) (2, 2) then times up (4, 2): 10 B = 5; 26 kernels.
ELEMENTWISE_PASSES = {
    True: {"norm": 2, "rotary": 2, "gated_activation": 3, "kernels": 8},
    False: {"norm": 18, "rotary": 11, "gated_activation": 5, "kernels": 26},
}
