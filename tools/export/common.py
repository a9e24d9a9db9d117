"""What every exporter shares: the result type, the export error, and the batch identity.

Batch identity (DESIGN.md vocabulary, sequences):
    gbs = mbs x dp x m,   dp = gpus / (tp*pp*cp),   m = gradient-accumulation steps
          (with pp > 1, m is also the number of pipeline micro-batches per step).
Each exporter writes the three factors in the engine's own keys, and every file repeats the identity
so that a reader can check it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from ..errors import InputError
from ..specs import Attention, ModelSpec, ParallelConfig


class ExportError(InputError):
    """The layout cannot be written for this engine. One line: what the engine lacks and what to do."""


class ExportResult(BaseModel):
    """One engine's launch settings for one layout."""

    engine: str = Field(description="megatron, deepspeed, torchtitan or accelerate")
    filename_suggestion: str = Field(description="a file name that fits the engine's convention")
    content: str = Field(description="the file's text, ready to save")
    format: Literal["args", "json", "toml", "yaml"] = Field(description="how content is written")
    notes: list[str] = Field(default_factory=list, description="what the engine maps differently, and what to add")


@dataclass(frozen=True)
class Batch:
    """global = micro x data_parallel x accumulation, in sequences."""

    micro: int
    data_parallel: int
    accumulation: int

    @property
    def global_(self) -> int:
        return self.micro * self.data_parallel * self.accumulation

    def identity(self) -> str:
        return (f"global batch {self.global_} = micro-batch {self.micro} x data-parallel {self.data_parallel}"
                f" x accumulation {self.accumulation}")


def batch_of(cfg: ParallelConfig) -> Batch:
    """The batch factors of a resolved layout; without a gbs, one micro-batch per data-parallel rank."""
    return Batch(micro=cfg.mbs, data_parallel=cfg.dp, accumulation=cfg.num_microbatches)


def layout_line(cfg: ParallelConfig) -> str:
    return (f"tp={cfg.tp} pp={cfg.pp} cp={cfg.cp} ep={cfg.ep} dp={cfg.dp} vpp={cfg.vpp} zero={cfg.zero}"
            f" schedule={cfg.schedule.value} recompute={cfg.recompute.value} precision={cfg.precision.value}"
            f" attention={cfg.attention.value} fused_kernels={str(cfg.fused_kernels).lower()}"
            f" seq={cfg.seq}")


def header(engine: str, model: ModelSpec, cfg: ParallelConfig, model_ref: str) -> list[str]:
    """Comment lines (without the leading '# ') that open every args/TOML/YAML export."""
    return [
        f"trainplan export for {engine}: {model_ref} ({model.name}) on {cfg.num_gpus} GPUs",
        f"layout: {layout_line(cfg)}",
        f"batch: {batch_of(cfg).identity()} (sequences of {cfg.seq} tokens)",
    ]


def comment_block(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def slug(text: str) -> str:
    """A file-name-safe form of a model reference."""
    out = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text.rsplit("/", 1)[-1])
    return out.strip("-.") or "model"


def fusion_note(cfg: ParallelConfig, fused_by_default: bool) -> str | None:
    """What the layout's fused_kernels asks of an engine that does (Megatron) or does not (plain PyTorch
    models) fuse norms, rotary and SwiGLU by itself; None when nothing needs doing."""
    if cfg.fused_kernels == fused_by_default:
        return None
    if cfg.fused_kernels:
        return ("fused_kernels=true: compile the model (torch.compile) or use fused kernels for RMSNorm, rotary and"
                " SwiGLU; as loaded, these run as separate PyTorch ops and the step is slower than estimated")
    return ("fused_kernels=false has no setting here: this engine fuses norms, rotary and SwiGLU, so the step"
            " will be shorter than estimated")


def hf_attention_note(cfg: ParallelConfig) -> str:
    """How a Hugging Face model picks the layout's attention kernel (from_pretrained's attn_implementation)."""
    if cfg.attention is Attention.eager:
        return 'attention=eager: load the model with attn_implementation="eager" (unfused s x s attention)'
    return ('attention=flash: load the model with attn_implementation="flash_attention_2" (or "sdpa", whose flash'
            ' backend runs the same kernel)')
