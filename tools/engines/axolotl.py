"""Axolotl YAML (`axolotl train FILE`, or `accelerate launch -m axolotl.cli.train FILE`).

Axolotl runs on the Hugging Face Trainer: data-parallel layouts only (DDP, FSDP or DeepSpeed ZeRO),
which support.REFUSALS enforces with one line (tp, pp, cp, ep > 1; fp8; offload without ZeRO).
Key names are those of Axolotl's config reference (docs/config-reference.qmd) and its examples
(examples/llama-3/qlora.yml, lora-8b.yml): adapter, load_in_4bit, lora_r, lora_alpha, lora_dropout,
lora_target_linear / lora_target_modules, sequence_len, micro_batch_size, gradient_accumulation_steps,
bf16, gradient_checkpointing, attn_implementation (Axolotl 0.19 deprecates the boolean flash_attention: true
in its favour and rejects the two together), optimizer, deepspeed. ZeRO is written as one of the
DeepSpeed files Axolotl ships in deepspeed_configs/ (zero1.json, zero2.json, zero3_bf16.json,
zero3_bf16_cpuoffload_all.json). Liger Kernel, where the plan assumes its fused loss or kernels
(common.liger_wanted), is Axolotl's plugin (src/axolotl/integrations/liger README: plugins
axolotl.integrations.liger.LigerPlugin, liger_rope, liger_rms_norm, liger_glu_activation,
liger_fused_linear_cross_entropy), each kernel switched as planned.

Batch: micro_batch_size x world size x gradient_accumulation_steps; the world size is the number of
processes the launcher starts (dp = gpus here), so the file holds two of the three factors and the
header states the identity.
"""

from __future__ import annotations

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Recompute
from trainplan.tools.engines.common import (HF_ATTN_IMPLEMENTATION, ExportResult, adapter_of, batch_of, finetune_yaml_export, ToolYaml,
                     hf_optimizer, liger_notes, liger_wanted, packs_documents, selective_recompute_note)
from trainplan.tools.engines.support import refuse

# ZeRO stage -> the DeepSpeed file Axolotl ships (deepspeed_configs/ in the Axolotl repository).
DEEPSPEED_FILES = {1: "deepspeed_configs/zero1.json", 2: "deepspeed_configs/zero2.json",
                   3: "deepspeed_configs/zero3_bf16.json"}
DEEPSPEED_OFFLOAD_FILE = "deepspeed_configs/zero3_bf16_cpuoffload_all.json"


def export_axolotl(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str) -> ExportResult:
    refuse("axolotl", model, cfg)   # support.REFUSALS: data-parallel layouts only
    notes: list[str] = []
    batch = batch_of(cfg)
    adapter = adapter_of(model, cfg)
    config: dict = {"base_model": model_ref}
    if adapter is not None:
        config["adapter"] = adapter.method
        config["load_in_4bit"] = adapter.method == "qlora"
        if not adapter.double_quant:   # Axolotl's 4-bit loader sets double quantisation; these keys override it
            config["bnb_config_kwargs"] = {"bnb_4bit_use_double_quant": False}
        config["lora_r"] = adapter.rank
        config["lora_alpha"] = adapter.alpha
        config["lora_dropout"] = adapter.dropout
        if adapter.all_linear:
            config["lora_target_linear"] = True
        else:
            config["lora_target_modules"] = list(adapter.modules)
    config.update({
        "sequence_len": cfg.seq,
        "micro_batch_size": batch.micro,
        "gradient_accumulation_steps": batch.accumulation,
        "bf16": True,
        "gradient_checkpointing": cfg.recompute is Recompute.full,
        "attn_implementation": HF_ATTN_IMPLEMENTATION[cfg.attention],
    })
    if packs_documents("Axolotl", cfg):   # multipack: each packed sample attends to itself (varlen flash)
        config.update(sample_packing=True, pad_to_sequence_len=True)
    loss, kernels = liger_wanted(cfg)
    if loss or kernels:
        config.update({"plugins": ["axolotl.integrations.liger.LigerPlugin"], "liger_rope": kernels,
                       "liger_rms_norm": kernels, "liger_glu_activation": kernels,
                       "liger_fused_linear_cross_entropy": loss})
    notes += liger_notes("Axolotl", cfg, all_or_nothing=False)
    if optim := hf_optimizer(cfg):   # qlora's paged AdamW, or bitsandbytes' 8-bit one
        config["optimizer"] = optim
    if cfg.zero >= 1:
        if cfg.optimizer_offload:
            config["deepspeed"] = DEEPSPEED_OFFLOAD_FILE
            if cfg.zero < 3:
                notes.append(f"zero={cfg.zero} with optimizer offload: Axolotl ships an offload file for ZeRO-3 only"
                             f" ({DEEPSPEED_OFFLOAD_FILE}, which also offloads parameters); for ZeRO-{cfg.zero} add"
                             ' "offload_optimizer": {"device": "cpu"} to zero2.json instead')
        else:
            config["deepspeed"] = DEEPSPEED_FILES[cfg.zero]
        notes.append(f"deepspeed: {config['deepspeed']} is relative to the Axolotl repository; its batch fields"
                     " are 'auto' and follow micro_batch_size and gradient_accumulation_steps")
    notes.append(f"attn_implementation: {config['attn_implementation']} is the key Axolotl 0.19 reads; older releases"
                 " without it spell flash attention as flash_attention: true")
    if cfg.recompute is Recompute.selective:
        notes.append(selective_recompute_note("Axolotl"))
    return finetune_yaml_export("axolotl", model, cfg, model_ref, ToolYaml(
        config, notes, adapter=adapter, base_key="base_model",
        todo="add datasets, output_dir, num_epochs, learning_rate and the optimizer schedule for your run",
        head=[f"usage: accelerate launch --num_processes {cfg.num_gpus} -m axolotl.cli.train this-file"]))
