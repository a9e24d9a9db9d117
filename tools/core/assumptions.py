"""The assumptions table: every hand-set constant of the performance model and the planner that was chosen,
not fitted to any eval case, with the source it was taken from. The fitted constants are in
tools/core/calibration.py; the modules that use a constant read its `.value` from here under the same name
(tools/perf/memory.py CUDA_CONTEXT_GIB = assumptions.CUDA_CONTEXT_GIB.value), so each number is stated once.

What stays out: unit conversions (GIB), exact physical or code counts (BF16_BYTES = 2, the kernels a library
launches), codes and enum tables, and the bounds on inputs; tests/test_constants_registered.py lists them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Assumed:
    """One hand-set constant: chosen by the modeller from a source, not fitted to an eval case."""

    value: float
    meaning: str
    source: str
    """where the value comes from (a paper, a document or a file in the repo) and what it says"""


# --- tools/perf/compute.py -------------------------------------------------------------------------------

GEMM_TILE_M = Assumed(
    value=128,
    meaning="rows of the output tile of one GEMM thread block (wave quantization, compute.gemm_time_s)",
    source="NVIDIA \"Matrix Multiplication Background User's Guide\" (DU-09799-001, §2.3 \"Typical Tile Dimensions "
           "in cuBLAS and Performance\") lists the tiles cuBLAS chooses from, 256x128 down to 64x64; 128x128 is the "
           "middle of that list, the one class every family (Ampere, Hopper, Blackwell) has. 256x128 and 128x256 "
           "tiles were tried and made held-out errors worse (dense step-time MAPE 5.8% -> 6.0%)",
)
GEMM_TILE_N = Assumed(
    value=128,
    meaning="columns of the output tile of one GEMM thread block (wave quantization, compute.gemm_time_s)",
    source="as GEMM_TILE_M: the 128x128 tile of NVIDIA's Matrix Multiplication Background User's Guide §2.3",
)
SPLIT_K_MIN_DEPTH = Assumed(
    value=256,
    meaning="shortest slice of the inner dimension K that one thread block of a split-K GEMM reduces "
            "(compute.split_k_slices): a GEMM whose output tiles fill less than one wave of the SMs is split "
            "along K into at most K / SPLIT_K_MIN_DEPTH slices",
    source="CUTLASS media/docs/efficient_gemm.md, \"Parallelized Reductions\" (Split K: for small problems \"there "
           "are too few threadblocks to efficiently occupy the entire GPU\"; partitioning K launches a set of "
           "threadblocks per partition, reduced afterwards), as cuBLAS's heuristics do for small-M-N, large-K "
           "shapes; 256 is four 64-deep stages of the 128x128 tile's main loop (CUTLASS's default Ampere "
           "pipelines hold 3-4 stages), below which the prologue and the fp32 partial sums outweigh the gain",
)
KERNEL_LAUNCH_S = Assumed(
    value=4e-6,
    meaning="fixed seconds of one kernel launch, counted once per kernel: the host's launch call and the gap "
            "between back-to-back kernels on a stream",
    source="NVIDIA \"Getting Started with CUDA Graphs\" (Technical Blog, A. Gray 2019) measures a 2.9 us kernel at "
           "3.8 us per launch when issued back to back (9.6 us with a synchronisation after each); the CUDA "
           "Programming Guide §4.2 (CUDA Graphs) names this per-kernel launch overhead",
)
FLASH1_FORWARD_SLOWDOWN = Assumed(
    value=1.4,
    meaning="forward time of first-generation fused attention (Attention.flash1) over FlashAttention-2's",
    source="Dao 2023, \"FlashAttention-2\" §4.1: FlashAttention-2 is around 1.3-1.5x faster than FlashAttention in "
           "Triton in the forward pass; the middle of the range",
)
FLASH1_BACKWARD_SLOWDOWN = Assumed(
    value=2.0,
    meaning="backward time of first-generation fused attention (Attention.flash1) over FlashAttention-2's",
    source="Dao 2023, \"FlashAttention-2\" §4.1: around 2x faster in the backward pass than FlashAttention in Triton",
)
FLASH2_SHARE_ON_AMPERE_TFLOPS = Assumed(
    value=230,
    meaning="TFLOP/s FlashAttention-2 peaks at on A100 (of its dense BF16 peak, the catalog's a100-sxm-80gb)",
    source="Dao 2023, \"FlashAttention-2\" §4.1: up to 230 TFLOP/s on A100",
)
FLASH2_SHARE_ON_HOPPER_TFLOPS = Assumed(
    value=335,
    meaning="TFLOP/s FlashAttention-2's Ampere implementation reaches on H100 (of its dense BF16 peak, the catalog's "
            "h100-sxm-80gb)",
    source="Dao 2023, \"FlashAttention-2\" §4.1: \"just running the same implementation on H100 GPUs (using no special "
           "instructions to make use of new features such as TMA and 4th-gen Tensor Cores)\", up to 335 TFLOP/s",
)

# --- tools/perf/memory.py --------------------------------------------------------------------------------

CUDA_CONTEXT_GIB = Assumed(
    value=723 / 1024,
    meaning="GiB of the CUDA context of one process",
    source="723 MiB on the first CUDA call (discuss.pytorch.org/t/73021)",
)
NCCL_GIB_PER_GROUP = Assumed(
    value=688e6 / float(2**30),
    meaning="GiB of NCCL buffers per communicator that carries traffic (each of the tp, pp, cp, dp and ep groups "
            "with more than one rank)",
    source="544-688 MB measured per process group on A100 NVLink (NVIDIA/nccl#964), the top of the range taken; an "
           "NCCL all-to-all can take more (3.3 GB on 8xH100, NVIDIA/nccl#1685)",
)
ALLOCATOR_RESERVE_FRACTION = Assumed(
    value=0.05,
    meaning="the caching allocator's reserve (other/allocator_reserve), a share of the activations",
    source="Megatron-LM theoretical_memory_usage.py multiplies the activations by 1.05 \"for optimizer and "
           "miscellaneous temporaries\" (tools/perf/memory.py explains why it scales with the activations)",
)

# --- tools/perf/moe.py, overlap.py, host.py, finetune.py -------------------------------------------------

DROPLESS_LOAD_IMBALANCE = Assumed(
    value=1.2,
    meaning="straggler factor of learned, dropless routing: load of the busiest EP rank over the mean",
    source="between perfect balance (1.0) and the capacity factor 1.25 that Switch Transformer (Fedus et al. 2022, "
           "§2.2 and Table 1) and GShard-style recipes use so that few tokens overflow",
)
ROUTER_SCORE_BYTES = Assumed(
    value=4 * 4,
    meaning="HBM bytes per fp32 router score in the forward (and as many in the backward) of an MoE layer",
    source="the logits are written, then read and written by the score function and top-k, and the selected "
           "probabilities read back (Megatron-Core router.py with moe_router_dtype fp32): about four passes of 4 B",
)
COMMUNICATION_SMS = Assumed(
    value=20,
    meaning="SMs that communication overlapping compute holds, of the H800's (the catalog's h800-sxm-80gb "
            "sm_count); overlap.COMM_COMPUTE_CONTENTION is their share, the cost of hidden communication",
    source="DeepSeek-V3 report §3.2.2 dedicates 20 of the H800's 132 SMs to communication; NCCL's channels likewise "
           "run on SMs",
)
BACKWARD_OPS_PER_FORWARD_OP = Assumed(
    value=2,
    meaning="host ops of autograd's backward per forward op of a layer (host.py)",
    source="autograd runs one backward node per differentiable forward op, computing the gradient of each input: "
           "two GEMMs per Linear, a view per view, a kernel per elementwise kernel; two per op is that count rounded",
)
HOST_S_PER_POINTWISE_OP = Assumed(
    value=6e-6,
    meaning="host seconds of one pointwise aten call of an unfused elementwise chain (fused_kernels=false), "
            "issued from inside a module's Python without a module or autograd.Function of its own (host.py)",
    source="the dispatch chain of one op at the low end of each layer's typical cost (\"From PyTorch op to kernel "
           "launch\", its table): Python bytecode 1 us, pybind11 1, autograd node 1, ATen dispatcher 1, backend 1 "
           "(a pointwise op picks no algorithm and allocates no workspace), cudaLaunchKernel 1: 6 us, the low end "
           "of the lesson's 5-25 us per op; HOST_S_PER_OP (fitted on Megatron's op counts) sits high in that range, "
           "the module calls and Python autograd.Functions around Megatron's ops included",
)
DEFAULT_LORA_ALPHA_PER_RANK = Assumed(
    value=2,
    meaning="lora_alpha over the LoRA rank in the exports (alpha only scales the update, no cost)",
    source="lora_alpha = 2 r, a common choice (tools/perf/finetune.py)",
)

# --- tools/config/plan_defaults.py -----------------------------------------------------------------------

DEFAULT_GOODPUT = Assumed(
    value=0.9,
    meaning="share of wall-clock time that trains when a job gives none",
    source="Llama 3 reports more than 90% effective training time",
)
DEFAULT_HEADROOM = Assumed(
    value=0.10,
    meaning="share of each GPU's memory a searched or planned layout leaves free (the report flags less as a risk)",
    source="a margin for the allocator's fragmentation, NCCL's lazily grown buffers and activation spikes of real "
           "runs, which the memory model only approximates (tools/config/plan_defaults.py)",
)
SIMPLER_MARGIN = Assumed(
    value=0.03,
    meaning="how much slower on the objective a simpler layout may be and still be preferred over the fastest",
    source="within the step-time model's own uncertainty, and what a practitioner gives up for fewer moving parts "
           "(a preference; tools/config/plan_defaults.py)",
)
EVIDENCE_MARGIN = Assumed(
    value=0.05,
    meaning="how much better on the objective a layout outside the evals' evidence (tools/search/evidence.py) must "
            "be than the best inside it to be recommended",
    source="more than SIMPLER_MARGIN and about the held-out dense step-time MAPE (5.8%, README), so that a win "
           "within the model's own error does not buy an untested shape (issue 20's default); a preference",
)
COST_SLACK = Assumed(
    value=0.05,
    meaning="'cheapest' takes the fastest plan whose cost is at most this share above the lowest",
    source="issue 20: a plan that saves 0.5% by taking 16 times as long is not what the request means "
           "(agent/tradeoffs.py); a preference",
)
DEADLINE_MARGIN = Assumed(
    value=0.10,
    meaning="share early that a plan for a deadline is sized to finish (30 days: 27)",
    source="restarts, slow nodes and the model's own error eat into a plan with no margin (agent/advice.py states "
           "the band); a preference",
)
GPUS_PER_SEQUENCE = Assumed(
    value=8,
    meaning="GPUs per sequence of the default global batch's floor, so a TP8 layout gives every data-parallel rank "
            "a micro-batch",
    source="Llama 3 405B on 16K GPUs: 16M tokens per step at seq 8192 = 2048 sequences",
)
LONG_SEQ_TOKENS_PER_RANK = Assumed(
    value=8192,
    meaning="beyond this sequence length one sequence spans seq / this context-parallel ranks in the batch floor",
    source="Llama 3 405B kept 16M tokens per step at 131K on 16K GPUs with CP16, 8,192 tokens per rank (Llama 3 "
           "paper §3.3.2)",
)
FINETUNE_GBS = Assumed(
    value=16,
    meaning="global batch of a fine-tune that gives none, in sequences (per-device batch x accumulation x GPUs), at "
            "any sequence length",
    source="fine-tuning recipes set the batch in sequences whatever their length: the QLoRA paper's Guanaco runs "
           "(Dettmers et al. 2023, Appendix B; artidoro/qlora scripts/finetune_guanaco_*.sh: per-device batch 1 x 16 "
           "accumulation steps on one GPU, target_max_len 512); LLaMA-Factory examples/train_lora/"
           "llama3_lora_sft.yaml (per_device_train_batch_size 1 x gradient_accumulation_steps 8, cutoff_len 2048) and "
           "axolotl examples/llama-3/lora-8b.yml (micro_batch_size 2 x gradient_accumulation_steps 4, sequence_len "
           "4096) run 8 sequences per GPU: 16 on two GPUs",
)
FINETUNE_SEQ = Assumed(
    value=2048,
    meaning="sequence length of a fine-tune that gives none, where a layout fits on the request's GPUs (else the "
            "longest power of two down to FINETUNE_SHORTEST_SEQ at which one does)",
    source="LLaMA-Factory examples/train_lora/llama3_lora_sft.yaml cutoff_len 2048; the middle of the recipes' "
           "lengths: TRL SFTConfig max_length defaults to 1024 (trl/trainer/sft_config.py), axolotl "
           "examples/llama-3/lora-8b.yml packs to sequence_len 4096",
)
FINETUNE_SHORTEST_SEQ = Assumed(
    value=512,
    meaning="the shortest sequence a fine-tune that gives none is planned at, when no layout fits at FINETUNE_SEQ",
    source="the shortest recipe length found: the QLoRA paper's Guanaco runs (artidoro/qlora "
           "scripts/finetune_guanaco_*.sh, target_max_len 512)",
)

# --- tools/search/eval_summary.py ------------------------------------------------------------------------

GAP_ERROR = Assumed(
    value=0.15,
    meaning="a case whose headline error is larger than this is a known gap even when its own tolerance is wider",
    source="the throughput tolerance of evals/cases.py (DEFAULT_TOLERANCE step_s 0.15)",
)
SMALL_JOB_GPUS = Assumed(
    value=64,
    meaning="a job on at most this many GPUs is a small job",
    source="the small jobs of the evals: the FSDP, MPT and single-node rows (evals/runs/*.yaml)",
)


def assumed() -> dict[str, Assumed]:
    """Every hand-set constant by name (this module's Assumed records)."""
    return {name: value for name, value in globals().items() if isinstance(value, Assumed)}
