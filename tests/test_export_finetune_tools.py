"""Fine-tuning exports read by the tools' own parsers, for the layouts of test_export_finetune.py.

Optional: each test skips when its tool is not installed. The three tools pin different releases of
transformers, TRL and PEFT, so each has its own extra, to install in its own environment (with a CPU torch
first on a machine without a GPU). Checked with torch 2.13.0+cpu against:
- `.[finetune-trl]`: TRL 1.16.0, PEFT 0.21.2, transformers 5.24.0, bitsandbytes 0.50.2, and DeepSpeed 0.19.8
  for the inline ZeRO dict. HfArgumentParser(SFTConfig).parse_dict rejects unknown keys; LoraConfig(**) and
  BitsAndBytesConfig(**) take the other sections; the Trainer's DeepSpeed config fills its 'auto' batch.
- `.[finetune-llamafactory]`: LLaMA-Factory 0.9.5 (installed with --no-deps next to its pins transformers
  5.6.0, TRL 0.24.0, PEFT 0.18.1, Accelerate 1.11.0, datasets 4.0.0 and omegaconf: the parser needs none of
  its web UI, audio or vision dependencies). hparams.get_train_args parses the YAML with its
  HfArgumentParser (unknown keys are an error) and runs its cross-checks.
- `.[finetune-axolotl]`: Axolotl 0.19.0 (--no-deps, with its pins transformers 5.16.1, PEFT 0.20.0, TRL 1.9.0,
  Accelerate 1.13.0, pydantic 2.12.5). utils.config.validate_config, what `axolotl train` runs, with the
  GPU capabilities of the target machine.

The files are written for GPUs: where a parser asks the local device whether bf16 runs, the test answers
as a GPU host would (as test_export_engines.py answers DeepSpeed's rank query).
"""

from __future__ import annotations

import pytest
import yaml

from test_export import dense, mla
from test_export_finetune import layouts, load
from trainplan.tools.engines import export
from trainplan.tools.perf.finetune import NF4_BYTES_PER_PARAM, total_adapter_params
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.core.enums import LossKernel

# What a run adds to the exported file (the files say so in their notes): data, output, schedule.
LLAMAFACTORY_RUN = {"dataset": "identity", "template": "llama3", "learning_rate": 1e-4, "num_train_epochs": 1.0}
AXOLOTL_RUN = {"datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "num_epochs": 1, "learning_rate": 2e-4}


# The kernels the Hugging Face Trainer tools run (tools/config/engines.py engine_knobs), as a plan for them holds:
# the parsers here see no Liger keys, which test_export_finetune.py checks without the tools installed.
HF_KERNELS = {"fused_kernels": False, "loss_kernel": "materialised"}


def all_layouts():
    """test_export_finetune's layouts, and eager attention with each method, with the Trainer tools' kernels."""
    for cfg in layouts():
        yield cfg.model_copy(update={"fused_kernels": False, "loss_kernel": LossKernel.materialised})
    for kwargs in ({"method": "full"}, {"method": "lora"}, {"method": "qlora", "lora_targets": "attention"}):
        yield resolve_config(dense(32), 2, zero=2, gbs=8, seq=1024, attention="eager", **kwargs, **HF_KERNELS)


def answer_bf16_as_a_gpu_host(monkeypatch):
    """TrainingArguments refuses bf16 unless the local device runs it; the files are for GPUs that do."""
    import transformers.training_args as training_args

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)


def _is_qlora(cfg) -> bool:
    return cfg.method.value == "qlora"


# --- TRL / PEFT / bitsandbytes ---------------------------------------------------------------------------------


def test_trl_sections_build_sftconfig_loraconfig_and_bitsandbytesconfig(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    answer_bf16_as_a_gpu_host(monkeypatch)
    import torch
    from peft import LoraConfig, TaskType
    from peft.utils.constants import INCLUDE_LINEAR_LAYERS_SHORTHAND
    from transformers import BitsAndBytesConfig, HfArgumentParser
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from trl import SFTConfig

    checked = 0
    for cfg in all_layouts():
        args, _ = load("trl", cfg)
        sft = {k: v for k, v in args["sft_config"].items() if k != "deepspeed"}  # DeepSpeed: the next test
        (config,) = HfArgumentParser(SFTConfig).parse_dict({**sft, "output_dir": str(tmp_path)})
        assert (config.per_device_train_batch_size, config.max_length) == (cfg.mbs, cfg.seq)
        assert config.gradient_accumulation_steps == cfg.num_microbatches and config.bf16
        assert config.gradient_checkpointing is (cfg.recompute.value == "full")
        assert (config.optim == "paged_adamw_32bit") is _is_qlora(cfg)
        init = config.model_init_kwargs
        assert init["attn_implementation"] in {"eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()}
        assert (init["attn_implementation"] == "eager") is (cfg.attention.value == "eager")
        assert getattr(torch, init["dtype"]) is torch.bfloat16
        checked += 1
        if cfg.method.value == "full":
            continue
        lora = LoraConfig(**args["lora_config"])
        assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (cfg.lora_rank, 2 * cfg.lora_rank, cfg.lora_dropout)
        assert lora.task_type == TaskType.CAUSAL_LM
        if cfg.lora_targets.value == "all-linear":
            assert lora.target_modules == INCLUDE_LINEAR_LAYERS_SHORTHAND
        else:
            assert lora.target_modules == ({"q_proj", "v_proj"} if cfg.lora_targets.value == "qv"
                                           else {"q_proj", "k_proj", "v_proj", "o_proj"})
        if _is_qlora(cfg):
            bnb = BitsAndBytesConfig(**args["bnb_config"])
            assert bnb.load_in_4bit and not bnb.load_in_8bit and bnb.bnb_4bit_quant_type == "nf4"
            assert bnb.bnb_4bit_use_double_quant is cfg.double_quant and bnb.bnb_4bit_compute_dtype is torch.bfloat16
    assert checked >= 60


def test_trl_deepspeed_dict_fills_its_auto_batch_from_the_sft_config(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("deepspeed")
    answer_bf16_as_a_gpu_host(monkeypatch)
    from transformers import HfArgumentParser
    from trl import SFTConfig

    world = {"size": 1}
    # The Trainer takes the world size from torch.distributed; here, the number of processes the file is for.
    monkeypatch.setattr(SFTConfig, "world_size", property(lambda self: world["size"]))
    checked = 0
    for cfg in all_layouts():
        args, _ = load("trl", cfg)
        if "deepspeed" not in args["sft_config"]:
            continue
        world["size"] = cfg.num_gpus
        (config,) = HfArgumentParser(SFTConfig).parse_dict({**args["sft_config"], "output_dir": str(tmp_path)})
        deepspeed = config.hf_deepspeed_config
        deepspeed.trainer_config_process(config)
        # train_batch_size = micro x world x accumulation: the global batch the plan was made for
        assert deepspeed.get_value("train_batch_size") == cfg.gbs
        assert deepspeed.get_value("train_micro_batch_size_per_gpu") == cfg.mbs
        assert deepspeed.get_value("zero_optimization.stage") == cfg.zero and deepspeed.get_value("bf16.enabled")
        assert deepspeed.is_offload() is cfg.optimizer_offload
        checked += 1
    assert checked >= 40


def test_peft_trains_as_many_adapter_parameters_as_the_estimate_counts():
    """get_peft_model on the Hugging Face architecture, built tiny from its config: the exported LoraConfig
    adapts exactly the parameters the memory estimate counts (r (d_in + d_out) per targeted linear).
    MoE all-linear is left out: transformers 5 fuses the routed experts into 3D weights, which transformers 5.6
    with PEFT 0.18.1 leaves frozen with the router (attention, dense and shared layers only), and which
    transformers 5.16/5.24 with PEFT 0.20/0.21 adapt, router included; the exports say so
    (export.common.MOE_ALL_LINEAR_NOTE)."""
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainplan.tools.hardware.hf import spec_from_config

    tiny = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                max_position_embeddings=256)
    cases = [("llama", dict(num_key_value_heads=2), ("attention", "all-linear")),
             ("qwen3", dict(num_key_value_heads=2, head_dim=24), ("attention", "all-linear")),
             ("qwen3_moe", dict(num_key_value_heads=2, head_dim=16, moe_intermediate_size=48, num_experts=4,
                                num_experts_per_tok=2, mlp_only_layers=[]), ("attention",)),
             ("deepseek_v3", dict(num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=16,
                                  qk_rope_head_dim=8, v_head_dim=16, moe_intermediate_size=32, n_routed_experts=4,
                                  num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1),
              ("attention",))]
    for model_type, extra, targets in cases:
        hf_config = AutoConfig.for_model(model_type, **tiny, **extra)
        spec = spec_from_config(hf_config.to_dict(), model_type)
        for target in targets:
            cfg = resolve_config(spec, 1, method="lora", lora_rank=4, lora_targets=target, gbs=1, seq=64)
            args = yaml.safe_load(export("trl", spec, cfg, model_ref=model_type).content)
            torch.manual_seed(0)
            model = get_peft_model(AutoModelForCausalLM.from_config(hf_config), LoraConfig(**args["lora_config"]))
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            assert trainable == total_adapter_params(spec, 4, target), (model_type, target)


def test_bitsandbytes_nf4_with_double_quantisation_stores_the_bits_the_estimate_counts():
    """The exported bnb_config quantises a weight to 4.127 bits per parameter (NF4_BYTES_PER_PARAM): packed
    4-bit codes, an 8-bit absmax per 64 weights, an fp32 constant per 256 absmax (Dettmers et al. 2023 §3)."""
    pytest.importorskip("bitsandbytes")
    import torch
    from bitsandbytes.functional import quantize_4bit
    from transformers import BitsAndBytesConfig

    cfg = resolve_config(dense(32), 1, method="qlora", gbs=1, seq=512)
    bnb = BitsAndBytesConfig(**yaml.safe_load(export("trl", dense(32), cfg, model_ref="x").content)["bnb_config"])
    weight = torch.randn(4096, 4096, dtype=bnb.bnb_4bit_compute_dtype)
    packed, state = quantize_4bit(weight, blocksize=64, quant_type=bnb.bnb_4bit_quant_type,
                                  compress_statistics=bnb.bnb_4bit_use_double_quant)
    tensors = [packed, state.absmax, state.state2.absmax, state.state2.code]
    stored = sum(t.numel() * t.element_size() for t in tensors)
    assert stored / weight.numel() == pytest.approx(NF4_BYTES_PER_PARAM, rel=1e-3)


# --- LLaMA-Factory -----------------------------------------------------------------------------------------------


def test_llamafactory_yaml_parses_with_its_train_arguments(monkeypatch, tmp_path):
    """deepspeed names a file of the LLaMA-Factory repository, which its wheel does not ship (and reading it
    needs a torchrun launch): it is left out here; test_export_finetune.py checks the file names."""
    pytest.importorskip("llamafactory.hparams")
    answer_bf16_as_a_gpu_host(monkeypatch)
    from llamafactory.hparams import get_train_args

    checked = 0
    for i, cfg in enumerate(all_layouts()):
        config, _ = load("llamafactory", cfg)
        config.pop("deepspeed", None)
        model, data, training, finetuning, _ = get_train_args({**config, **LLAMAFACTORY_RUN,
                                                               "output_dir": str(tmp_path / str(i))})
        assert data.cutoff_len == cfg.seq and training.per_device_train_batch_size == cfg.mbs
        assert training.gradient_accumulation_steps == cfg.num_microbatches and training.bf16
        assert model.disable_gradient_checkpointing is (cfg.recompute.value != "full")
        assert model.flash_attn == ("fa2" if cfg.attention.value == "flash" else "disabled")
        assert finetuning.stage == "sft" and finetuning.finetuning_type == ("full" if cfg.method.value == "full"
                                                                            else "lora")
        assert (training.optim == "paged_adamw_32bit") is _is_qlora(cfg)
        assert (model.quantization_bit == 4) is _is_qlora(cfg)
        checked += 1
        if cfg.method.value == "full":
            continue
        assert (finetuning.lora_rank, finetuning.lora_alpha, finetuning.lora_dropout) == (cfg.lora_rank,
                                                                                          2 * cfg.lora_rank,
                                                                                          cfg.lora_dropout)
        assert finetuning.lora_target == {"all-linear": ["all"], "qv": ["q_proj", "v_proj"],
                                          "attention": ["q_proj", "k_proj", "v_proj", "o_proj"]}[cfg.lora_targets.value]
        if _is_qlora(cfg):
            assert model.quantization_method == "bitsandbytes" and model.quantization_type == "nf4"
            assert model.double_quantization is cfg.double_quant
    assert checked >= 60


def test_llamafactory_takes_pure_bf16_as_its_own_switch(monkeypatch, tmp_path):
    pytest.importorskip("llamafactory.hparams")
    answer_bf16_as_a_gpu_host(monkeypatch)
    import llamafactory.hparams.parser as parser
    from llamafactory.hparams import get_train_args

    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)   # its own check of pure_bf16
    cfg = resolve_config(dense(32), 1, zero=0, pure_bf16=True, gbs=8, seq=2048, fused_kernels=False)   # no Liger here
    config, _ = load("llamafactory", cfg)
    _, _, training, finetuning, _ = get_train_args({**config, **LLAMAFACTORY_RUN, "output_dir": str(tmp_path)})
    assert finetuning.pure_bf16 and not training.bf16


# --- Axolotl -----------------------------------------------------------------------------------------------------


def test_axolotl_yaml_validates_with_its_config_schema():
    pytest.importorskip("axolotl.utils.config")
    import torch
    from axolotl.utils.config import validate_config
    from axolotl.utils.dict import DictDefault
    from axolotl.utils.schemas.config import AxolotlInputConfig

    checked = 0
    pairs = [(dense(32), cfg) for cfg in all_layouts()]
    pairs.append((mla(), resolve_config(mla(), 8, method="lora", lora_targets="attention", gbs=8, **HF_KERNELS)))
    for model, cfg in pairs:
        config, _ = load("axolotl", cfg, model)
        # The schema keeps keys it does not know, so a misspelt key would pass silently: each must be a field.
        assert set(config) <= set(AxolotlInputConfig.model_fields), set(config) - set(AxolotlInputConfig.model_fields)
        validated = validate_config(DictDefault({**config, **AXOLOTL_RUN}),
                                    capabilities={"bf16": True, "n_gpu": cfg.num_gpus, "compute_capability": "sm_90"},
                                    env_capabilities={"torch_version": torch.__version__.split("+")[0]})
        assert (validated.micro_batch_size, validated.sequence_len) == (cfg.mbs, cfg.seq)
        assert validated.gradient_accumulation_steps == cfg.num_microbatches
        assert validated.gradient_checkpointing is (cfg.recompute.value == "full")
        assert validated.attn_implementation == ("flash_attention_2" if cfg.attention.value == "flash" else "eager")
        checked += 1
        if cfg.method.value == "full":
            assert validated.adapter is None
            continue
        assert validated.adapter == cfg.method.value and validated.lora_r == cfg.lora_rank
        assert bool(validated.load_in_4bit) is _is_qlora(cfg)
        assert (validated.optimizer == "paged_adamw_32bit") is _is_qlora(cfg)
    assert checked >= 60


# --- packed documents (Layout.document_tokens) ---------------------------------------------------------------------


def _packed(method: str):
    return resolve_config(dense(32), 1, zero=0, gbs=8, seq=4096, method=method, document_tokens=300,
                          attention="flash2", **HF_KERNELS)


def test_trl_packs_documents_padding_free(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    answer_bf16_as_a_gpu_host(monkeypatch)
    from transformers import HfArgumentParser
    from trl import SFTConfig

    for method in ("full", "lora"):
        args, _ = load("trl", _packed(method))
        (config,) = HfArgumentParser(SFTConfig).parse_dict({**args["sft_config"], "output_dir": str(tmp_path)})
        assert config.packing and config.padding_free


def test_llamafactory_packs_documents_without_cross_attention(monkeypatch, tmp_path):
    pytest.importorskip("llamafactory.hparams")
    answer_bf16_as_a_gpu_host(monkeypatch)
    from llamafactory.hparams import get_train_args

    config, _ = load("llamafactory", _packed("lora"))
    _, data, _, _, _ = get_train_args({**config, **LLAMAFACTORY_RUN, "output_dir": str(tmp_path)})
    assert data.packing and data.neat_packing


def test_axolotl_packs_samples():
    pytest.importorskip("axolotl.utils.config")
    import torch
    from axolotl.utils.config import validate_config
    from axolotl.utils.dict import DictDefault
    from axolotl.utils.schemas.config import AxolotlInputConfig

    config, _ = load("axolotl", _packed("lora"))
    assert set(config) <= set(AxolotlInputConfig.model_fields), set(config) - set(AxolotlInputConfig.model_fields)
    validated = validate_config(DictDefault({**config, **AXOLOTL_RUN}),
                                capabilities={"bf16": True, "n_gpu": 1, "compute_capability": "sm_90"},
                                env_capabilities={"torch_version": torch.__version__.split("+")[0]})
    assert validated.sample_packing and validated.pad_to_sequence_len


# --- 8-bit Adam (Layout.optimizer_8bit) -----------------------------------------------------------------------------


def _eight_bit(method: str):
    return resolve_config(dense(32), 1, zero=0, gbs=8, seq=2048, method=method, optimizer_8bit=True,
                          attention="flash2", **HF_KERNELS)


def test_trl_takes_bitsandbytes_8bit_adam(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    answer_bf16_as_a_gpu_host(monkeypatch)
    from transformers import HfArgumentParser
    from trl import SFTConfig

    for method, optim in (("full", "adamw_bnb_8bit"), ("lora", "adamw_bnb_8bit"), ("qlora", "paged_adamw_8bit")):
        args, _ = load("trl", _eight_bit(method))
        (config,) = HfArgumentParser(SFTConfig).parse_dict({**args["sft_config"], "output_dir": str(tmp_path)})
        assert config.optim == optim


def test_llamafactory_takes_bitsandbytes_8bit_adam(monkeypatch, tmp_path):
    pytest.importorskip("llamafactory.hparams")
    answer_bf16_as_a_gpu_host(monkeypatch)
    from llamafactory.hparams import get_train_args

    config, _ = load("llamafactory", _eight_bit("lora"))
    _, _, training, _, _ = get_train_args({**config, **LLAMAFACTORY_RUN, "output_dir": str(tmp_path)})
    assert training.optim == "adamw_bnb_8bit"


def test_axolotl_takes_bitsandbytes_8bit_adam():
    pytest.importorskip("axolotl.utils.config")
    import torch
    from axolotl.utils.config import validate_config
    from axolotl.utils.dict import DictDefault

    config, _ = load("axolotl", _eight_bit("full"))
    validated = validate_config(DictDefault({**config, **AXOLOTL_RUN}),
                                capabilities={"bf16": True, "n_gpu": 1, "compute_capability": "sm_90"},
                                env_capabilities={"torch_version": torch.__version__.split("+")[0]})
    assert validated.optimizer == "adamw_bnb_8bit"
