"""Launch settings for the engines people use, from one resolved layout.

    export(engine, model, cfg, *, model_ref) -> ExportResult(engine, filename_suggestion, content, format, notes)

`cfg` is a ParallelConfig as layout.resolve_config returns it. Each engine module says how the contract's (tools/config/contract.py)
vocabulary maps onto the engine's own settings and refuses, with one ExportError line, what the engine
cannot express. Every file closes the batch identity global = micro x data-parallel x accumulation.
"""

from __future__ import annotations

from enum import Enum

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.engines.accelerate import export_accelerate
from trainplan.tools.engines.axolotl import export_axolotl
from trainplan.tools.engines.common import Batch, ExportError, ExportResult, batch_of
from trainplan.tools.engines.deepspeed import export_deepspeed
from trainplan.tools.engines.llamafactory import export_llamafactory
from trainplan.tools.engines.megatron import export_megatron, parse_args_text
from trainplan.tools.engines.torchtitan import export_torchtitan
from trainplan.tools.engines.trl import export_trl


class Engine(str, Enum):
    """Training engine to write launch settings for."""

    megatron = "megatron"
    """Megatron-LM / Megatron-Core pretrain_gpt.py arguments (a bash array)."""
    deepspeed = "deepspeed"
    """DeepSpeed ds_config JSON."""
    torchtitan = "torchtitan"
    """torchtitan 0.2.x job TOML."""
    accelerate = "accelerate"
    """Hugging Face Accelerate FSDP2/DDP config YAML (pure data-parallel layouts only)."""
    axolotl = "axolotl"
    """Axolotl fine-tuning YAML: full, LoRA or QLoRA (data-parallel layouts only)."""
    llamafactory = "llamafactory"
    """LLaMA-Factory fine-tuning YAML: full, LoRA or QLoRA (data-parallel layouts only)."""
    trl = "trl"
    """Hugging Face TRL SFTConfig + PEFT LoraConfig (+ BitsAndBytesConfig) keyword arguments, YAML."""


EXPORTERS = {
    Engine.megatron: export_megatron,
    Engine.deepspeed: export_deepspeed,
    Engine.torchtitan: export_torchtitan,
    Engine.axolotl: export_axolotl,
    Engine.llamafactory: export_llamafactory,
    Engine.trl: export_trl,
}
"""Engine -> exporter taking (model, cfg, model_ref=); accelerate, which also takes gpus_per_node, is called apart."""


def export(engine: Engine | str, model: ModelSpec, cfg: ParallelConfig, *, model_ref: str,
           gpus_per_node: int = 8) -> ExportResult:
    """The engine's launch settings for a resolved layout; ExportError when the engine cannot express it."""
    try:
        engine = Engine(engine)
    except ValueError:
        known = ", ".join(e.value for e in Engine)
        raise ExportError(f"engine='{engine}' is not one of: {known}") from None
    if engine is Engine.accelerate:   # the only exporter that needs the node size (machines per job)
        return export_accelerate(model, cfg, model_ref=model_ref, gpus_per_node=gpus_per_node)
    return EXPORTERS[engine](model, cfg, model_ref=model_ref)


__all__ = ["Batch", "Engine", "ExportError", "ExportResult", "batch_of", "export", "parse_args_text"]
