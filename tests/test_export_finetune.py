"""Fine-tuning tool exports (Axolotl, LLaMA-Factory, TRL/PEFT): the method, rank and targets reach each
tool's own keys, the batch identity closes in the tool's terms, and model-parallel layouts are refused.

These checks read the YAML back and check each key against the name the tool documents (the exporter
modules cite where); test_export_finetune_tools.py runs the same layouts through the tools' own parsers
where they are installed."""

from __future__ import annotations


from cli_inprocess import run_cli as in_process
import pytest
import yaml

from test_export import BATCH_LINE, dense, mla, moe
from trainplan.tools.engines import ExportError, export
from trainplan.tools.config.engines import HF_TRAINER_ENGINES
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.core.errors import InputError

METHODS = [dict(method="full"), dict(method="lora", lora_rank=8, lora_targets="attention"),
           dict(method="lora", lora_rank=32, lora_targets="all-linear", lora_dropout=0.05),
           dict(method="lora", lora_rank=8, lora_targets="qv"), dict(method="qlora", lora_rank=16, double_quant=False),
           dict(method="qlora", lora_rank=64)]


HF_MODULES = {"attention": ["q_proj", "k_proj", "v_proj", "o_proj"], "qv": ["q_proj", "v_proj"]}
"""The Hugging Face module names each narrow target set is written as (Llama)."""


def layouts():
    """Data-parallel layouts over every method, ZeRO stage, recompute and batch factor."""
    for gpus in (1, 2, 8, 16):
        for zero in (0, 1, 2, 3):
            for i, kwargs in enumerate(METHODS):
                mbs, accumulation = (1, 2, 4)[i % 3], (1, 4, 16)[(i + zero) % 3]
                recompute = ("none", "selective", "full")[(gpus + zero + i) % 3]
                yield resolve_config(dense(32), gpus, zero=zero, mbs=mbs, gbs=mbs * gpus * accumulation,
                                     recompute=recompute, seq=2048, **kwargs)


def load(engine: str, cfg, model=None):
    result = export(engine, model or dense(32), cfg, model_ref="org/model")
    assert result.format == "yaml" and result.engine == engine
    match = BATCH_LINE.search(result.content)
    g, m, d, a = map(int, match.groups())
    assert g == m * d * a == cfg.gbs
    return yaml.safe_load(result.content), result


def test_axolotl_keys_follow_the_layout():
    for cfg in layouts():
        config, _ = load("axolotl", cfg)
        # Axolotl's batch: micro_batch_size x world size x gradient_accumulation_steps = global batch
        assert config["micro_batch_size"] * cfg.num_gpus * config["gradient_accumulation_steps"] == cfg.gbs
        assert config["micro_batch_size"] == cfg.mbs and config["sequence_len"] == cfg.seq
        assert config["gradient_checkpointing"] is (cfg.recompute.value == "full") and config["bf16"] is True
        assert config.get("deepspeed") == {0: None, 1: "deepspeed_configs/zero1.json",
                                           2: "deepspeed_configs/zero2.json",
                                           3: "deepspeed_configs/zero3_bf16.json"}[cfg.zero]
        if cfg.method.value == "full":
            assert not any(key.startswith("lora_") for key in config) and "adapter" not in config
            continue
        assert config["adapter"] == cfg.method.value and config["load_in_4bit"] is (cfg.method.value == "qlora")
        assert config["lora_r"] == cfg.lora_rank and config["lora_alpha"] == 2 * cfg.lora_rank
        assert config["lora_dropout"] == cfg.lora_dropout
        if cfg.lora_targets.value == "all-linear":
            assert config["lora_target_linear"] is True and "lora_target_modules" not in config
        else:
            assert config["lora_target_modules"] == HF_MODULES[cfg.lora_targets.value]
        assert (config.get("optimizer") == "paged_adamw_32bit") is (cfg.method.value == "qlora")
        # Axolotl's 4-bit loader double-quantises; bnb_config_kwargs overrides it only where the layout does not
        assert config.get("bnb_config_kwargs") == ({"bnb_4bit_use_double_quant": False} if cfg.double_quant is False
                                                   else None)


def test_attention_targets_use_hugging_face_module_names_for_mla():
    model = mla()
    cfg = resolve_config(model, 8, method="lora", lora_targets="attention", gbs=8)
    config, result = load("axolotl", cfg, model)
    assert config["lora_target_modules"] == ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
    assert any("named_modules" in note for note in result.notes)


def test_offload_maps_to_a_deepspeed_offload_file():
    cfg = resolve_config(dense(32), 8, zero=3, optimizer_offload=True, method="lora", gbs=8)
    config, _ = load("axolotl", cfg)
    assert config["deepspeed"] == "deepspeed_configs/zero3_bf16_cpuoffload_all.json"


@pytest.mark.parametrize("engine", HF_TRAINER_ENGINES)
@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=2), "tp=2"), (dict(pp=2), "pp=2"), (dict(cp=2), "cp=2"),
    (dict(precision="fp8"), "precision=fp8"), (dict(zero=0, optimizer_offload=True), "--zero 1"),
])
def test_model_parallel_and_unsupported_layouts_are_refused_in_one_line(engine, kwargs, message):
    cfg = resolve_config(dense(32), 16, method="lora", **kwargs)
    with pytest.raises(ExportError, match=message) as info:
        export(engine, dense(32), cfg, model_ref="x")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("engine", HF_TRAINER_ENGINES)
def test_search_for_the_tool_keeps_only_data_parallel_layouts(engine):
    from trainplan.tools.search.driver import search

    result = search(model="llama3-8b", gpu="h100", gpus=8, gbs=32, seq=4096, method="lora", top_k=5, engine=engine)
    assert result.candidates, result.notes
    for candidate in result.candidates:
        config = candidate["config"]
        assert (config["tp"], config["pp"], config["cp"], config["ep"]) == (1, 1, 1, 1)
    assert result.rejected["the engine cannot run it"] > 0


def test_llamafactory_keys_follow_the_layout():
    for cfg in layouts():
        config, _ = load("llamafactory", cfg)
        # per_device_train_batch_size x world size x gradient_accumulation_steps = global batch
        assert config["per_device_train_batch_size"] * cfg.num_gpus * config["gradient_accumulation_steps"] == cfg.gbs
        assert config["per_device_train_batch_size"] == cfg.mbs and config["cutoff_len"] == cfg.seq
        assert config["stage"] == "sft" and config["bf16"] is True
        assert config["disable_gradient_checkpointing"] is (cfg.recompute.value != "full")
        assert config.get("deepspeed") == {0: None, 1: "examples/deepspeed/ds_z2_config.json",
                                           2: "examples/deepspeed/ds_z2_config.json",
                                           3: "examples/deepspeed/ds_z3_config.json"}[cfg.zero]
        if cfg.method.value == "full":
            assert config["finetuning_type"] == "full" and not any(k.startswith(("lora_", "quant")) for k in config)
            continue
        assert config["finetuning_type"] == "lora" and config["lora_rank"] == cfg.lora_rank
        assert config["lora_alpha"] == 2 * cfg.lora_rank and config["lora_dropout"] == cfg.lora_dropout
        assert config["lora_target"] == ("all" if cfg.lora_targets.value == "all-linear"
                                         else ",".join(HF_MODULES[cfg.lora_targets.value]))
        qlora = cfg.method.value == "qlora"
        assert (config.get("quantization_bit") == 4) is qlora and (config.get("optim") == "paged_adamw_32bit") is qlora
        if qlora:
            assert config["quantization_type"] == "nf4" and config["double_quantization"] is cfg.double_quant


def test_trl_peft_arguments_follow_the_layout():
    for cfg in layouts():
        args, _ = load("trl", cfg)
        sft = args["sft_config"]
        # per_device_train_batch_size x world size x gradient_accumulation_steps = global batch
        assert sft["per_device_train_batch_size"] * cfg.num_gpus * sft["gradient_accumulation_steps"] == cfg.gbs
        assert sft["per_device_train_batch_size"] == cfg.mbs and sft["max_length"] == cfg.seq and sft["bf16"] is True
        assert sft["gradient_checkpointing"] is (cfg.recompute.value == "full")
        if cfg.zero:
            ds = sft["deepspeed"]
            assert ds["zero_optimization"]["stage"] == cfg.zero and ds["train_batch_size"] == "auto"
        else:
            assert "deepspeed" not in sft
        if cfg.method.value == "full":
            assert "lora_config" not in args and "bnb_config" not in args
            continue
        lora = args["lora_config"]
        assert lora["r"] == cfg.lora_rank and lora["lora_alpha"] == 2 * cfg.lora_rank and lora["task_type"] == "CAUSAL_LM"
        assert lora["lora_dropout"] == cfg.lora_dropout
        assert lora["target_modules"] == ("all-linear" if cfg.lora_targets.value == "all-linear"
                                          else HF_MODULES[cfg.lora_targets.value])
        qlora = cfg.method.value == "qlora"
        assert ("bnb_config" in args) is qlora and (sft.get("optim") == "paged_adamw_32bit") is qlora
        if qlora:
            assert args["bnb_config"] == {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                                          "bnb_4bit_use_double_quant": cfg.double_quant,
                                          "bnb_4bit_compute_dtype": "bfloat16"}


def test_trl_offload_is_zero_offload_in_the_deepspeed_dict():
    cfg = resolve_config(dense(32), 8, zero=2, optimizer_offload=True, method="lora", gbs=8)
    args, _ = load("trl", cfg)
    assert args["sft_config"]["deepspeed"]["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


@pytest.mark.parametrize("engine", [*HF_TRAINER_ENGINES, "deepspeed", "accelerate"])
def test_peft_engines_refuse_a_dropout_on_the_adapters_output(engine):
    """PEFT drops each adapter's input; a plan that assumed NeMo AutoModel's output dropout (fewer saved bytes)
    would run out of the memory it planned: the export refuses in one line, and so does the search for the tool."""
    from trainplan.tools.search.driver import search

    cfg = resolve_config(dense(32), 1, method="lora", lora_dropout=0.1, lora_dropout_position="post")
    with pytest.raises(ExportError, match="lora_dropout_position=post") as info:
        export(engine, dense(32), cfg, model_ref="x")
    assert "\n" not in str(info.value) and "--lora-dropout-position pre" in str(info.value)
    export(engine, dense(32), resolve_config(dense(32), 1, method="lora", lora_dropout=0.1), model_ref="x")
    found = search(model="llama3-8b", gpu="h100", gpus=1, method="lora", seq=2048, lora_dropout=0.1,
                   lora_dropout_position="post", engine=engine)
    assert not found.candidates and found.rejected.get("the engine cannot run it", 0) > 0


def test_a_given_alpha_is_written_and_checked():
    cfg = resolve_config(dense(32), 1, method="lora", lora_rank=16, lora_alpha=16, gbs=8)
    assert load("axolotl", cfg)[0]["lora_alpha"] == 16
    default = resolve_config(dense(32), 1, method="lora", lora_rank=16, gbs=8)
    assert load("axolotl", default)[0]["lora_alpha"] == 32
    for kwargs, message in ((dict(method="lora", lora_alpha=0), "lora_alpha=0 must be a positive number"),
                            (dict(lora_alpha=16), "lora_alpha=16 needs --method lora or qlora")):
        with pytest.raises(InputError, match=message):
            resolve_config(dense(32), 1, **kwargs)


@pytest.mark.parametrize("engine", ["megatron", "torchtitan"])
def test_engines_without_adapters_refuse_lora_instead_of_training_every_weight(engine):
    from trainplan.tools.search.driver import search

    result = in_process("export", "--engine", engine, "--model",
                             "llama3-8b", "--gpu", "h100", "--gpus", "8", "--method", "lora", "--seq", "2048")
    assert result.returncode == 2 and result.stderr.startswith("error: method lora/qlora"), result.stderr
    found = search(model="llama3-8b", gpu="h100", gpus=8, method="lora", seq=2048, engine=engine)
    assert not found.candidates and found.rejected.get("the engine cannot run it", 0) > 0


@pytest.mark.parametrize("engine", HF_TRAINER_ENGINES)
def test_all_linear_on_an_moe_model_says_how_the_tools_treat_fused_experts(engine):
    from trainplan.tools.engines.common import MOE_ALL_LINEAR_NOTE

    for model, targets, expected in ((moe(), "all-linear", True), (moe(), "attention", False),
                                     (dense(32), "all-linear", False)):
        cfg = resolve_config(model, 8, method="lora", lora_targets=targets, gbs=8, seq=1024)
        assert (MOE_ALL_LINEAR_NOTE in export(engine, model, cfg, model_ref="x").notes) is expected


@pytest.mark.parametrize("engine", ["axolotl", "llamafactory", "trl"])
def test_the_fused_loss_and_kernels_the_plan_assumed_are_switched_on_with_liger(engine):
    """A Hugging Face Trainer tool runs the transformers model's eager ops and whole fp32 logits unless Liger
    Kernel replaces them: a plan that assumed the fused linear cross-entropy or fused norms, rotary and SwiGLU
    switches Liger on (Axolotl kernel by kernel; LLaMA-Factory and TRL whole, saying what that changes); an
    unfused, materialised plan leaves it off; a loss kernel the tool has no setting for is a note."""
    from trainplan.tools.config.layout import resolve_config
    from trainplan.tools.engines import export
    from trainplan.tools.hardware.catalog import load_model

    model = load_model("llama3-8b")

    def exported(**knobs):
        cfg = resolve_config(model, 1, method="lora", gbs=16, seq=2048, recompute="full", **knobs)
        result = export(engine, model, cfg, model_ref="llama3-8b")
        return yaml.safe_load(result.content), " ".join(result.notes)

    switch = {"axolotl": lambda d: "axolotl.integrations.liger.LigerPlugin" in d.get("plugins", []),
              "llamafactory": lambda d: d.get("enable_liger_kernel") is True,
              "trl": lambda d: d["sft_config"].get("use_liger_kernel") is True}[engine]
    both, notes = exported(loss_kernel="fused_linear", fused_kernels=True)
    assert switch(both) and "pip install liger-kernel" in notes and "switches Liger on whole" not in notes
    loss_only, notes = exported(loss_kernel="fused_linear", fused_kernels=False)
    assert switch(loss_only)
    if engine == "axolotl":   # each kernel as planned
        assert loss_only["liger_fused_linear_cross_entropy"] and not loss_only["liger_rms_norm"]
    else:
        assert "switches Liger on whole" in notes and "shorter than estimated" in notes
    plain, notes = exported(loss_kernel="materialised", fused_kernels=False)
    assert not switch(plain) and "liger" not in notes.lower()
    _, notes = exported(loss_kernel="chunked", fused_kernels=False)
    assert "loss_kernel=chunked has no" in notes and "more memory than planned" in notes
