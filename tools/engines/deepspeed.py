"""DeepSpeed ds_config JSON.

Checked against DeepSpeed 0.19.8's own classes (tests/test_export_engines.py): DeepSpeedConfig parses the
file and asserts train_batch_size == train_micro_batch_size_per_gpu x gradient_accumulation_steps x
world_size, where its world_size is the data-parallel size, world / (tp*pp), from the mpu.

What DeepSpeed cannot express is refused with one line:
- context parallelism: DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads), a
  different algorithm from the ring attention trainplan models;
- fp8: ds_config has no FP8 training setting;
- pipeline schedules other than 1F1B: the pipeline engine runs one schedule (TrainSchedule, 1F1B-like);
- ZeRO-2/3 with pp > 1: its pipeline engine asserts "ZeRO-2 and ZeRO-3 are incompatible with
  pipeline parallelism";
- ZeRO-3 with tp > 1: AutoTP training works with ZeRO stages 0, 1 and 2 only (DeepSpeed's "Automatic Tensor
  Parallelism (Training)" tutorial, Limitations 1: "ZeRO Stage 3 not supported");
- LoRA/QLoRA with tp or pp > 1: AutoTP replaces every nn.Linear it meets (isinstance, so a bitsandbytes
  Linear4bit too) with a layer that slices `weight` as a dense [out, in] matrix (DeepSpeed's
  module_inject/auto_tp.py _replace, layers.py LinearLayer), while a 4-bit weight is a packed uint8 column and
  PEFT's lora_A/lora_B sit inside wrapper modules; the pipeline engine runs a PipelineModule (a list of layers), not a Hugging Face model with
  PEFT's wrappers; PEFT's maintainers know of no working pipeline- or tensor-parallel example
  (huggingface/peft#1572), and LLaMA-Factory users report AutoTP without LoRA support (hiyouga/LlamaFactory#8206);
- optimizer offload without ZeRO.
"""

from __future__ import annotations

import json

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Recompute
from trainplan.tools.engines.common import ExportResult, batch_of, fusion_note, hf_attention_note, selective_recompute_note, slug
from trainplan.tools.engines.support import refuse


def export_deepspeed(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str) -> ExportResult:
    refuse("deepspeed", model, cfg)   # support.REFUSALS: what DeepSpeed cannot run
    notes: list[str] = []
    batch = batch_of(cfg)
    config: dict = {
        "train_batch_size": batch.global_,
        "train_micro_batch_size_per_gpu": batch.micro,
        "gradient_accumulation_steps": batch.accumulation,
        "bf16": {"enabled": True},
    }
    zero: dict = {"stage": cfg.zero}
    if cfg.optimizer_offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if cfg.zero >= 1:
        zero["overlap_comm"] = cfg.overlap_grad_reduce
    config["zero_optimization"] = zero
    # ZeRO-0 with bf16 accumulates gradients in bf16 (DeepSpeed raises on bf16 weights + fp32 accumulation).
    grads_bf16 = cfg.bf16_grads or cfg.zero == 0
    config["data_types"] = {"grad_accum_dtype": "bf16" if grads_bf16 else "fp32"}
    if cfg.zero == 0 and not cfg.bf16_grads:
        notes.append("without ZeRO, DeepSpeed's bf16 mode accumulates gradients in bf16 (2 B/param), not fp32")

    if cfg.recompute is Recompute.full:
        config["activation_checkpointing"] = {
            "partition_activations": cfg.tp > 1,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
        notes.append("full recompute takes effect where the model calls deepspeed.checkpointing.checkpoint"
                     " on each block (HF models: model.gradient_checkpointing_enable())")
    elif cfg.recompute is Recompute.selective:
        notes.append(selective_recompute_note("ds_config"))

    notes.append(hf_attention_note(cfg))
    if (note := fusion_note(cfg, fused_by_default=False)):
        notes.append(note)
    if cfg.pp > 1:
        # The pipeline engine reads activation_checkpoint_interval from here; the stage count comes from the model.
        config["pipeline"] = {"activation_checkpoint_interval": 1 if cfg.recompute is Recompute.full else 0}
        notes.append(f"pipeline: build the model as deepspeed.pipe.PipelineModule(layers, num_stages={cfg.pp});"
                     f" each step runs {batch.accumulation} micro-batches through the pipeline")
        if not cfg.blocking_p2p or cfg.overlap_grad_reduce:
            notes.append("DeepSpeed's pipeline engine blocks on each send and receive and reduces the gradients after"
                         " the last micro-batch (TrainSchedule): plan with blocking_p2p=true and"
                         " overlap_grad_reduce=false for the step time it runs")
    if cfg.tp > 1 and cfg.pp == 1:
        config["tensor_parallel"] = {"autotp_size": cfg.tp}
        notes.append(f"tp={cfg.tp} uses DeepSpeed AutoTP training (Hugging Face models; DeepSpeed >= 0.16.4)")
    elif cfg.tp > 1:
        notes.append(f"tp={cfg.tp} with pp={cfg.pp}: tensor-parallel groups come from the mpu your model code"
                     " passes to deepspeed.initialize (e.g. Megatron-DeepSpeed); ds_config has no key for it")
    if cfg.ep > 1:
        config["expert_parallel"] = {"enabled": True, "autoep_size": cfg.ep}
        notes.append(f"ep={cfg.ep} uses DeepSpeed AutoEP (expert_parallel, DeepSpeed 0.19+) on Hugging Face MoE"
                     f" layers; with your own model code use deepspeed.moe.layer.MoE(..., ep_size={cfg.ep}) instead")
    notes.append(f"DeepSpeed's data-parallel size is world / (tp*pp) = {cfg.num_gpus}/{cfg.tp * cfg.pp} = {cfg.dp};"
                 f" {batch.identity()}")
    return ExportResult(engine="deepspeed", filename_suggestion=f"{slug(model_ref)}-ds_config.json",
                        content=json.dumps(config, indent=2) + "\n", format="json", notes=notes)
