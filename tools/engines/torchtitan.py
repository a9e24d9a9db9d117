"""torchtitan job TOML (torchtitan 0.2.x: `torchrun ... -m torchtitan.train --job.config_file FILE`).

Checked against torchtitan 0.2.2's own ConfigManager, which rejects unknown keys, and its ParallelDims
(tests/test_export_engines.py). torchtitan 0.3 replaced TOML job files with Python config registries
and `--section.key value` overrides; the notes list the [parallelism] and [training] keys as 0.3
overrides (their names are unchanged there).

Mapping decisions:
- ZeRO: torchtitan shards with FSDP2 over data_parallel_shard_degree. zero=3 reshards weights after
  forward ("always"); zero=1/2 keep them gathered between forward and backward ("never", which is
  ZeRO-2: FSDP2 has no ZeRO-1, and ZeRO-2 needs no more memory); zero=0 is DDP
  (data_parallel_replicate_degree). Hybrid sharding (dp_shard < dp) is HSDP: data_parallel_shard_degree
  dp_shard and data_parallel_replicate_degree dp/dp_shard (torchtitan's ParallelDims, dp_replicate x
  dp_shard = dp).
- Batch: torchtitan's gradient-accumulation steps are global / (local x dp). With pp > 1 the
  local batch is split into pipeline micro-batches of pipeline_parallel_microbatch_size, so
  local = mbs x m and there is one accumulation step.
- Layers: module_fqns_per_model_part places trainplan's layers per stage (stages.layers_per_stage),
  because torchtitan's own default split (embedding and head weighted as a layer) differs.
- Kernels: [compile] enable (components model and loss) when the layout is scored with fused kernels or
  launch=compile: torchtitan then compiles each TransformerBlock (its 405B preset sets compile = true).
- Schedules are torch.distributed.pipelining names: 1F1B, GPipe, Interleaved1F1B, and the V-shaped
  ZBVZeroBubble and DualPipeV for zb-h1 and dualpipe (torch has no single-chunk ZB-H1 and no
  two-copy DualPipe; both V schedules place two stages on each rank).
"""

from __future__ import annotations

import json

from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.config.stages import chunks_per_rank, model_layers_per_stage, v_shaped
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Attention, Launch, Precision, Recompute, Schedule
from trainplan.tools.engines.common import ExportError, ExportResult, batch_of, comment_block, fusion_note, header, slug
from trainplan.tools.engines.support import param_storage_note, refuse

# trainplan catalog name -> (torchtitan model name, flavor), for the flavors torchtitan ships.
FLAVORS = {
    "llama3-8b": ("llama3", "8B"),
    "llama3-70b": ("llama3", "70B"),
    "llama3-405b": ("llama3", "405B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
    "qwen3-8b": ("qwen3", "8B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
}
# HF model_type -> torchtitan model name, for models without a shipped flavor.
MODEL_NAMES = {"llama": "llama3", "deepseek_v3": "deepseek_v3", "deepseek_v2": "deepseek_v3",
               "qwen3": "qwen3", "qwen3_moe": "qwen3", "gpt_oss": "gpt_oss", "llama4": "llama4"}
# Keys left out of the torchtitan 0.3 override line: gone from its ParallelismConfig, or a nested list
# that does not fit on a command line (0.3 then uses its default layer split).
V03_MISSING = {"expert_tensor_parallel_degree", "module_fqns_per_model_part"}
SCHEDULES = {
    Schedule.one_f_one_b: "1F1B",
    Schedule.gpipe: "GPipe",
    Schedule.interleaved: "Interleaved1F1B",
    Schedule.zb_h1: "ZBVZeroBubble",
    Schedule.dualpipe: "DualPipeV",
}


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def to_toml(sections: dict[str, dict]) -> str:
    """A flat TOML writer for section -> {key: scalar or list}; dotted section names are TOML tables."""
    out = []
    for name, table in sections.items():
        out.append(f"[{name}]")
        out += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
        out.append("")
    return "\n".join(out)


def model_parts(model: ModelSpec, cfg: ParallelConfig, notes: list[str] | None = None) -> list[list[str]]:
    """module_fqns_per_model_part in stage order, following trainplan's layers per rank (stages.model_layers_per_stage).

    Each rank's layers split evenly over its chunks: vpp chunks at stages p + v*pp for looped schedules,
    two chunks at stages p and 2*pp-1-p for the V schedules. torchtitan builds every stage from its part, so a
    stage the split leaves empty (a rank with fewer layers than chunks, such as the rank the MTP modules and head
    were balanced against) takes one layer from the fullest stage, and `notes` says which ranks changed. Module
    names are those of torchtitan's LLMs.
    """
    pp = cfg.pp
    code = SCHEDULE_CODES[cfg.schedule]
    v_shape, per_rank = bool(v_shaped(code)), int(chunks_per_rank(code, cfg.vpp))
    sizes = [0] * (pp * per_rank)
    rank_of = [0] * (pp * per_rank)
    for p, n in enumerate(model_layers_per_stage(model, pp)):
        stage_ids = (p, 2 * pp - 1 - p) if v_shape else tuple(p + c * pp for c in range(per_rank))
        base, extra = divmod(n, per_rank)
        for c, stage in enumerate(stage_ids):
            sizes[stage] = base + (1 if c < extra else 0)
            rank_of[stage] = p
    while 0 in sizes and sum(sizes) >= len(sizes):
        empty, fullest = sizes.index(0), max(range(len(sizes)), key=lambda i: sizes[i])
        sizes[empty], sizes[fullest] = 1, sizes[fullest] - 1
        if notes is not None:
            notes.append(f"pipeline stage {empty} (rank {rank_of[empty]}) had no layer in the plan's split; torchtitan "
                         f"needs one per stage, so it takes one from stage {fullest} (rank {rank_of[fullest]}): those "
                         "ranks hold one layer more and one fewer than the estimate assumed")
    parts, layer = [], 0
    for stage, size in enumerate(sizes):
        part = [f"layers.{i}" for i in range(layer, layer + size)]
        layer += size
        if stage == 0:
            part.insert(0, "tok_embeddings")
        if stage == len(sizes) - 1:
            part += ["norm", "output"]
        if not part:
            raise ExportError(f"pipeline stage {stage} of {len(sizes)} gets no layer ({model.num_layers} layers,"
                              f" pp={pp}, {per_rank} stages per rank): use a smaller --pp or --vpp")
        parts.append(part)
    return parts


def export_torchtitan(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str) -> ExportResult:
    notes: list[str] = []
    refuse("torchtitan", model, cfg)   # support.REFUSALS: what torchtitan cannot run
    batch = batch_of(cfg)
    name, flavor = FLAVORS.get(model.name, (MODEL_NAMES.get(model.model_type, model.model_type), model.name))
    model_table: dict = {"name": name, "flavor": flavor}
    if model.name not in FLAVORS:
        notes.append(f"torchtitan ships no flavor for {model.name}: register a '{flavor}' flavor in"
                     f" torchtitan.models.{name} with this architecture, or change [model]")
    notes.append("set [model] hf_assets_path to the folder with the tokenizer, and [training] dataset")

    parallelism: dict = {}
    if cfg.zero == 0:
        parallelism.update(data_parallel_replicate_degree=cfg.dp, data_parallel_shard_degree=1)
        if cfg.cp > 1:
            notes.append("torchtitan applies FSDP over the context-parallel ranks even with zero=0")
    else:
        parallelism.update(data_parallel_replicate_degree=cfg.dp_replicas, data_parallel_shard_degree=cfg.dp_shard_size,
                           fsdp_reshard_after_forward="always" if cfg.zero == 3 else "never")
        if cfg.zero == 1:
            notes.append("FSDP2 has no ZeRO-1: zero=1 is written as ZeRO-2 (fsdp_reshard_after_forward=never),"
                         " which also shards gradients and needs no more memory")
    parallelism.update(tensor_parallel_degree=cfg.tp, pipeline_parallel_degree=cfg.pp,
                       context_parallel_degree=cfg.cp, expert_parallel_degree=cfg.ep)
    if cfg.ep > 1:
        parallelism["expert_tensor_parallel_degree"] = cfg.tp
    if cfg.tp > 1 and not cfg.sequence_parallel:
        notes.append("torchtitan always uses sequence parallelism with tensor parallelism")

    training: dict = {"seq_len": cfg.seq}
    if cfg.pp > 1:
        parallelism["pipeline_parallel_schedule"] = SCHEDULES[cfg.schedule]
        parallelism["pipeline_parallel_microbatch_size"] = batch.micro
        parallelism["module_fqns_per_model_part"] = model_parts(model, cfg, notes)
        training.update(local_batch_size=batch.micro * batch.accumulation, global_batch_size=batch.global_)
        notes.append(f"with pp={cfg.pp} each step splits local_batch_size={batch.micro * batch.accumulation} into"
                     f" {batch.accumulation} pipeline micro-batches of {batch.micro}; {batch.identity()}")
        if cfg.schedule is Schedule.zb_h1:
            notes.append("zb-h1 is written as ZBVZeroBubble (ZB-V from the same paper: two stages per rank,"
                         " near-zero bubble); torch has no single-chunk ZB-H1, so step time differs from trainplan's")
        if cfg.schedule is Schedule.dualpipe:
            notes.append("dualpipe is written as DualPipeV (the V-shaped DualPipe: two stages per rank, one"
                         " copy of the weights, where DualPipe keeps two)")
        notes.append("module_fqns_per_model_part places trainplan's layers per stage, using the module names"
                     " of torchtitan's LLMs (tok_embeddings, layers.N, norm, output)")
    else:
        training.update(local_batch_size=batch.micro, global_batch_size=batch.global_)
        if cfg.schedule is not Schedule.one_f_one_b:
            notes.append(f"schedule={cfg.schedule.value} has no effect without pipeline parallelism")
    if cfg.optimizer_offload:
        training["enable_cpu_offload"] = True
        notes.append("torchtitan's CPU offload is FSDP's: parameters and gradients move to the CPU too")
    # torch.compile per TransformerBlock (apply_compile) fuses the norms, rotary and SwiGLU and issues the
    # generated kernels: what fused_kernels and launch=compile score (tools/config/engines.py).
    compiled = cfg.fused_kernels or cfg.launch is Launch.compile
    if (note := fusion_note(cfg, fused_by_default=False, compiled=compiled)):
        notes.append(note)
    if cfg.attention is Attention.eager:
        notes.append("attention=eager has no torchtitan setting: its models call scaled_dot_product_attention,"
                     " whose flash/cuDNN backends skip masked blocks; step time will be shorter than trainplan's")
    if (note := param_storage_note("torchtitan", cfg)):
        notes.append(note)
    if cfg.bf16_grads:
        notes.append("torchtitan reduces gradients in fp32 (mixed_precision_reduce); bf16 gradients are not a setting")

    checkpoint: dict = {"mode": cfg.recompute.value}
    if cfg.recompute is Recompute.selective:
        checkpoint["selective_ac_option"] = "op"
        notes.append("selective recompute is torchtitan's op-level policy (keeps matmul and attention outputs,"
                     " recomputes the rest), not exactly Megatron's attention-core recompute")

    sections: dict[str, dict] = {"model": model_table, "parallelism": parallelism, "training": training,
                                 "activation_checkpoint": checkpoint,
                                 "compile": {"enable": compiled, "components": ["model", "loss"]}}
    if cfg.precision is Precision.fp8:
        model_table["converters"] = ["quantize.linear.float8"]
        sections["quantize.linear.float8"] = {
            "recipe_name": "tensorwise",
            "enable_fsdp_float8_all_gather": cfg.zero >= 1,
            "precompute_float8_dynamic_scale_for_fsdp": cfg.zero >= 1,
        }
        notes.append("fp8 is torchao float8 on nn.Linear with the tensorwise recipe; MoE grouped GEMMs stay bf16")
    if cfg.bf16_moments or cfg.fp8_activations:
        notes.append("the plan keeps DeepSeek-V3's low-precision storage (bf16 Adam moments, FP8/E5M6 activations, "
                     "§3.3.3), which torchtitan has no setting for: its optimizer states and activations take more "
                     "memory than planned")

    overrides = " ".join(f"--{section}.{key} {_toml_value(value)}" for section in ("parallelism", "training")
                         for key, value in sections[section].items() if key not in V03_MISSING)
    notes.append("torchtitan >= 0.3 reads no TOML: pick --module/--config from its registry and pass"
                 f" {overrides} (names as in 0.3.0's ParallelismConfig/TrainingConfig; activation checkpointing,"
                 " fp8 and the layer split are chosen in the registry there)")
    lines = header("torchtitan", model, cfg, model_ref)
    lines.append("usage: torchrun --nproc-per-node ... -m torchtitan.train --job.config_file this-file")
    return ExportResult(engine="torchtitan", filename_suggestion=f"{slug(model_ref)}-torchtitan.toml",
                        content=comment_block(lines) + "\n" + to_toml(sections), format="toml", notes=notes)
