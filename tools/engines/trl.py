"""Hugging Face TRL + PEFT arguments: keyword arguments for SFTConfig, peft.LoraConfig and
transformers.BitsAndBytesConfig, as one YAML file whose sections a training script unpacks:

    args = yaml.safe_load(open(FILE))
    model = AutoModelForCausalLM.from_pretrained(ID, quantization_config=BitsAndBytesConfig(**args["bnb_config"]))
    SFTTrainer(model=model, args=SFTConfig(**args["sft_config"]), peft_config=LoraConfig(**args["lora_config"]), ...)

TRL runs on the Hugging Face Trainer: data-parallel layouts only (DDP, FSDP or DeepSpeed ZeRO), which
support.REFUSALS enforces with one line. Key names: SFTConfig (TRL >= 0.16 spells the sequence length
max_length, formerly max_seq_length) and the TrainingArguments it extends (per_device_train_batch_size,
gradient_accumulation_steps, bf16, gradient_checkpointing, optim, deepspeed, model_init_kwargs);
LoraConfig (r, lora_alpha, lora_dropout, target_modules, "all-linear" included, task_type);
BitsAndBytesConfig (load_in_4bit, bnb_4bit_quant_type, bnb_4bit_use_double_quant, bnb_4bit_compute_dtype).
ZeRO is written as an inline DeepSpeed dict (TrainingArguments.deepspeed takes a dict) whose batch fields
are "auto", so the Trainer fills them from the values here. Liger Kernel, where the plan assumes its fused
loss or kernels (common.liger_wanted), is TrainingArguments.use_liger_kernel, which applies every Liger kernel of
the model (apply_liger_kernel_to_<model> with its defaults).

Batch: per_device_train_batch_size x world size x gradient_accumulation_steps, the world size being
the number of processes launched (dp = gpus here).
"""

from __future__ import annotations

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Recompute
from trainplan.tools.engines.common import (HF_ATTN_IMPLEMENTATION, ExportResult, adapter_of, batch_of, finetune_yaml_export, ToolYaml,
                     hf_optimizer, liger_notes, liger_wanted, packs_documents, selective_recompute_note)
from trainplan.tools.engines.support import refuse


def deepspeed_dict(cfg: ParallelConfig) -> dict:
    """ZeRO for the Hugging Face Trainer: batch fields 'auto' (taken from the TrainingArguments)."""
    zero: dict = {"stage": cfg.zero}
    if cfg.optimizer_offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {"zero_optimization": zero, "bf16": {"enabled": "auto"}, "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}


def export_trl(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str) -> ExportResult:
    refuse("trl", model, cfg)   # support.REFUSALS: data-parallel layouts only
    notes: list[str] = []
    batch = batch_of(cfg)
    adapter = adapter_of(model, cfg)
    sft: dict = {
        "per_device_train_batch_size": batch.micro,
        "gradient_accumulation_steps": batch.accumulation,
        "max_length": cfg.seq,
        "bf16": True,
        "gradient_checkpointing": cfg.recompute is Recompute.full,
        "model_init_kwargs": {"attn_implementation": HF_ATTN_IMPLEMENTATION[cfg.attention], "dtype": "bfloat16"},
    }
    if cfg.recompute is Recompute.full:
        sft["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if packs_documents("TRL", cfg):   # packed without padding: flash attention's varlen kernels keep documents apart
        sft.update(packing=True, padding_free=True)
    if any(liger_wanted(cfg)):
        sft["use_liger_kernel"] = True
    notes += liger_notes("TRL", cfg, all_or_nothing=True)
    if cfg.zero >= 1:
        sft["deepspeed"] = deepspeed_dict(cfg)
    elif adapter is None and not cfg.pure_bf16:
        notes.append("full training without DeepSpeed: the model loads in bf16 (model_init_kwargs dtype), so the "
                     "Trainer's AdamW keeps bf16 moments and no fp32 master, 8 B/param of model states where this plan "
                     "counts 18 (bf16 weights, fp32 gradients, fp32 master and moments): --pure-bf16 plans what runs")
    args: dict = {"model": model_ref, "sft_config": sft}
    if adapter is not None:
        args["lora_config"] = {"r": adapter.rank, "lora_alpha": adapter.alpha, "lora_dropout": adapter.dropout,
                               "target_modules": "all-linear" if adapter.all_linear else list(adapter.modules),
                               "task_type": "CAUSAL_LM"}
        if adapter.method == "qlora":
            args["bnb_config"] = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                                  "bnb_4bit_use_double_quant": adapter.double_quant,
                                  "bnb_4bit_compute_dtype": "bfloat16"}
            notes.append("qlora: load the model with quantization_config=BitsAndBytesConfig(**bnb_config) and pass"
                         " it to SFTTrainer (model_init_kwargs cannot hold the config object in YAML)")
    if optim := hf_optimizer(cfg):   # qlora's paged AdamW, or bitsandbytes' 8-bit one
        sft["optim"] = optim
    if cfg.recompute is Recompute.selective:
        notes.append(selective_recompute_note("TrainingArguments"))
    notes.append('model_init_kwargs.dtype is the transformers >= 4.56 name; older versions spell it torch_dtype')
    if cfg.recompute is Recompute.full:
        notes.append("gradient_checkpointing is the name every transformers release reads; recent 5.x releases call it"
                     " activation_checkpointing and keep the old name as an alias until v6")
    return finetune_yaml_export("trl", model, cfg, model_ref, ToolYaml(
        args, notes, adapter=adapter, base_key="model",
        todo="add output_dir, num_train_epochs and learning_rate to sft_config, and the dataset to SFTTrainer",
        head=["sections: sft_config -> trl.SFTConfig(**), lora_config -> peft.LoraConfig(**),"
              " bnb_config -> transformers.BitsAndBytesConfig(**)",
              f"usage: accelerate launch --num_processes {cfg.num_gpus} train.py"]))
