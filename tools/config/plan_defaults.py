"""Defaults the search and the planner share when a request leaves them open: the memory headroom,
the global batch, and how much speed a simpler layout may give up. Each is stated once here; the
search, the tools, the planner and the report read them from here.
"""

from __future__ import annotations

import math

import numpy as np

from trainplan.tools.core import assumptions
from trainplan.tools.core.errors import InputError

DEFAULT_GOODPUT = assumptions.DEFAULT_GOODPUT.value
"""Share of wall-clock time that trains when a job gives none (Llama 3 reports more than 90%)."""

DEFAULT_HEADROOM = assumptions.DEFAULT_HEADROOM.value
"""Share of each GPU's memory a searched or planned layout leaves free (the report flags less as a
risk): the allocator's fragmentation, NCCL's lazily grown buffers and activation spikes of real
runs, which the memory model only approximates. One value for search and plan."""

SIMPLER_MARGIN = assumptions.SIMPLER_MARGIN.value
"""A simpler layout (fewer parallel dimensions, engine defaults) is preferred over the fastest when it
is at most 3% slower on the objective: within the step-time model's own uncertainty, and what a
practitioner gives up for fewer moving parts."""

EVIDENCE_MARGIN = assumptions.EVIDENCE_MARGIN.value
"""How much better on the objective (5%) a layout outside the evals' evidence (tools/search/evidence.py, the
one definition of a departure) must be than the best layout inside it to be recommended: more than
the 3% within which layouts count as equal (SIMPLER_MARGIN) and about the held-out dense step-time
MAPE (5.8%, README), so that a win within the model's own error does not buy an untested shape (issue
20's default). A preference, not a rule of physics. SearchOptions.evidence_margin."""

COST_SLACK = assumptions.COST_SLACK.value
"""'Cheapest' takes the fastest plan whose cost is at most 5% above the lowest (agent/tradeoffs.py): a
plan that saves 0.5% by taking 16 times as long (16 GPUs for 88 days against 256 for 5.5, issue 20) is
not what the request means; the report states the trade. A preference, as SIMPLER_MARGIN."""

DEADLINE_MARGIN = assumptions.DEADLINE_MARGIN.value
"""A plan for a deadline is sized to finish this share early (30 days: 27): restarts, slow nodes and
the model's own error (agent/advice.py states the band) eat into a plan with no margin. When no count
meets the tighter date, the plan sizes to the deadline itself and says it has no margin."""

# Tokens per optimizer step that published runs used, by total parameters. log-log interpolation
# between these points, flat beyond the ends.
TOKENS_PER_STEP_POINTS = (
    (0.76e9, 0.5e6, "GPT-3 125M-760M: 0.5M tokens (Brown et al. 2020, Table 2.1)"),
    (1.3e9, 1.0e6, "GPT-3 1.3B and 2.7B: 1M tokens (Brown et al. 2020, Table 2.1)"),
    (7e9, 4.0e6, "Llama 2 7B-70B: 4M tokens (Touvron et al. 2023, §2.2)"),
    (70e9, 4.0e6, "Llama 2 70B: 4M tokens (Touvron et al. 2023, §2.2)"),
    (405e9, 16.0e6, "Llama 3 405B: 16M tokens after 2.87T tokens (Llama 3 paper, §3.4.1)"),
    (671e9, 15360 * 4096, "DeepSeek-V3 671B: 15,360 x 4,096 = 62.9M tokens (DeepSeek-V3 report, §4.2)"),
)
GPUS_PER_SEQUENCE = assumptions.GPUS_PER_SEQUENCE.value
"""At least one sequence per 8 GPUs, so that even a TP8 layout gives every data-parallel rank a
micro-batch (Llama 3 405B on 16K GPUs: 16M tokens per step at seq 8192 = 2048 sequences)."""
LONG_SEQ_TOKENS_PER_RANK = assumptions.LONG_SEQ_TOKENS_PER_RANK.value
"""Beyond this sequence length one sequence spans seq / 8,192 context-parallel ranks, so the floor is
one sequence per 8 x seq / 8,192 GPUs: the batch stays in tokens per step, not sequences. Llama 3 405B
kept 16M tokens per step at 131K on 16K GPUs with CP16 (8,192 tokens per rank; Llama 3 paper §3.3.2,
§3.4.2): 128 sequences, where one sequence per 8 GPUs would be 2,048 (268M tokens)."""
DEFAULT_GBS_RULE = (
    "the tokens per step published runs of the model's size used (GPT-3 Table 2.1 up to 2.7B, "
    "Llama 2's 4M for 7B-70B, Llama 3 405B's 16M, DeepSeek-V3's 62.9M; log-log in between), as the "
    "nearest power of two of sequences, and at least one sequence per 8 GPUs (8 x seq/8192 beyond 8K); "
    "with method lora or qlora, "
    "16 sequences (a fine-tuning default), or one per 8 GPUs when that is more"
)


def tokens_per_step(total_params: float) -> float:
    """Tokens per step of published runs near this size (TOKENS_PER_STEP_POINTS)."""
    if not total_params > 0:
        raise InputError(f"total_params={total_params} must be positive to choose a default batch")
    sizes = np.log([p for p, _, _ in TOKENS_PER_STEP_POINTS])
    tokens = np.log([t for _, t, _ in TOKENS_PER_STEP_POINTS])
    return float(np.exp(np.interp(math.log(total_params), sizes, tokens)))


def default_gbs(seq: int, gpus: int, total_params: float, fine_tune: bool = False) -> int:
    """Global batch in sequences when the request gives none; see DEFAULT_GBS_RULE (default_finetune_gbs for a
    fine-tune)."""
    if fine_tune:
        return default_finetune_gbs(gpus)
    if seq <= 0 or gpus <= 0:
        raise InputError(f"seq={seq} and gpus={gpus} must be positive to choose a default gbs")
    by_tokens = 2 ** max(0, round(math.log2(tokens_per_step(total_params) / seq)))
    by_gpus = 2 ** math.ceil(math.log2(max(1.0, gpus / gpus_per_sequence(seq))))
    return max(by_tokens, by_gpus)


def gpus_per_sequence(seq: int) -> float:
    """GPUs per sequence of the batch floor: GPUS_PER_SEQUENCE, times seq / LONG_SEQ_TOKENS_PER_RANK
    beyond it."""
    return GPUS_PER_SEQUENCE * max(1.0, seq / LONG_SEQ_TOKENS_PER_RANK)


def default_gbs_reason(seq: int, gpus: int, total_params: float, fine_tune: bool = False) -> str:
    """The sentence an assumption states for default_gbs: the figure, its tokens and its source."""
    gbs = default_gbs(seq, gpus, total_params, fine_tune)
    if fine_tune:
        return (f"{gbs} sequences ({gbs * seq:,} tokens per step), a fine-tuning default ({FINETUNE_GBS_SOURCE}), "
                "at least one sequence per GPU (the fine-tuning stacks are data parallel)")
    nearest = min(TOKENS_PER_STEP_POINTS, key=lambda point: abs(math.log(point[0] / total_params)))
    return (f"{gbs} sequences ({gbs * seq:,} tokens per step): published runs of {total_params / 1e9:.3g}B "
            f"parameters used about {tokens_per_step(total_params) / 1e6:.3g}M tokens per step (nearest: "
            f"{nearest[2]}), at least one sequence per {gpus_per_sequence(seq):g} GPUs")

# Fine-tuning defaults: a fine-tune (LoRA, QLoRA, or a request that says "fine-tune"/"SFT") is not a
# pre-training run, and the pre-training defaults above (4M tokens per step, the model's full context)
# describe none. Fine-tuning recipes set the sequence length and the batch (assumptions.FINETUNE_*):
# LLaMA-Factory's examples/train_lora/llama3_lora_sft.yaml cutoff_len 2048 at 1 x 8 sequences per GPU,
# axolotl's examples/llama-3/lora-8b.yml sequence_len 4096 (packed) at 2 x 4, TRL's SFTConfig max_length
# 1024 by default, the QLoRA paper's Guanaco runs 512 at 1 x 16. The planner plans at FINETUNE_SEQ where a
# layout fits on the request's GPUs, else at the longest of finetune_seqs that fits (agent/job_defaults.py).
FINETUNE_GBS = assumptions.FINETUNE_GBS.value
"""Global batch of a fine-tune that gives none, in sequences at any sequence length (the recipes set
per-device batch x accumulation in sequences, whatever their cutoff length)."""
FINETUNE_SEQ = assumptions.FINETUNE_SEQ.value
"""Sequence length of a fine-tune that gives none (LLaMA-Factory's cutoff_len 2048), where a layout fits."""
FINETUNE_SHORTEST_SEQ = assumptions.FINETUNE_SHORTEST_SEQ.value
"""The shortest sequence a fine-tune that gives none is planned at (QLoRA's Guanaco runs, target_max_len 512)."""
FINETUNE_SOURCE = (f"LLaMA-Factory examples/train_lora/llama3_lora_sft.yaml cutoff_len {FINETUNE_SEQ}; TRL SFTConfig "
                   "max_length 1024, axolotl examples/llama-3/lora-8b.yml sequence_len 4096")
"""Where FINETUNE_SEQ comes from, as an assumption cites it."""
FINETUNE_GBS_SOURCE = ("the recipes set the batch in sequences at any length: LLaMA-Factory 1 x 8 and axolotl 2 x 4 "
                       "per GPU, the QLoRA paper's Guanaco runs 1 x 16")
"""Where FINETUNE_GBS comes from, as an assumption cites it."""


def halvings(start: int, shortest: int) -> list[int]:
    """start, start // 2, ... down to the last that is at least `shortest` (empty when start is shorter)."""
    seqs = []
    while start >= shortest:
        seqs.append(start)
        start //= 2
    return seqs


def finetune_seqs(max_seq_len: int) -> list[int]:
    """The sequence lengths a fine-tune that gives none may be planned at, longest first: FINETUNE_SEQ (capped at
    the model's maximum), then halving down to FINETUNE_SHORTEST_SEQ (2048, 1024, 512)."""
    longest = min(max_seq_len, FINETUNE_SEQ)
    return halvings(longest, FINETUNE_SHORTEST_SEQ) or [longest]   # a model shorter than the floor: its maximum


def default_finetune_gbs(gpus: int) -> int:
    """Global batch of a fine-tune that gives none: FINETUNE_GBS, or one sequence per GPU when that is more, as a
    power of two. The fine-tuning stacks are data parallel (the Hugging Face Trainer tools and DeepSpeed ZeRO-3
    take no tensor parallelism with adapters or ZeRO-3: tools/config/engines.py refusals), so every GPU holds at
    least one sequence (a per-device batch of at least 1); pre-training's one per GPUS_PER_SEQUENCE assumes TP."""
    if gpus <= 0:
        raise InputError(f"gpus={gpus} must be positive to choose a default gbs")
    return max(FINETUNE_GBS, 2 ** math.ceil(math.log2(gpus)))


def leanest_layout(gpus: int) -> dict:
    """The layout that holds the least memory per GPU for a job, as the 'does anything fit' answers try it: data
    parallel with ZeRO-3 across the GPUs (none on one), full recompute, micro-batch 1."""
    return {"zero": 3 if gpus > 1 else 0, "recompute": "full", "mbs": 1}
