"""Hugging Face Accelerate config YAML (`accelerate launch --config_file FILE train.py`).

Only pure data-parallel layouts (tp = pp = cp = ep = 1): the file drives FSDP2 (zero >= 1) or DDP
(zero = 0). Checked against Accelerate 1.15's own loader (ClusterConfig.from_yaml_file rejects unknown
keys) and its launch parser (tests/test_export_engines.py).

Mapping: zero=3 -> fsdp_reshard_after_forward true (full shard); zero=1/2 -> false (FSDP2 has no
ZeRO-1; ZeRO-2 shards gradients as well and needs no more memory); zero=0 -> MULTI_GPU (DDP).
Hybrid sharding (dp_shard < dp) -> parallelism_config with parallelism_config_dp_shard_size dp_shard and
parallelism_config_dp_replicate_size dp/dp_shard (Accelerate's ParallelismConfig, FSDP2 only: its launcher
refuses a parallelism config without fsdp_version 2).
The YAML holds no batch sizes: the training script sets them (per-device batch and
Accelerator(gradient_accumulation_steps=...)), so the header comment states the batch identity.
"""

from __future__ import annotations

import math

import yaml

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Precision, Recompute
from trainplan.tools.engines.common import (ExportResult, batch_of, comment_block, fusion_note, header, hf_attention_note,
                     selective_recompute_note, slug)
from trainplan.tools.engines.support import param_storage_note, refuse


def export_accelerate(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str,
                      gpus_per_node: int = 8) -> ExportResult:
    refuse("accelerate", model, cfg)   # support.REFUSALS: pure FSDP/DDP layouts only
    notes: list[str] = []
    batch = batch_of(cfg)
    num_machines = max(1, math.ceil(cfg.num_gpus / gpus_per_node))
    config: dict = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "FSDP" if cfg.zero >= 1 else "MULTI_GPU",
        "mixed_precision": "fp8" if cfg.precision is Precision.fp8 else "bf16",
        "num_machines": num_machines,
        "num_processes": cfg.num_gpus,
        "machine_rank": 0,
        "main_training_function": "main",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if cfg.num_gpus % gpus_per_node:
        notes.append(f"{cfg.num_gpus} GPUs do not fill {num_machines} nodes of {gpus_per_node}: check num_machines")
    if cfg.zero >= 1:
        config["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": cfg.zero == 3,
            "fsdp_offload_params": cfg.optimizer_offload,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_sync_module_states": True,
            "fsdp_activation_checkpointing": cfg.recompute is Recompute.full,
        }
        if cfg.dp_replicas > 1:
            config["parallelism_config"] = {"parallelism_config_dp_replicate_size": cfg.dp_replicas,
                                            "parallelism_config_dp_shard_size": cfg.dp_shard_size}
        if cfg.zero == 1:
            notes.append("FSDP2 has no ZeRO-1: zero=1 is written as ZeRO-2 (fsdp_reshard_after_forward: false),"
                         " which also shards gradients and needs no more memory")
        if cfg.optimizer_offload:
            notes.append("FSDP's CPU offload (fsdp_offload_params) moves parameters and gradients to the CPU too,"
                         " not only the optimizer state")
    else:
        if cfg.recompute is Recompute.full:
            notes.append("DDP has no activation-checkpointing setting: call model.gradient_checkpointing_enable()")
    if cfg.precision is Precision.fp8:
        config["fp8_config"] = {"backend": "AO"}
        notes.append("fp8 uses torchao float8 (fp8_config backend AO), which works with FSDP2")
    if cfg.recompute is Recompute.selective:
        notes.append(selective_recompute_note("accelerate"))
    notes.append(hf_attention_note(cfg))
    if (note := fusion_note(cfg, fused_by_default=False)):
        notes.append(note)
    if (note := param_storage_note("accelerate", cfg)):
        notes.append(note)
    if cfg.bf16_grads:
        notes.append("FSDP2 in accelerate reduces gradients in fp32 by default; bf16 gradients are not a setting here")
    notes.append(f"in the training script: per-device batch {batch.micro}, Accelerator(gradient_accumulation_steps="
                 f"{batch.accumulation}), sequence length {cfg.seq}: {batch.identity()}")
    lines = header("accelerate", model, cfg, model_ref)
    lines.append(f"training script: per-device batch {batch.micro}, gradient_accumulation_steps {batch.accumulation}")
    lines.append("usage: accelerate launch --config_file this-file --machine_rank <node index> train.py")
    body = yaml.safe_dump(config, sort_keys=False)
    return ExportResult(engine="accelerate", filename_suggestion=f"{slug(model_ref)}-accelerate.yaml",
                        content=comment_block(lines) + body, format="yaml", notes=notes)
