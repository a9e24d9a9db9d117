"""LLaMA-Factory YAML (`llamafactory-cli train FILE`).

LLaMA-Factory runs on the Hugging Face Trainer: data-parallel layouts only (DDP, FSDP or DeepSpeed
ZeRO), which support.REFUSALS enforces with one line. Key names are those of its argument dataclasses
(src/llamafactory/hparams: ModelArguments, FinetuningArguments, DataArguments, and the Trainer's
Seq2SeqTrainingArguments) and its examples (examples/train_lora/*_lora_sft.yaml, train_qlora/):
stage, do_train, finetuning_type (full|lora), lora_rank, lora_alpha, lora_dropout, lora_target
(all, or comma-separated module names), quantization_bit 4 with quantization_type nf4 and
double_quantization, cutoff_len, per_device_train_batch_size, gradient_accumulation_steps, bf16,
disable_gradient_checkpointing (LLaMA-Factory checkpoints by default), flash_attn (fa2|sdpa|disabled)
and deepspeed. ZeRO is written as one of the files LLaMA-Factory ships in examples/deepspeed/
(ds_z0_config.json, ds_z2_config.json, ds_z3_config.json and their _offload variants; there is no
ZeRO-1 file). Liger Kernel, where the plan assumes its fused loss or kernels (common.liger_wanted), is
ModelArguments.enable_liger_kernel, which applies every Liger kernel of the model
(src/llamafactory/model/model_utils/liger_kernel.py apply_liger_kernel: apply_liger_kernel_to_<model>).

Batch: per_device_train_batch_size x world size x gradient_accumulation_steps, the world size being
the number of processes launched (dp = gpus here).
"""

from __future__ import annotations

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Recompute
from trainplan.tools.engines.common import (ExportResult, adapter_of, batch_of, finetune_yaml_export, ToolYaml,
                     hf_optimizer, liger_notes, liger_wanted, packs_documents, selective_recompute_note)
from trainplan.tools.engines.support import refuse

# ZeRO stage -> the DeepSpeed file LLaMA-Factory ships (examples/deepspeed/ in its repository); ZeRO-1 has none,
# ZeRO-2 shards gradients as well and needs no more memory.
DEEPSPEED_FILES = {1: "examples/deepspeed/ds_z2_config.json", 2: "examples/deepspeed/ds_z2_config.json",
                   3: "examples/deepspeed/ds_z3_config.json"}
DEEPSPEED_OFFLOAD_FILES = {1: "examples/deepspeed/ds_z2_offload_config.json",
                           2: "examples/deepspeed/ds_z2_offload_config.json",
                           3: "examples/deepspeed/ds_z3_offload_config.json"}


def export_llamafactory(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str) -> ExportResult:
    refuse("llamafactory", model, cfg)   # support.REFUSALS: data-parallel layouts only
    notes: list[str] = []
    batch = batch_of(cfg)
    adapter = adapter_of(model, cfg)
    config: dict = {"model_name_or_path": model_ref, "stage": "sft", "do_train": True,
                    "finetuning_type": "full" if adapter is None else "lora"}
    if adapter is not None:
        config["lora_rank"] = adapter.rank
        config["lora_alpha"] = adapter.alpha
        config["lora_dropout"] = adapter.dropout
        config["lora_target"] = "all" if adapter.all_linear else ",".join(adapter.modules)
        if adapter.method == "qlora":
            config.update({"quantization_bit": 4, "quantization_method": "bitsandbytes",
                           "quantization_type": "nf4", "double_quantization": adapter.double_quant})
    if optim := hf_optimizer(cfg):   # qlora's paged AdamW, or bitsandbytes' 8-bit one
        config["optim"] = optim
    config.update({
        "cutoff_len": cfg.seq,
        "per_device_train_batch_size": batch.micro,
        "gradient_accumulation_steps": batch.accumulation,
        "bf16": True,
        "disable_gradient_checkpointing": cfg.recompute is not Recompute.full,
        "flash_attn": "fa2" if cfg.attention.fused else "disabled",
    })
    if cfg.pure_bf16:   # LLaMA-Factory's own switch: trainable weights stay bf16, no AMP (its webui's compute type)
        config.update(bf16=False, pure_bf16=True)
    elif adapter is None and cfg.zero == 0:
        notes.append("full training without DeepSpeed: LLaMA-Factory upcasts the trainable weights to fp32 (model/"
                     "adapter.py, unless pure_bf16 or ZeRO-3), so the fp32 parameters are the master copy, 16 B/param "
                     "of model states where this plan counts 18: --fp32-params plans it, --pure-bf16 plans and writes "
                     "LLaMA-Factory's pure_bf16")
    if packs_documents("LLaMA-Factory", cfg):   # neat_packing: packing without attention across documents
        config.update(packing=True, neat_packing=True)
    if any(liger_wanted(cfg)):
        config["enable_liger_kernel"] = True
    notes += liger_notes("LLaMA-Factory", cfg, all_or_nothing=True)
    if cfg.zero >= 1:
        files = DEEPSPEED_OFFLOAD_FILES if cfg.optimizer_offload else DEEPSPEED_FILES
        config["deepspeed"] = files[cfg.zero]
        if cfg.zero == 1:
            notes.append("LLaMA-Factory ships no ZeRO-1 DeepSpeed file: zero=1 is written as ZeRO-2, which also"
                         " shards gradients and needs no more memory")
        if cfg.optimizer_offload and cfg.zero == 3:
            notes.append("ds_z3_offload_config.json offloads parameters as well as the optimizer state")
        notes.append(f"deepspeed: {config['deepspeed']} is relative to the LLaMA-Factory repository; its batch"
                     " fields are 'auto' and follow the values here")
    if cfg.recompute is Recompute.selective:
        notes.append(selective_recompute_note("LLaMA-Factory"))
    notes.append("stage sft (supervised fine-tuning); use stage pt for continued pre-training on raw text")
    return finetune_yaml_export("llamafactory", model, cfg, model_ref, ToolYaml(
        config, notes, adapter=adapter, base_key="model_name_or_path",
        todo="add dataset, template, output_dir, num_train_epochs and learning_rate for your run",
        head=[f"usage: FORCE_TORCHRUN=1 llamafactory-cli train this-file (on {cfg.num_gpus} GPUs)"]))
