"""Exported files read by the engines' own code, for the seeded random layouts of test_export.py.

Optional: each test skips when its engine is not installed (`pip install -e .[engines]`; on a machine
without a GPU install a CPU torch first, and DeepSpeed with `--no-build-isolation`). Checked against
DeepSpeed 0.19.8, torchtitan 0.2.2, Accelerate 1.15.0 and megatron-core 0.16.1 with torch 2.13.0+cpu.

- DeepSpeed: runtime.config.DeepSpeedConfig parses the JSON (pydantic ZeRO/offload/TP configs) and
  asserts train_batch_size == micro x accumulation x its data-parallel world, taken from the mpu.
- torchtitan: config.ConfigManager loads the TOML (unknown keys are an error) and
  distributed.parallel_dims.ParallelDims validates the degrees; torch resolves the schedule name.
- Accelerate: ClusterConfig.from_yaml_file (unknown keys are an error), the `accelerate launch` parser
  and environment, and FullyShardedDataParallelPlugin built from that environment.
- Megatron: Megatron-LM's argument parser is not packaged, so megatron-core's TransformerConfig (which
  holds the uneven-pipeline, VPP, layout, MoE and MLA rules) and its micro-batch calculator are built from
  the exported flags the way core_transformer_config_from_args maps them.
"""

from __future__ import annotations

import json

import pytest

from test_export import LAYOUTS
from trainplan.tools.engines import ExportError, export, parse_args_text


def exported(engine: str):
    for model, cfg in LAYOUTS:
        try:
            yield model, cfg, export(engine, model, cfg, model_ref=model.name)
        except ExportError:
            continue


def test_deepspeed_config_parses_and_batch_closes(monkeypatch):
    pytest.importorskip("deepspeed")
    import deepspeed.runtime.config as ds_config

    # DeepSpeedConfig reads the data-parallel world from the mpu only once torch.distributed answers a rank.
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *args, **kwargs: 0)

    class Mpu:
        def __init__(self, dp: int):
            self.dp = dp

        def get_data_parallel_world_size(self) -> int:
            return self.dp

    checked = 0
    for _, cfg, result in exported("deepspeed"):
        data = json.loads(result.content)
        config = ds_config.DeepSpeedConfig(data, mpu=Mpu(cfg.num_gpus // (cfg.tp * cfg.pp)))
        assert config.train_batch_size == cfg.mbs * cfg.dp * cfg.num_microbatches
        assert config.gradient_accumulation_steps == cfg.num_microbatches
        assert config.zero_optimization_stage == cfg.zero and config.bfloat16_config.enabled
        assert (config.zero_config.offload_optimizer is not None) == cfg.optimizer_offload
        if "tensor_parallel" in data:
            assert config.tensor_parallel_config.autotp_size == cfg.tp
        if cfg.ep > 1:
            assert config.expert_parallel_config.enabled and config.expert_parallel_config.autoep_size == cfg.ep
        checked += 1
    assert checked >= 20


def test_torchtitan_job_config_loads(tmp_path):
    pytest.importorskip("torchtitan.config.job_config", reason="torchtitan 0.2.x (TOML job files)")
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    path = tmp_path / "job.toml"
    checked = 0
    for _, cfg, result in exported("torchtitan"):
        path.write_text(result.content)
        job = ConfigManager().parse_args(["--job.config_file", str(path)])
        p = job.parallelism
        ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                     cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                     ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=cfg.num_gpus)
        if cfg.pp > 1:
            get_schedule_class(p.pipeline_parallel_schedule)
            assert job.training.local_batch_size % p.pipeline_parallel_microbatch_size == 0
        assert job.training.global_batch_size == cfg.mbs * cfg.dp * cfg.num_microbatches
        assert job.activation_checkpoint.mode == cfg.recompute.value
        checked += 1
    assert checked >= 20


def test_accelerate_config_loads_and_launches(tmp_path, monkeypatch):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    path = tmp_path / "accelerate.yaml"
    checked = 0
    for _, cfg, result in exported("accelerate"):
        path.write_text(result.content)
        cluster = ClusterConfig.from_yaml_file(str(path))
        assert cluster.num_processes == cfg.num_gpus
        args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
        _validate_launch_command(args)
        checked += 1
        if cfg.precision.value == "fp8":
            continue  # launching fp8 needs torchao or Transformer Engine installed
        env = prepare_multi_gpu_env(args)
        if cfg.zero >= 1:
            with monkeypatch.context() as m:
                for key, value in env.items():
                    m.setenv(key, value)
                plugin = FullyShardedDataParallelPlugin()
            assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is (cfg.zero == 3)
            assert plugin.activation_checkpointing is (cfg.recompute.value == "full")
            assert (type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy") == cfg.optimizer_offload
    assert checked >= 20


def _megatron_config(flags: dict, te_available: bool):
    import torch
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    def num(key, default=None):
        return int(flags[key]) if key in flags else default

    freq = flags.get("--moe-layer-freq")
    kwargs = dict(
        num_layers=num("--num-layers"), hidden_size=num("--hidden-size"),
        num_attention_heads=num("--num-attention-heads"), ffn_hidden_size=num("--ffn-hidden-size"),
        kv_channels=num("--kv-channels"),
        num_query_groups=num("--num-query-groups") if "--group-query-attention" in flags else None,
        tensor_model_parallel_size=num("--tensor-model-parallel-size"),
        pipeline_model_parallel_size=num("--pipeline-model-parallel-size"),
        context_parallel_size=num("--context-parallel-size"),
        expert_model_parallel_size=num("--expert-model-parallel-size"),
        sequence_parallel="--sequence-parallel" in flags,
        virtual_pipeline_model_parallel_size=num("--num-virtual-stages-per-pipeline-rank"),
        num_layers_in_first_pipeline_stage=num("--decoder-first-pipeline-num-layers"),
        num_layers_in_last_pipeline_stage=num("--decoder-last-pipeline-num-layers"),
        pipeline_model_parallel_layout=flags.get("--pipeline-model-parallel-layout"),
        pipeline_dtype=torch.bfloat16, params_dtype=torch.bfloat16, bf16=True,
        gated_linear_unit="--swiglu" in flags, normalization=flags.get("--normalization", "LayerNorm"),
        add_bias_linear="--disable-bias-linear" not in flags,
        add_qkv_bias="--add-qkv-bias" in flags or "--disable-bias-linear" not in flags,
        qk_layernorm="--qk-layernorm" in flags,
        num_moe_experts=num("--num-experts"), moe_router_topk=num("--moe-router-topk", 2),
        moe_ffn_hidden_size=num("--moe-ffn-hidden-size"),
        moe_shared_expert_intermediate_size=num("--moe-shared-expert-intermediate-size"),
        moe_layer_freq=eval(freq) if freq else 1,  # noqa: S307 - Megatron's moe_freq_type does the same
        moe_token_dispatcher_type=flags.get("--moe-token-dispatcher-type", "allgather"),
        mtp_num_layers=num("--mtp-num-layers"), recompute_granularity=flags.get("--recompute-granularity"),
        recompute_method=flags.get("--recompute-method"), recompute_num_layers=num("--recompute-num-layers"),
        fp8=flags.get("--fp8-format") if te_available else None,
    )
    if "--multi-latent-attention" in flags:
        kwargs.update(q_lora_rank=num("--q-lora-rank"), kv_lora_rank=num("--kv-lora-rank"),
                      qk_head_dim=num("--qk-head-dim"), qk_pos_emb_head_dim=num("--qk-pos-emb-head-dim"),
                      v_head_dim=num("--v-head-dim"))
        return MLATransformerConfig(**kwargs)
    return TransformerConfig(**kwargs)


def test_megatron_core_accepts_the_layout():
    pytest.importorskip("megatron.core")
    from importlib.util import find_spec

    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    te_available = find_spec("transformer_engine") is not None
    checked = 0
    for _, cfg, result in exported("megatron"):
        flags = parse_args_text(result.content)
        config = _megatron_config(flags, te_available)
        assert config.num_layers == int(flags["--num-layers"])
        dp = cfg.num_gpus // (cfg.tp * cfg.pp * cfg.cp)
        calculator = ConstantNumMicroBatchesCalculator(int(flags["--global-batch-size"]),
                                                       int(flags["--micro-batch-size"]), dp, False, 0)
        assert calculator.get() == cfg.num_microbatches
        if cfg.vpp > 1:
            assert config.virtual_pipeline_model_parallel_size == cfg.vpp
        checked += 1
    assert checked >= 20
