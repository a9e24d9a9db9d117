"""`trainplan export`: each engine's file parses back, closes the batch identity, and uses only real names.

Megatron-LM's argument parser is not in the megatron-core wheel, so the accepted flags below were read
from its source and are checked here with argparse (names, arity and choices):
    NVIDIA/Megatron-LM, megatron/training/arguments.py, commit 000c4ac24f61159c138b0975def722c65245983c
    (groups: _add_distributed_args, _add_training_args, _add_network_size_args, _add_data_args,
    _add_mixed_precision_args, _add_transformer_engine_args, _add_moe_args, _add_mla_args,
    _add_checkpointing_args, _add_experimental_args); --rotary-base (type=int), --use-rope-scaling,
    --rope-scaling-factor, --norm-epsilon, --vocab-size and --recompute-modules (nargs='*') were read from
    a 2026 copy of the same file.
Megatron-FSDP's required flags: NVIDIA/Megatron-LM docs/discussions/megatron-fsdp-user-guide/
megatron-fsdp-user-guide.md (commit 1775482cc9dab49e38325f03c915767e3a90ca58).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shlex
import sys
import tomllib

from cli_inprocess import run_cli as in_process
import pytest
import yaml

from trainplan.tools.core.errors import InputError
from trainplan.tools.engines import Engine, ExportError, export, parse_args_text
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.config.stages import layers_per_stage, model_layers_per_stage
from trainplan.tools.hardware.specs import ModelSpec

# flag -> None for a switch (store_true/store_false), () for any value, or the tuple of its choices.
MEGATRON_FLAGS: dict[str, tuple | None] = {
    # _add_distributed_args
    "--tensor-model-parallel-size": (), "--pipeline-model-parallel-size": (),
    "--decoder-first-pipeline-num-layers": (), "--decoder-last-pipeline-num-layers": (),
    "--pipeline-model-parallel-layout": (), "--num-layers-per-virtual-pipeline-stage": (),
    "--num-virtual-stages-per-pipeline-rank": (), "--context-parallel-size": (),
    "--use-distributed-optimizer": None, "--use-megatron-fsdp": None, "--use-torch-fsdp2": None,
    "--data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads", "optim_grads_params"),
    "--overlap-grad-reduce": None, "--overlap-param-gather": None, "--num-distributed-optimizer-instances": (),
    # _add_moe_args
    "--expert-model-parallel-size": (), "--expert-tensor-parallel-size": (), "--num-experts": (),
    "--moe-router-topk": (), "--moe-ffn-hidden-size": (), "--moe-shared-expert-intermediate-size": (),
    "--moe-layer-freq": (), "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "--moe-enable-deepep": None,
    "--moe-grouped-gemm": None, "--moe-expert-capacity-factor": (), "--moe-pad-expert-input-to-capacity": None,
    "--moe-router-force-load-balancing": None,
    # _add_training_args
    "--sequence-parallel": None, "--micro-batch-size": (), "--global-batch-size": (),
    "--recompute-granularity": ("full", "selective"), "--recompute-method": ("uniform", "block"),
    "--recompute-num-layers": (), "--recompute-modules": ("*",), "--no-gradient-accumulation-fusion": None, "--disable-bias-linear": None,
    "--add-qkv-bias": None, "--optimizer-cpu-offload": None,
    # _add_regularization_args; _add_training_args (AttnBackend names)
    "--attention-dropout": (), "--attention-backend": ("flash", "fused", "unfused", "local", "auto"),
    # _add_network_size_args
    "--num-layers": (), "--hidden-size": (), "--ffn-hidden-size": (), "--num-attention-heads": (),
    "--kv-channels": (), "--group-query-attention": None, "--num-query-groups": (),
    "--max-position-embeddings": (), "--rotary-base": (), "--use-rope-scaling": None, "--rope-scaling-factor": (),
    "--norm-epsilon": (),
    "--position-embedding-type": ("learned_absolute", "rope", "mrope", "relative", "none"),
    "--normalization": ("LayerNorm", "RMSNorm"), "--swiglu": None, "--squared-relu": None,
    "--untie-embeddings-and-output-weights": None, "--multi-latent-attention": None, "--mtp-num-layers": (),
    # _add_vision_args (qk layernorm lives there)
    "--qk-layernorm": None,
    # _add_mla_args
    "--q-lora-rank": (), "--kv-lora-rank": (), "--qk-head-dim": (), "--qk-pos-emb-head-dim": (),
    "--v-head-dim": (),
    # _add_data_args (--vocab-size: "Size of vocab before EOD or padding")
    "--seq-length": (), "--vocab-size": (),
    # _add_mixed_precision_args / _add_transformer_engine_args
    "--bf16": None, "--grad-reduce-in-bf16": None, "--tp-comm-overlap": None, "--fp8-format": ("e4m3", "hybrid"),
    "--fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    # _add_checkpointing_args
    "--ckpt-format": ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"),
    # _add_experimental_args
    "--use-precision-aware-optimizer": None,
}
# torch.distributed.pipelining.schedules.get_schedule_class names (torch 2.13).
TORCH_SCHEDULES = {"1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble",
                   "PipelineScheduleSingle", "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV"}
BATCH_LINE = re.compile(r"global batch (\d+) = micro-batch (\d+) x data-parallel (\d+) x accumulation (\d+)")


def megatron_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for flag, choices in MEGATRON_FLAGS.items():
        if choices is None:
            parser.add_argument(flag, action="store_true")
        elif choices == ("*",):       # nargs='*' (--recompute-modules)
            parser.add_argument(flag, nargs="*")
        else:
            parser.add_argument(flag, choices=choices or None)
    return parser


def dense(num_layers: int = 32, **kw) -> ModelSpec:
    base = dict(name="dense-test", model_type="llama", num_layers=num_layers, hidden_size=4096,
                num_attention_heads=32, num_kv_heads=8, head_dim=128, vocab_size=32000, max_seq_len=4096,
                intermediate_size=11008)
    return ModelSpec(**{**base, **kw})


def moe(num_layers: int = 48) -> ModelSpec:
    return dense(num_layers, name="moe-test", model_type="qwen2_moe", num_kv_heads=4, num_experts=64,
                 experts_per_token=8, moe_intermediate_size=1408, num_shared_experts=2,
                 shared_expert_intermediate_size=1408, moe_layers=tuple(range(1, num_layers)))


def mla(num_layers: int = 27) -> ModelSpec:
    return dense(num_layers, name="mla-test", model_type="deepseek_v3", hidden_size=2048, num_attention_heads=16,
                 num_kv_heads=16, head_dim=192, attention_type="mla", q_lora_rank=None, kv_lora_rank=512,
                 qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, intermediate_size=10944,
                 num_experts=64, experts_per_token=6, moe_intermediate_size=1408, num_shared_experts=2,
                 shared_expert_intermediate_size=1408, moe_layers=tuple(range(1, num_layers)), num_mtp_layers=1)


def gpt(num_layers: int = 24) -> ModelSpec:
    return dense(num_layers, name="gpt-test", model_type="gpt2", hidden_size=2048, num_attention_heads=16,
                 num_kv_heads=16, head_dim=128, intermediate_size=8192, gated_mlp=False, activation="gelu_new",
                 norm_type="layernorm", norm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True,
                 tie_word_embeddings=True, learned_position_embeddings=2048, max_seq_len=2048)


MODELS = [dense(32), dense(30), dense(61), dense(126, num_attention_heads=64), moe(), mla(), gpt()]


def random_layouts(count: int, seed: int = 20240531):
    """Seeded random layouts that resolve_config accepts, over every knob."""
    rng = random.Random(seed)
    found = []
    while len(found) < count:
        model = rng.choice(MODELS)
        gpus = rng.choice([8, 16, 24, 32, 64, 128, 256])
        pure_dp = rng.random() < 0.2  # the only layouts every engine, accelerate included, can write
        pp = 1 if pure_dp else rng.choice([1, 1, 2, 3, 4, 8])
        vpp = rng.choice([1, 1, 2, 3]) if pp > 1 else 1
        kwargs = dict(
            tp=1 if pure_dp else rng.choice([1, 2, 4, 8]), pp=pp, cp=1 if pure_dp else rng.choice([1, 1, 2, 4]),
            vpp=vpp, ep=rng.choice([1, 2, 4, 8]) if model.is_moe and not pure_dp else 1, zero=rng.randint(0, 3), mbs=rng.choice([1, 2, 4]),
            seq=rng.choice([2048, 4096]), recompute=rng.choice(["none", "selective", "full"]),
            schedule="interleaved" if vpp > 1 else rng.choice(["1f1b", "1f1b", "gpipe", "zb-h1", "dualpipe"]),
            precision=rng.choice(["bf16", "fp8"]), optimizer_offload=rng.random() < 0.15,
            bf16_grads=rng.random() < 0.15,
        )
        try:
            dp = gpus // (kwargs["tp"] * pp * kwargs["cp"])
            gbs = rng.choice([None, dp * kwargs["mbs"] * rng.choice([1, 2, 4, 8, 16, 32])])
            cfg = resolve_config(model, gpus, gbs=gbs, **kwargs)
        except (InputError, ZeroDivisionError):
            continue
        found.append((model, cfg))
    return found


LAYOUTS = random_layouts(250)


def check_header(content: str, cfg) -> None:
    match = BATCH_LINE.search(content)
    assert match, "every args/TOML/YAML export states the batch identity"
    g, m, d, a = map(int, match.groups())
    assert g == m * d * a and m == cfg.mbs and d == cfg.dp


def check_megatron(text: str, model: ModelSpec, cfg) -> None:
    flags = parse_args_text(text)
    unknown = set(flags) - set(MEGATRON_FLAGS)
    assert not unknown, f"flags not in Megatron-LM's parser: {unknown}"
    tokens = shlex.split(text.split("MEGATRON_ARGS=(", 1)[1].rsplit(")", 1)[0], comments=True)
    args = megatron_parser().parse_args(tokens)  # raises on a wrong arity or a value outside the choices
    tp, pp, cp = int(args.tensor_model_parallel_size), int(args.pipeline_model_parallel_size), int(args.context_parallel_size)
    assert (tp, pp, cp, int(args.expert_model_parallel_size)) == (cfg.tp, cfg.pp, cfg.cp, cfg.ep)
    dp = cfg.num_gpus // (tp * pp * cp)  # Megatron: data_parallel_size = world_size // (tp*pp*cp)
    gbs, mbs = int(args.global_batch_size), int(args.micro_batch_size)
    assert gbs % (mbs * dp) == 0 and gbs == cfg.mbs * cfg.dp * cfg.num_microbatches
    assert int(args.num_layers) == model.num_layers
    if args.pipeline_model_parallel_layout:
        stages = args.pipeline_model_parallel_layout.split("|")
        assert len(stages) == pp * cfg.vpp and stages[0].startswith("E") and stages[-1].endswith("L")
        assert sum(s.count("t") for s in stages) == model.num_layers
        assert sum(s.count("m") for s in stages) == model.num_mtp_layers
        assert args.num_virtual_stages_per_pipeline_rank is None  # the layout sets vpp itself
    elif args.decoder_first_pipeline_num_layers:
        first, last = int(args.decoder_first_pipeline_num_layers), int(args.decoder_last_pipeline_num_layers)
        middle = model.num_layers - first - last
        assert (pp == 2 and middle == 0) or middle % (pp - 2) == 0  # Megatron-Core's uneven-PP rule
        assert all(n % cfg.vpp == 0 for n in (first, last, middle // max(pp - 2, 1)))
    else:
        assert model.num_layers % pp == 0
    if cfg.vpp > 1 and not args.pipeline_model_parallel_layout:
        assert int(args.num_virtual_stages_per_pipeline_rank) == cfg.vpp
    if args.moe_layer_freq:  # Megatron's _eval_pattern: only digits , [ ] ( ) + * are allowed
        assert not re.search(r"[^,\d\[\]\(\)\+\*]", args.moe_layer_freq)
        pattern = eval(args.moe_layer_freq)  # noqa: S307 - the same eval Megatron applies
        assert [i for i, f in enumerate(pattern) if f] == list(model.moe_layers)


def check_deepspeed(text: str, cfg) -> None:
    ds = json.loads(text)
    world_dp = cfg.num_gpus // (cfg.tp * cfg.pp)  # DeepSpeed's data-parallel world (cp is refused)
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * world_dp
    assert ds["train_micro_batch_size_per_gpu"] == cfg.mbs and ds["zero_optimization"]["stage"] == cfg.zero


def check_torchtitan(text: str, cfg) -> None:
    job = tomllib.loads(text)
    par, train = job["parallelism"], job["training"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    degrees = dp * par["context_parallel_degree"] * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]
    assert degrees == cfg.num_gpus and dp == cfg.dp  # torchtitan's ParallelDims rule
    local, glob = train["local_batch_size"], train["global_batch_size"]
    assert glob % (local * dp) == 0  # torchtitan's trainer asserts this
    accumulation = glob // (local * dp)
    micro = par.get("pipeline_parallel_microbatch_size", local) if cfg.pp > 1 else local
    assert local % micro == 0
    assert glob == micro * dp * (local // micro) * accumulation == cfg.mbs * cfg.dp * cfg.num_microbatches
    if cfg.pp > 1:
        assert par["pipeline_parallel_schedule"] in TORCH_SCHEDULES
    if cfg.ep > 1:  # efsdp = dp_shard * cp * tp / (etp * ep) must be whole
        etp = par["expert_tensor_parallel_degree"]
        assert (par["data_parallel_shard_degree"] * par["context_parallel_degree"] * cfg.tp) % (etp * cfg.ep) == 0
    assert job["activation_checkpoint"]["mode"] == cfg.recompute.value
    if cfg.pp > 1:
        parts = par["module_fqns_per_model_part"]
        stages = cfg.pp * (2 if cfg.schedule.value in ("zb-h1", "dualpipe") else cfg.vpp)
        layers = [name for part in parts for name in part if name.startswith("layers.")]
        assert len(parts) == stages and layers == [f"layers.{i}" for i in range(len(layers))]


def check_axolotl(text: str, cfg) -> None:
    config = yaml.safe_load(text)
    # Axolotl's batch: micro_batch_size x world size (one process per GPU, all data-parallel) x accumulation
    global_batch = cfg.gbs if cfg.gbs is not None else cfg.mbs * cfg.dp
    assert config["micro_batch_size"] * cfg.num_gpus * config["gradient_accumulation_steps"] == global_batch
    assert config["sequence_len"] == cfg.seq and config["gradient_checkpointing"] is (cfg.recompute.value == "full")
    assert ("deepspeed" in config) == (cfg.zero >= 1)


def check_llamafactory(text: str, cfg) -> None:
    config = yaml.safe_load(text)
    global_batch = cfg.gbs if cfg.gbs is not None else cfg.mbs * cfg.dp
    assert config["per_device_train_batch_size"] * cfg.num_gpus * config["gradient_accumulation_steps"] == global_batch
    assert config["cutoff_len"] == cfg.seq and ("deepspeed" in config) == (cfg.zero >= 1)


def check_trl(text: str, cfg) -> None:
    sft = yaml.safe_load(text)["sft_config"]
    global_batch = cfg.gbs if cfg.gbs is not None else cfg.mbs * cfg.dp
    assert sft["per_device_train_batch_size"] * cfg.num_gpus * sft["gradient_accumulation_steps"] == global_batch
    assert sft["max_length"] == cfg.seq and ("deepspeed" in sft) == (cfg.zero >= 1)


def check_accelerate(text: str, cfg) -> None:
    config = yaml.safe_load(text)
    assert config["num_processes"] == cfg.num_gpus
    assert config["distributed_type"] == ("FSDP" if cfg.zero else "MULTI_GPU")
    if cfg.zero:
        assert config["fsdp_config"]["fsdp_reshard_after_forward"] is (cfg.zero == 3)


@pytest.mark.parametrize("engine", [e.value for e in Engine])
def test_random_layouts_parse_back_and_close_the_batch(engine):
    written = 0
    for model, cfg in LAYOUTS:
        try:
            result = export(engine, model, cfg, model_ref=model.name)
        except ExportError as exc:
            assert isinstance(exc, InputError) and "\n" not in str(exc) and str(exc)
            continue
        written += 1
        assert result.engine == engine and result.filename_suggestion
        if result.format != "json":
            check_header(result.content, cfg)
        {"megatron": lambda: check_megatron(result.content, model, cfg),
         "deepspeed": lambda: check_deepspeed(result.content, cfg),
         "torchtitan": lambda: check_torchtitan(result.content, cfg),
         "accelerate": lambda: check_accelerate(result.content, cfg),
         "axolotl": lambda: check_axolotl(result.content, cfg),
         "llamafactory": lambda: check_llamafactory(result.content, cfg),
         "trl": lambda: check_trl(result.content, cfg)}[engine]()
    assert written >= 20, f"only {written} of {len(LAYOUTS)} layouts exported for {engine}"


@pytest.mark.parametrize("schedule", ["zb-h1", "dualpipe", "gpipe"])
def test_megatron_refuses_schedules_it_does_not_have(schedule):
    cfg = resolve_config(dense(32), 64, tp=4, pp=4, gbs=64, schedule=schedule)
    with pytest.raises(ExportError, match=f"schedule={schedule} is not a Megatron-LM schedule"):
        export("megatron", dense(32), cfg, model_ref="x")


def test_megatron_zero_stages():
    model = dense(32)
    flags = lambda cfg: parse_args_text(export("megatron", model, cfg, model_ref="x").content)  # noqa: E731
    assert "--use-distributed-optimizer" not in flags(resolve_config(model, 16, tp=2, zero=0))
    assert "--use-megatron-fsdp" not in flags(resolve_config(model, 16, tp=2, zero=1))
    z3 = flags(resolve_config(model, 16, tp=2, zero=3))
    assert z3["--data-parallel-sharding-strategy"] == "optim_grads_params" and z3["--ckpt-format"] == "fsdp_dtensor"
    assert {"--use-megatron-fsdp", "--no-gradient-accumulation-fusion", "--use-distributed-optimizer"} <= set(z3)
    assert flags(resolve_config(model, 16, tp=2, zero=2))["--data-parallel-sharding-strategy"] == "optim_grads"
    with pytest.raises(ExportError, match="Megatron-FSDP"):
        export("megatron", model, resolve_config(model, 16, pp=2, zero=3), model_ref="x")


def test_megatron_llama3_405b_uneven_stages():
    """126 layers on PP16: first and last stage one layer fewer (Llama 3 paper §3.3.2)."""
    model = dense(126, num_attention_heads=128, hidden_size=16384, intermediate_size=53248)
    cfg = resolve_config(model, 16384, tp=8, pp=16, gbs=2048, seq=8192)
    flags = parse_args_text(export("megatron", model, cfg, model_ref="llama3-405b").content)
    assert flags["--decoder-first-pipeline-num-layers"] == "7" and flags["--decoder-last-pipeline-num-layers"] == "7"
    assert layers_per_stage(126, 16)[0] == 7


def test_megatron_mla_moe_flags():
    model = mla()
    cfg = resolve_config(model, 64, tp=2, pp=4, ep=8, gbs=256, precision="fp8", recompute="full")
    flags = parse_args_text(export("megatron", model, cfg, model_ref="ds").content)
    assert "--multi-latent-attention" in flags and "--q-lora-rank" not in flags
    assert flags["--qk-head-dim"] == "128" and flags["--qk-pos-emb-head-dim"] == "64" and flags["--v-head-dim"] == "128"
    assert flags["--moe-layer-freq"] == "([0]*1+[1]*26)" and flags["--moe-shared-expert-intermediate-size"] == "2816"
    assert flags["--fp8-format"] == "hybrid" and flags["--recompute-method"] == "uniform"
    assert flags["--mtp-num-layers"] == "1"
    # 27 layers on PP4 balanced against the head and MTP on the last stage: unequal middle stages,
    # so the export spells the split out as a pipeline layout.
    counts = model_layers_per_stage(model, 4)
    layout = flags["--pipeline-model-parallel-layout"].strip("'\"")
    assert [stage.count("t") for stage in layout.split("|")] == counts and sum(counts) == 27
    layout = parse_args_text(export("megatron", model, resolve_config(model, 128, tp=2, pp=8, ep=8, gbs=256),
                                    model_ref="ds").content)["--pipeline-model-parallel-layout"]
    assert layout.split("|")[-1].endswith("mL") and layout.count("t") == 27


def test_deepspeed_refusals_and_mapping():
    model = dense(32)
    for kwargs, message in [(dict(cp=2), "cp=2"), (dict(precision="fp8"), "fp8"),
                            (dict(pp=2, zero=2), "ZeRO stage 0 or 1"), (dict(pp=2, schedule="gpipe"), "1F1B"),
                            (dict(tp=2, zero=3), "AutoTP training works with ZeRO stage 0, 1 or 2"),
                            (dict(tp=2, method="qlora"), "tp=2 pp=1 with LoRA/QLoRA adapters"),
                            (dict(pp=2, method="lora"), "tp=1 pp=2 with LoRA/QLoRA adapters")]:
        with pytest.raises(ExportError, match=message):
            export("deepspeed", model, resolve_config(model, 16, **kwargs), model_ref="x")
    ds = json.loads(export("deepspeed", model, resolve_config(model, 16, tp=2, zero=2, gbs=64,
                                                                optimizer_offload=True), model_ref="x").content)
    assert ds["tensor_parallel"] == {"autotp_size": 2} and ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["train_batch_size"] == 64 and ds["gradient_accumulation_steps"] == 8


def test_torchtitan_schedules_and_zero():
    model = dense(32)
    for schedule, name in [("1f1b", "1F1B"), ("gpipe", "GPipe"), ("zb-h1", "ZBVZeroBubble"), ("dualpipe", "DualPipeV")]:
        job = tomllib.loads(export("torchtitan", model, resolve_config(model, 16, pp=4, gbs=64, schedule=schedule),
                                   model_ref="x").content)
        assert job["parallelism"]["pipeline_parallel_schedule"] == name
    job = tomllib.loads(export("torchtitan", model, resolve_config(model, 32, pp=4, vpp=4, gbs=64),
                               model_ref="x").content)
    parts = job["parallelism"]["module_fqns_per_model_part"]
    assert len(parts) == 16 and parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[-1][-2:] == ["norm", "output"]
    assert [len(p) for p in parts[0::4]] == [3, 2, 2, 2]  # rank 0 holds stages 0, 4, 8, 12 (looped schedule)
    job = tomllib.loads(export("torchtitan", model, resolve_config(model, 16, pp=4, gbs=64, schedule="dualpipe"),
                               model_ref="x").content)
    parts = job["parallelism"]["module_fqns_per_model_part"]
    assert len(parts) == 8 and parts[0][-1] == "layers.3" and parts[7][0] == "layers.28"  # V: rank 0 has 0 and 7
    job = tomllib.loads(export("torchtitan", model, resolve_config(model, 16, zero=0), model_ref="x").content)
    assert job["parallelism"]["data_parallel_replicate_degree"] == 16
    assert job["parallelism"]["data_parallel_shard_degree"] == 1
    fp8 = tomllib.loads(export("torchtitan", model, resolve_config(model, 16, precision="fp8"), model_ref="x").content)
    assert fp8["model"]["converters"] == ["quantize.linear.float8"]


def test_torchtitan_gives_every_stage_a_layer_or_refuses_more_stages_than_layers():
    """DeepSeek-V3's 61 layers on PP16 DualPipe: trainplan's split leaves the rank the MTP modules and head were
    balanced against one layer, so its second V chunk would be empty; torchtitan builds every stage from its part,
    so the export moves one layer into it and says so, and the search keeps the layout for torchtitan. More stages
    than layers is refused, by the export and the search alike."""
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.search.driver import search

    dsv3 = load_model("deepseek-v3")
    cfg = resolve_config(dsv3, 2048, pp=16, ep=128, cp=2, schedule="dualpipe", precision="fp8")
    result = export("torchtitan", dsv3, cfg, model_ref="x")
    parts = tomllib.loads(result.content)["parallelism"]["module_fqns_per_model_part"]
    layers = [name for part in parts for name in part if name.startswith("layers.")]
    assert len(parts) == 32 and all(any(n.startswith("layers.") for n in part) for part in parts)
    assert layers == [f"layers.{i}" for i in range(61)]   # every layer once, in order
    assert any("pipeline stage 16 (rank 15) had no layer" in note for note in result.notes)
    small = dense(8)
    with pytest.raises(ExportError, match="makes 16 pipeline stages for 8 layers"):
        export("torchtitan", small, resolve_config(small, 8, pp=8, gbs=16, schedule="dualpipe"), model_ref="x")
    found = search("llama3-8b", "h100", 32, gbs=64, seq=4096, pp=32, schedule="dualpipe", engine="torchtitan")
    assert not found.candidates and found.rejected.get("the engine cannot run it", 0) > 0


def test_accelerate_only_pure_data_parallel():
    model = dense(32)
    with pytest.raises(ExportError, match="tp=2"):
        export("accelerate", model, resolve_config(model, 16, tp=2), model_ref="x")
    text = export("accelerate", model, resolve_config(model, 16, zero=0), model_ref="x").content
    assert yaml.safe_load(text)["distributed_type"] == "MULTI_GPU"


def test_unknown_engine():
    with pytest.raises(ExportError, match="engine='nemo' is not one of"):
        export("nemo", dense(), resolve_config(dense(), 8), model_ref="x")


def run_main(monkeypatch, capsys, *argv):
    from trainplan.cli import main

    monkeypatch.setattr(sys, "argv", ["trainplan", *argv])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr()


def test_cli_prints_writes_and_reads_saved_config(monkeypatch, capsys, tmp_path):
    code, out = run_main(monkeypatch, capsys, "export", "--engine", "torchtitan", "--model", "llama3-8b",
                         "--gpu", "h100-sxm-80gb", "--gpus", "16", "--tp", "2", "--gbs", "64")
    assert code == 0 and tomllib.loads(out.out)["parallelism"]["tensor_parallel_degree"] == 2
    saved = tmp_path / "estimate.json"
    saved.write_text(json.dumps({"config": {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 16, "tp": 2,
                                            "pp": 2, "dp": 4, "zero": 1, "mbs": 1, "gbs": 64, "seq": 8192,
                                            "schedule": "1f1b", "recompute": "full", "precision": "bf16"}}))
    target = tmp_path / "args.sh"
    code, out = run_main(monkeypatch, capsys, "export", "--engine", "megatron", "--from", str(saved),
                         "--mbs", "2", "--out", str(target))
    assert code == 0 and "wrote" in out.err
    flags = parse_args_text(target.read_text())
    assert flags["--pipeline-model-parallel-size"] == "2" and flags["--micro-batch-size"] == "2"
    assert flags["--recompute-granularity"] == "full"


@pytest.mark.parametrize("argv, message", [
    (("--engine", "megatron", "--model", "llama3-8b", "--gpu", "h100-sxm-80gb", "--gpus", "16", "--pp", "2",
      "--schedule", "dualpipe"), "not a Megatron-LM schedule"),
    (("--engine", "deepspeed", "--model", "llama3-8b", "--gpu", "h100-sxm-80gb", "--gpus", "16", "--tp", "3"),
     "does not divide"),
    (("--engine", "torchtitan", "--gpu", "h100-sxm-80gb", "--gpus", "16"), "--model is required"),
])
def test_cli_bad_input_is_one_error_line(monkeypatch, capsys, tmp_path, argv, message):
    code, out = run_main(monkeypatch, capsys, "export", *argv)
    assert code == 2 and out.err.startswith("error: ") and message in out.err
    assert out.err.count("\n") == 1 and "Traceback" not in out.err


def test_the_engine_enum_and_the_refusal_table_name_the_same_engines():
    """export.Engine (the CLI choice) and tools/config/engines.py ENGINES (what search --engine checks) are one list."""
    from trainplan.tools.engines import EXPORTERS, Engine
    from trainplan.tools.config.engines import ENGINES

    assert [e.value for e in Engine] == list(ENGINES)
    assert set(EXPORTERS) | {Engine.accelerate} == set(Engine)


def test_exports_name_the_planned_recompute_modules_and_low_precision_storage():
    """A plan the search gave DeepSeek-V3's recipe (recompute modules, bf16 moments, FP8 activation
    caching) says what to add to the arguments, instead of silently dropping it."""
    from trainplan.tools.hardware.catalog import load_model

    model = load_model("deepseek-v3")
    layout = dict(pp=4, ep=256, schedule="1f1b", precision="fp8", seq=4096, gbs=15360, recompute="selective",
                  fp8_supported=True)
    planned = resolve_config(model, 2048, **layout, recompute_modules="layernorm,mla_up_proj,moe_act",
                             fp8_activations=True, bf16_moments=True)
    written = export("megatron", model, planned, model_ref=model.name)
    notes = " ".join(written.notes)
    assert parse_args_text(written.content)["--recompute-modules"] == "layernorm mla_up_proj moe_act"
    assert "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16" in notes
    assert "no flag for it" in notes
    plain_export = export("megatron", model, resolve_config(model, 2048, **layout), model_ref=model.name)
    plain = " ".join(plain_export.notes)
    assert "--recompute-modules" not in plain_export.content and "--exp-avg-dtype" not in plain and "no flag for it" not in plain
    with pytest.raises(ExportError, match="torchtitan checkpoints whole layers or nothing"):
        export("torchtitan", model, planned, model_ref=model.name)   # no --recompute-modules there
    stored = resolve_config(model, 2048, **layout, fp8_activations=True, bf16_moments=True)
    titan = " ".join(export("torchtitan", model, stored, model_ref=model.name).notes)
    assert "no setting for" in titan and "low-precision storage" in titan
    titan_plain = " ".join(export("torchtitan", model, resolve_config(model, 2048, **layout), model_ref=model.name).notes)
    assert "low-precision storage" not in titan_plain


def test_megatron_export_carries_the_rope_base_scaling_and_norm_epsilon_of_the_config():
    import copy

    from trainplan.tools.hardware.catalog.entries import MODELS_DIR
    from trainplan.tools.hardware.hf import spec_from_config

    config = json.loads((MODELS_DIR / "llama3-8b.json").read_text())
    base = spec_from_config(config, "llama3-8b")
    flags = parse_args_text(export("megatron", base, resolve_config(base, 8), model_ref="llama3-8b").content)
    assert (flags["--rotary-base"], flags["--norm-epsilon"], flags["--vocab-size"]) == ("500000", "1e-05", "128256")
    assert "--use-rope-scaling" not in flags
    extended = copy.deepcopy(config) | {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 8192}}
    spec = spec_from_config(extended, "llama31-8b")
    written = export("megatron", spec, resolve_config(spec, 8), model_ref="llama31-8b")
    flags = parse_args_text(written.content)
    assert "--use-rope-scaling" in flags and flags["--rope-scaling-factor"] == "8"
    megatron_parser().parse_args(shlex.split(written.content.split("=(", 1)[1].rsplit(")", 1)[0], comments=True))
    yarn = spec_from_config(copy.deepcopy(config) | {"rope_scaling": {"type": "yarn", "factor": 4}}, "y")
    notes = " ".join(export("megatron", yarn, resolve_config(yarn, 8), model_ref="y").notes)
    assert "yarn RoPE scaling (factor 4)" in notes
    gpt = parse_args_text(export("megatron", load_model_spec("gpt3-175b"), resolve_config(load_model_spec("gpt3-175b"), 1024, tp=8, pp=16),
                                 model_ref="gpt3-175b").content)
    assert gpt["--position-embedding-type"] == "learned_absolute" and "--rotary-base" not in gpt


def load_model_spec(name):
    from trainplan.tools.hardware.catalog import load_model

    return load_model(name)


@pytest.mark.parametrize("field, value", [("rope_theta", "10000"), ("rope_theta", -1), ("rms_norm_eps", True),
                                          ("rope_scaling", "llama3"), ("rope_scaling", {"rope_type": 3})])
def test_a_malformed_rope_or_norm_field_is_one_input_error(field, value):
    from trainplan.tools.hardware.catalog.entries import MODELS_DIR
    from trainplan.tools.hardware.hf import spec_from_config

    config = json.loads((MODELS_DIR / "llama3-8b.json").read_text()) | {field: value}
    with pytest.raises(InputError, match=field.split(".")[0]):
        spec_from_config(config, "bad")


def test_cli_export_warns_in_one_line_when_the_layout_does_not_fit():
    args = ["export", "--engine", "megatron", "--model", "llama3-70b",
            "--gpu", "h100", "--gpus", "8"]
    result = in_process(*args)
    assert result.returncode == 0 and "TP_SIZE" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "does not fit in memory: needs" in warnings[0]
    fits = in_process(*(args[:-2] + ["--gpus", "64", "--tp", "8", "--pp", "2", "--recompute", "full"]))
    assert fits.returncode == 0 and "warning:" not in fits.stderr
