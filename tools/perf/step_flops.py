"""FLOPs of one training step in the three conventions step.py reports: model FLOPs with causal attention,
model FLOPs with full attention (PaLM), and the hardware FLOPs the kernels run (what is counted is what is timed:
causal under flash, full under eager, plus recompute and MTP; LoRA's convention in tools/perf/finetune.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.config.resolve import document_span, is_lora, kernel_span
from trainplan.tools.core.enums import Recompute
from trainplan.tools.hardware.counting import flops_per_token
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.perf import finetune
from trainplan.tools.perf.recompute import recomputed_flops_per_token


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one step in the three named conventions (module docstring)."""

    model: float                   # 3 x forward, attention scores counted causally
    model_full_attention: float    # 3 x forward, attention without the causal discount (PaLM)
    hardware: float        # what the kernels run: causal under flash, full under eager; + recompute, + MTP


def model_flops_per_step(model: ModelSpec, cfg: ParallelConfig) -> StepFlops:
    """FLOPs of one step: model FLOPs in both attention conventions and the hardware FLOPs timed."""
    tokens = cfg.gbs * cfg.seq
    # attention's keys per query: the packed document's in the model's math, the kernel's own span in what it runs
    span = document_span(cfg)
    executed = flops_per_token(model, kernel_span(cfg), causal=cfg.attention.fused, include_mtp=True)
    recompute = recomputed_flops_per_token(model, cfg, kernel_span(cfg))   # recompute.py
    if cfg.recompute is Recompute.full and is_lora(cfg.method):
        recompute += finetune.adapter_forward_flops_per_token(model, cfg.lora_rank, cfg.lora_targets)

    def training(counts) -> float:   # 3 x forward, or LoRA's convention (finetune.FLOPS_CONVENTION)
        return finetune.training_flops_per_token(counts, model, cfg)

    return StepFlops(
        model=training(flops_per_token(model, span, causal=True)) * tokens,
        model_full_attention=training(flops_per_token(model, span, causal=False)) * tokens,
        hardware=(training(executed) + recompute) * tokens,
    )
