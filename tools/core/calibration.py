"""The calibration table: every fitted constant of the performance model, what it was fitted on, and
what was held out. Nothing fitted lives anywhere else: compute.py and the GPU catalog read their
efficiencies from here, and `trainplan eval` marks the cases named in `fitted_on` as calibration
(excluded from the held-out errors), so a case is calibration exactly when this table says so.

Case ids are those of evals/runs/*.yaml (each figure there carries its published source). A constant
with an empty `fitted_on` was set, not fitted to any eval case; its method says from what (a published
measurement, or another family's fit where no run can separate it). A GPU family with no fitted row
(Blackwell Ultra, Ada, CDNA, ...) takes the ASSUMED_FAMILY's efficiencies and is marked
`efficiency_basis: assumed`; estimates on it say so.

Each method names the physical range its mechanism allows, so a refit cannot drift outside it.
benchmarks/fit_calibration.py reproduces every fitted value from its `fitted_on` cases (a grid
search on the eval's absolute log error) and prints the held-out errors.

The hand-set constants that no eval case fitted (kernel launch cost, NCCL buffers, planner margins, ...) are
Assumed records in tools/core/assumptions.py, each with its source; tests/test_constants_registered.py keeps
every other number of the model in one of the two tables.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fitted:
    """One calibrated constant."""

    value: float
    meaning: str
    fitted_on: tuple[str, ...]
    """eval case ids it was fitted on (empty: set, not fitted; the method says from what)"""
    held_out: tuple[str, ...]
    """eval case ids that test it and were not used to set it"""
    method: str
    """how it was set, and the range its mechanism allows (with sources)"""


_SC21_FIT = ("megatron-sc21-1.7b", "megatron-sc21-7.5b", "megatron-sc21-39.1b", "megatron-sc21-145.6b",
             "megatron-sc21-529.6b")
_SC21_HELD = ("megatron-sc21-3.6b", "megatron-sc21-18.4b", "megatron-sc21-76.1b", "megatron-sc21-310.1b",
              "megatron-sc21-1008b", "megatron-gpt3-175b")
_AMPERE_FLASH_HELD = tuple(
    f"mpt-{size}-{gpu}-s{seq}" for size, gpu, seq in (
        ("350m", "a10080", 8192), ("350m", "a10080", 2048), ("350m", "a10080", 512), ("760m", "a10080", 8192),
        ("760m", "a10080", 2048), ("1b", "a10080", 8192), ("1b", "a10080", 2048), ("1b", "a10080", 512),
        ("3b", "a10080", 32768), ("3b", "a10080", 8192), ("3b", "a10080", 2048), ("125m", "a10080", 2048),
        ("350m", "a10040", 2048), ("760m", "a10040", 2048), ("1b", "a10040", 2048), ("1b", "a10040", 32768),
        ("3b", "a10040", 8192), ("3b", "a10040", 2048))
) + tuple(f"flashattn-readme-gpt3-{size}" for size in ("125m", "355m", "760m", "1.3b", "2.7b")) + tuple(
    f"fa2-table1-gpt3-1.3b-{k}-{kernel}" for k in ("2k", "8k") for kernel in ("flash1", "flash")
) + ("ibm-fsdp-llama2-7b-a100", "ibm-fsdp-llama2-34b-a100", "ibm-fsdp-llama2-70b-a100")
_HOPPER_HELD = ("llama3-405b-8k-16384gpu", "llama3-405b-gpu-hours", "llama31-70b-gpu-hours", "deepseek-v3-pretrain",
                "mbridge-h100-llama3-8b-fp8", "mbridge-h100-llama3-70b-fp8", "mbridge-h100-llama31-405b-fp8")

MEMORY_BOUND_EFFICIENCY = Fitted(
    value=0.8,
    meaning="share of HBM bandwidth that streaming kernels (norms, activations, softmax, Adam) reach",
    fitted_on=_SC21_FIT,
    held_out=_SC21_HELD,
    method="grid search jointly with the Ampere GEMM efficiency (hardware TFLOP/s of SC21 Table 1, odd rows; "
           "benchmarks/fit_calibration.py), kept inside the 80-90% of HBM peak that STREAM-like kernels reach on "
           "A100/H100 (CUDA C++ Best Practices Guide, effective bandwidth); the fit sits at the low end since the "
           "eager attention's batched GEMMs share their waves (compute.gemm_time_s batch)",
)

MOE_HOST_S_PER_EXPERT_GEMM = Fitted(
    value=69e-6,
    meaning="host seconds to issue one expert GEMM (with its quantisation) when the grouped GEMM is a host-issued "
            "loop of per-expert GEMMs; a layer's expert part takes max(GPU time, host time) (moe.py)",
    fitted_on=("mbridge-b200-qwen3-30b-a3b-fp8", "mbridge-2602-b200-qwen3-30b-a3b-fp8"),
    held_out=("mbridge-h100-qwen3-30b-a3b-fp8", "mbridge-2602-h100-qwen3-30b-a3b-fp8",
              "mbridge-gb200-qwen3-30b-a3b-fp8", "mbridge-2602-gb200-qwen3-30b-a3b-fp8",
              "mbridge-b200-deepseek-v3-fp8", "mbridge-2602-b200-deepseek-v3-fp8",
              "mbridge-h100-qwen3-235b-a22b-fp8", "mbridge-2602-h100-qwen3-235b-a22b-fp8",
              "mbridge-b200-qwen3-235b-a22b-fp8", "mbridge-2602-b200-qwen3-235b-a22b-fp8"),
    method="grid search (least squares on the log errors) of the step time of the two rows where host-issued expert "
           "GEMMs set the pace: Megatron-Bridge DGX-B200 Qwen3-30B-A3B, 25.11 and 26.02 (the same layout: EP8, 16 "
           "local experts, MBS 1, forced-balanced dropless routing; benchmarks/fit_calibration.py --family "
           "moe-host). On the other MoE rows the host term is partly or wholly hidden behind GPU time, so they "
           "cannot pin it and are held out; the DGX-GB200 rows (the same layout at MBS 4) test how it amortises with "
           "micro-batch size. Mechanism: dropless dispatch syncs tokens-per-expert to the host each MoE layer, after "
           "which Transformer Engine's GroupedLinear issues one quantise + GEMM per local expert and the GPU waits "
           "on the host (Megatron-Core moe/README on --moe-grouped-gemm and on CUDA graphs: dynamic shapes make "
           "dropless MoE layers uncapturable; Megatron-Core MoE report arXiv:2603.07685, the host-overhead wall). "
           "Range: tens of microseconds per call. Refit 71 -> 69 us when the Blackwell GEMM efficiency was fitted "
           "(0.56, Hopper's, assumed -> 0.51)",
)

# vTrain's measured A100 iteration times (evals/data/vtrain/, evals/vtrain.py), named by row group: the eval
# runner's cases are evals/runs/*.yaml, these are evals/vtrain.py's (evals/vtrain.py CASE_GROUPS).
VTRAIN_FIT = ("vtrain-single-h2048",)
VTRAIN_HELD = ("vtrain-single-h1024", "vtrain-multi")

FINE_TUNING_SPEED_HELD = tuple(
    [f"qwen-{size}-lora-a100-s{seq}" for size in ("1.8b", "7b", "14b") for seq in (256, 512, 1024, 2048, 4096, 8192)]
    + ["torchtune-llama31-8b-lora-4090", "torchtune-llama31-8b-qlora-4090", "torchtune-llama31-70b-lora-8xa100",
       "torchtune-llama31-405b-qlora-8xa100"])
"""Fine-tuning speed rows (evals/runs/qwen-finetune-speed.yaml, torchtune-finetune-speed.yaml): held out for the host
floor and the Ampere and Ada GEMM efficiencies; no constant is fitted on them."""

HOST_S_PER_OP = Fitted(
    value=17e-6,
    meaning="host seconds to issue one op of a layer in PyTorch eager (Python, autograd, dispatcher, launch); a "
            "layer's pass takes max(device time, ops x this) (host.py)",
    fitted_on=VTRAIN_FIT,
    held_out=VTRAIN_HELD + FINE_TUNING_SPEED_HELD,
    method="grid search, 8-32 us in 1 us steps, on the mean absolute log error of step time of vTrain's 720 "
           "single-node A100 rows with hidden 2048 (Megatron-DeepSpeed, eager attention, full recompute; "
           "benchmarks/fit_calibration.py --family host; evals/vtrain.py maps the rows); the 720 rows with hidden "
           "1024 (the smaller kernels, where the floor sets the time) and the 109 multi-node rows are held out. "
           "Range: the 5-25 us of CPU work per op of eager PyTorch's dispatch chain (Python binding, autograd, "
           "dispatcher, backend, cudaLaunchKernel); the op counts per layer are host.py's, counted from "
           "Megatron's ParallelTransformerLayer. Fitted with the NCCL base latency of collectives.py in place",
)

# GPU family (GPUSpec.architecture) -> {"gemm_efficiency": ..., "attention_efficiency": ...}
FAMILY_EFFICIENCY: dict[str, dict[str, Fitted]] = {
    "ampere": {
        "gemm_efficiency": Fitted(
            value=0.70,
            meaning="share of the dense peak that large GEMMs sustain in training (before wave quantization)",
            fitted_on=_SC21_FIT,
            held_out=_SC21_HELD,
            method="grid search jointly with MEMORY_BOUND_EFFICIENCY on SC21 Table 1 odd rows (full recompute, mbs 1, "
                   "1F1B, ZeRO-0, eager attention, no sequence parallelism, as in 2021); below the 85.9% that the "
                   "best-shaped bf16 matmul reaches on A100 SXM (ml-engineering MAMF table, 267.9 of 312 TFLOP/s). "
                   "benchmarks/bench_ampere_ceiling.py prints the value each A100 eval case implies: each family's "
                   "median is near this fit; a few held-out MPT rows with activation checkpointing imply more, "
                   "unexplained (README, known gaps)",
        ),
        "attention_efficiency": Fitted(
            value=0.6,
            meaning="share of the dense BF16 peak that flash attention sustains",
            fitted_on=(),
            held_out=_AMPERE_FLASH_HELD,
            method="set, not fitted: FlashAttention-2 reaches 50-73% of A100 peak forward and ~63% backward "
                   "(Dao 2023, Fig. 4-6); the A100 rows with flash or flash1 attention (MPT, flash-attention, IBM "
                   "FSDP) test it held out, flash1 through compute.attention_efficiencies",
        ),
    },
    "hopper": {
        "gemm_efficiency": Fitted(
            value=0.56,
            meaning="share of the dense peak that large GEMMs sustain in training (before wave quantization)",
            fitted_on=("llama3-405b-8k-8192gpu",),
            held_out=_HOPPER_HELD,
            method="fitted jointly with the Hopper attention efficiency on Llama 3 405B Table 4, 8,192-GPU 8K row "
                   "(causal attention FLOPs, V=8 interleaving assumed); below the 80.1% that the best-shaped bf16 matmul reaches on H100 SXM "
                   "(ml-engineering MAMF table, 792.1 of 989 TFLOP/s). One row: refit when more Hopper runs "
                   "with published layouts are added (last refit, 0.58 -> 0.56: the step model now hides the "
                   "column-parallel collectives of Megatron's sequence-parallel backward, step.tp_comm_s)",
        ),
        "attention_efficiency": Fitted(
            value=0.46,
            meaning="share of the dense BF16 peak that flash attention sustains",
            fitted_on=("llama3-405b-128k-cp16",),
            held_out=_HOPPER_HELD,
            method="fitted jointly with the Hopper GEMM efficiency on Llama 3 405B Table 4, 131K CP16 row (attention "
                   "~40% of its FLOPs), same assumptions; "
                   "inside the 35-75% of H100 peak FlashAttention-2/3 reach (Dao 2023; Shah et al. 2024)",
        ),
    },
}

_BLACKWELL_FIT = ("mbridge-b200-llama3-8b-fp8", "mbridge-b200-llama31-405b-fp8")
_BLACKWELL_HELD = ("mbridge-b200-deepseek-v3-fp8", "mbridge-2602-b200-deepseek-v3-fp8",
                   "mbridge-b200-qwen3-235b-a22b-fp8", "mbridge-2602-b200-qwen3-235b-a22b-fp8",
                   "mbridge-gb200-qwen3-30b-a3b-fp8", "mbridge-2602-gb200-qwen3-30b-a3b-fp8")
FAMILY_EFFICIENCY["blackwell"] = {
    "gemm_efficiency": Fitted(
        value=0.51,
        meaning="share of the dense peak that large GEMMs sustain in training (before wave quantization)",
        fitted_on=_BLACKWELL_FIT,
        held_out=_BLACKWELL_HELD,
        method="grid search, least squares on the log errors (the two rows pull it apart), on the two dense "
               "Blackwell runs with published layouts, Megatron-Bridge 25.11 DGX-B200 Llama 3 8B and Llama 3.1 405B "
               "FP8 (causal model TFLOP/s; benchmarks/fit_calibration.py --family blackwell), the attention efficiency held at the Hopper fit; the MoE rows on B200 and GB200 are held "
               "out. Below the 76.3% (FP8) and 77.6% (BF16) of the dense peak that the best-shaped matmul reaches "
               "on B200 SXM (ml-engineering MAMF table: 3432.5 of 4500 and 1745.0 of 2250 TFLOP/s), as the Hopper "
               "fit sits below H100's 70.9% / 80.3% there. The MoE host constant, fitted on B200 rows, was refit "
               "after it (--family moe-host)",
    ),
    "attention_efficiency": Fitted(
        value=FAMILY_EFFICIENCY["hopper"]["attention_efficiency"].value,
        meaning="share of the dense BF16 peak that flash attention sustains",
        fitted_on=(),
        held_out=(),
        method="set, not fitted: taken equal to the Hopper fit. Neither dense B200 row is attention-heavy enough "
               "to separate it from the GEMM efficiency (attention is under a fifth of the 8B row's FLOPs at 8K and "
               "a twentieth of the 405B row's), and no Blackwell long-context run with a published layout is in "
               "the evals",
    ),
}

ASSUMED_FAMILY = "hopper"
"""The family whose efficiencies a GPU without a fitted family takes (marked efficiency_basis: assumed)."""


def family_efficiency(architecture: str) -> tuple[dict[str, float], str, dict[str, str]]:
    """(efficiencies, basis, sources) for a GPU family: its fitted row, or the assumed family's."""
    fitted = architecture in FAMILY_EFFICIENCY
    row = FAMILY_EFFICIENCY[architecture if fitted else ASSUMED_FAMILY]
    values = {name: fit.value for name, fit in row.items()}
    if fitted:
        sources = {name: f"tools/core/calibration.py FAMILY_EFFICIENCY[{architecture!r}]: {fit.method}"
                   for name, fit in row.items()}
    else:
        sources = {name: f"ASSUMED, not fitted: no public {architecture or 'unknown-family'} training run to fit on; "
                         f"taken equal to the {ASSUMED_FAMILY} fit ({fit.value:g}) in tools/core/calibration.py"
                   for name, fit in row.items()}
    return values, "fitted" if fitted else "assumed", sources


def constants() -> dict[str, Fitted]:
    """Every calibrated constant by a dotted name (the table the README and `trainplan eval` print)."""
    out = {"MEMORY_BOUND_EFFICIENCY": MEMORY_BOUND_EFFICIENCY, "MOE_HOST_S_PER_EXPERT_GEMM": MOE_HOST_S_PER_EXPERT_GEMM,
           "HOST_S_PER_OP": HOST_S_PER_OP}
    for family, row in FAMILY_EFFICIENCY.items():
        for name, fit in row.items():
            out[f"{family}.{name}"] = fit
    return out


def fitted_case_ids() -> set[str]:
    """Eval cases some constant was fitted on: excluded from held-out errors."""
    return {case for fit in constants().values() for case in fit.fitted_on}


def named_case_ids() -> set[str]:
    """Every eval case the table names, fitted on or held out."""
    return fitted_case_ids() | {case for fit in constants().values() for case in fit.held_out}
