"""The engines trainplan writes launch settings for: one EngineProfile each, in ENGINE_PROFILES. Every list of
engines elsewhere (the search's `engine=`, the exporters, the request's engine words, the planner's default and
fallbacks, the descriptions) derives from this registry.

Parameter storage (fp32_params, Layout.fp32_params, tools/perf/memory.py): torchtitan shards an fp32 model with
FSDP2 (MixedPrecisionPolicy param_dtype bf16, reduce_dtype fp32: "The optimizer step uses the sharded parameter in
the original dtype"), Accelerate runs FSDP2 or DDP with bf16 mixed precision over fp32 parameters. The others keep
bf16 parameters beside an fp32 master in the optimizer: Megatron's distributed optimizer, DeepSpeed ZeRO, and the
Hugging Face Trainer tools as exported here (their ZeRO is a DeepSpeed file).

Attention (Layout.attention): Megatron runs Transformer Engine's fused attention (cuDNN, the GPU's own
instructions: flash); the others run FlashAttention-2 itself (flash2), written for Ampere's instructions:
torchtitan through PyTorch's F.scaled_dot_product_attention, whose flash backend is FlashAttention-2, and the
Hugging Face models that DeepSpeed, Accelerate and the Trainer tools load with attn_implementation
"flash_attention_2" (tools/engines/common.py HF_ATTN_IMPLEMENTATION).

Loss kernel (Layout.loss_kernel, tools/perf/loss.py): Megatron's vocab-parallel cross-entropy (fused);
torchtitan's cross_entropy_loss upcasts the whole logits (`pred.flatten(0, 1).float()`), and the Hugging Face
models that the other engines load compute `logits.float()` in their loss_function (materialised). Axolotl's and
LLaMA-Factory's Liger or Cut Cross-Entropy plugins, and Unsloth, run fused_linear when enabled: set loss_kernel.

Kernels and launch (Layout.fused_kernels, Layout.launch; tools/perf/host.py): Megatron runs Transformer Engine's and
Apex's fused norm, rotary and SwiGLU kernels from eager PyTorch (fused, eager). torchtitan's export turns on its
[compile] section (torchtitan 0.2.2 config/job_config.py Compile: enable, components ["model", "loss"]), which
compiles each TransformerBlock with fullgraph=True (models/llama3/infra/parallelize.py apply_compile), as its own
405B preset does (train_configs/llama3_405b.toml: compile = true): fused, compiled. The Hugging Face models that
the other engines load run LlamaRMSNorm, apply_rotary_pos_emb and the gated MLP as eager op chains, and their
exports turn on neither torch_compile nor Liger (unfused, eager).

Recompute granularity (EngineProfile.recompute_modules, Layout.recompute_modules): only Megatron selects the modules
selective recompute reruns (Megatron-Core --recompute-granularity selective --recompute-modules, arguments.py).
The others checkpoint whole layers or nothing: the Hugging Face models' gradient_checkpointing wraps each decoder
layer (transformers GradientCheckpointingLayer), DeepSpeed's activation checkpointing runs where the model calls
deepspeed.checkpointing.checkpoint, Accelerate's FSDP activation_checkpointing wraps each transformer block, and
torchtitan's selective mode is an op-level policy or a layer frequency (activation_checkpoint.selective_ac_option),
not a module list. So their selective recompute is the attention core alone (Megatron's default set), which
FlashAttention recomputes in its backward anyway, and a layout that reruns other modules is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainplan.tools.config.codes import PRECISION_CODES
from trainplan.tools.config.resolve import document_span, dropout_on_output, is_lora
from trainplan.tools.core.enums import Launch
from trainplan.tools.core.errors import InputError

from trainplan.tools.config.engine_refusals import (ACCELERATE_REFUSALS, DEEPSPEED_REFUSALS, MEGATRON_REFUSALS,
                                                    TORCHTITAN_REFUSALS, Refusal, adapter_dropout_refusal, adapter_refusal,
                                                    document_mask_refusal, optimizer_8bit_refusal,
                                                    head_split_refusal, hf_trainer_refusals, module_recompute_refusal,
                                                    param_storage_refusal, pure_bf16_refusal)


@dataclass(frozen=True)
class EngineProfile:
    """What trainplan knows of one engine."""

    name: str
    """The engine's name: the CLI's --engine choice, the search's engine=."""
    description: str
    """What its launch settings are (the CLI help of tools/engines/__init__.py Engine)."""
    pattern: str
    """How a request's text names it (a regular expression over lower-case text, agent/request_steering.py)."""
    spelled: str
    """How its makers write the name."""
    exporter: str
    """The function writing its launch settings, as "module:function" (tools/engines/ imports it)."""
    attention: str
    """Layout.attention as it runs attention (see the module docstring)."""
    loss_kernel: str
    """Layout.loss_kernel as it computes the loss (see the module docstring)."""
    fused_kernels: bool
    """Layout.fused_kernels as it runs norms, rotary and SwiGLU (see the module docstring)."""
    launch: Launch
    """Layout.launch as its launch settings issue the kernels (see the module docstring)."""
    recompute_modules: bool = False
    """Whether it selects the modules selective recompute reruns (see the module docstring)."""
    fp32_params: bool = False
    """Whether its parameters stay fp32 as the optimizer's master copy (see the module docstring)."""
    hf_trainer: bool = False
    """A fine-tuning tool built on the Hugging Face Trainer: data-parallel only (DDP, FSDP or DeepSpeed ZeRO)."""
    refuses_adapters: bool = False
    """Its launch settings have no LoRA/QLoRA adapters, so it refuses those layouts (they would train every weight)."""
    pure_bf16_without_zero: bool = False
    """Its settings train pure bf16 states (Layout.pure_bf16) where no DeepSpeed ZeRO runs: TRL loads the model in bf16
    (model_init_kwargs dtype), and the Trainer's AdamW then keeps bf16 moments and no master; LLaMA-Factory has
    pure_bf16. DeepSpeed's bf16 optimizer keeps an fp32 master, so ZeRO 1-3 are refused with it."""
    document_mask: bool = False
    """Its settings pack sequences with attention masked to each document (Layout.document_tokens): Axolotl's
    sample_packing, LLaMA-Factory's neat_packing, TRL's padding_free, each on FlashAttention's variable-length
    kernels."""
    head_split_why: str | None = None
    """How it fails when tp does not divide the attention and key/value heads (None: no such refusal)."""
    refusals: tuple[Refusal, ...] = ()
    """Its own refusals, beyond those its flags imply (refusals_of)."""
    default: bool = False
    """Whose launch settings a plan naming no engine carries when it runs the layout (agent/planner.py)."""
    launch_order: int | None = None
    """Its place among the fallbacks when the default engine cannot run the recommended layout (None: not one)."""
    plan_candidate: bool = False
    """A request naming no engine is planned once for each candidate, and the best layout's engine wins."""
    adapter_default: bool = False
    """The engine of a LoRA/QLoRA request that names none."""
    export_needs_node_size: bool = False
    """Its exporter also takes gpus_per_node (the machines per job)."""


_PYTORCH_MODEL = dict(attention="flash2", loss_kernel="materialised")
"""How a plain PyTorch model runs attention (SDPA's FlashAttention-2) and the loss (upcast logits): torchtitan's
and the Hugging Face models' (see the module docstring)."""
_HF_MODEL = dict(_PYTORCH_MODEL, fused_kernels=False, launch=Launch.eager)
_HF_TRAINER = dict(_HF_MODEL, hf_trainer=True)

ENGINE_PROFILES: tuple[EngineProfile, ...] = (
    EngineProfile(
        "megatron", "Megatron-LM / Megatron-Core pretrain_gpt.py arguments (a bash array).",
        r"megatron(?:[\s-]*(?:lm|core))?(?![\s-]*turing)", "Megatron-LM",
        "trainplan.tools.engines.megatron:export_megatron", attention="flash", loss_kernel="fused",
        fused_kernels=True, launch=Launch.eager, recompute_modules=True,
        refuses_adapters=True, refusals=MEGATRON_REFUSALS, default=True, plan_candidate=True,
        head_split_why="Megatron-Core's TransformerConfig raises unless num_query_groups % "
                       "tensor_model_parallel_size == 0, and each rank holds whole heads"),
    EngineProfile(
        "deepspeed", "DeepSpeed ds_config JSON.", r"deep[\s-]*speed", "DeepSpeed",
        "trainplan.tools.engines.deepspeed:export_deepspeed", **_HF_MODEL, refusals=DEEPSPEED_REFUSALS,
        launch_order=2,
        head_split_why="DeepSpeed AutoTP gives TP rank r kv//tp + (r < kv%tp) key/value heads (DeepSpeed "
                       "deepspeed/module_inject/tp_shard.py get_shard_size), none to the ranks past the kv-th"),
    EngineProfile(
        "torchtitan", "torchtitan 0.2.x job TOML.", r"torch[\s-]*titan", "torchtitan",
        "trainplan.tools.engines.torchtitan:export_torchtitan", **_PYTORCH_MODEL,
        fused_kernels=True, launch=Launch.compile, fp32_params=True,
        refuses_adapters=True, refusals=TORCHTITAN_REFUSALS, launch_order=1, plan_candidate=True,
        head_split_why="torchtitan shards wq/wk/wv column-wise over the TP ranks and reads each rank's heads from "
                       "its shard (view(bs, seqlen, -1, head_dim)), so each must hold whole key/value heads"),
    EngineProfile(
        "accelerate", "Hugging Face Accelerate FSDP2/DDP config YAML (pure data-parallel layouts only).",
        r"(?:hf|hugging[\s-]*face)[\s-]*accelerate|accelerate(?=\s+(?:launch|library|fsdp|config))",
        "HF Accelerate", "trainplan.tools.engines.accelerate:export_accelerate", **_HF_MODEL, fp32_params=True,
        refusals=ACCELERATE_REFUSALS, launch_order=3, export_needs_node_size=True),
    EngineProfile(
        "axolotl", "Axolotl fine-tuning YAML: full, LoRA or QLoRA (data-parallel layouts only).", r"axolotl",
        "Axolotl", "trainplan.tools.engines.axolotl:export_axolotl", **_HF_TRAINER, adapter_default=True,
        document_mask=True),
    EngineProfile(
        "llamafactory", "LLaMA-Factory fine-tuning YAML: full, LoRA or QLoRA (data-parallel layouts only).",
        r"llama[\s-]*factory", "LLaMA-Factory", "trainplan.tools.engines.llamafactory:export_llamafactory",
        **_HF_TRAINER, pure_bf16_without_zero=True, document_mask=True),
    EngineProfile(
        "trl", "Hugging Face TRL SFTConfig + PEFT LoraConfig (+ BitsAndBytesConfig) keyword arguments, YAML.",
        r"trl", "TRL", "trainplan.tools.engines.trl:export_trl", **_HF_TRAINER, pure_bf16_without_zero=True,
        launch_order=4, document_mask=True),
)

PROFILES = {profile.name: profile for profile in ENGINE_PROFILES}
ENGINES = tuple(PROFILES)
"""The engine names, in the registry's order."""
HF_TRAINER_ENGINES = tuple(p.name for p in ENGINE_PROFILES if p.hf_trainer)
FP32_PARAM_ENGINES = tuple(p.name for p in ENGINE_PROFILES if p.fp32_params)
ENGINE_ATTENTION = {p.name: p.attention for p in ENGINE_PROFILES}
ENGINE_LOSS_KERNEL = {p.name: p.loss_kernel for p in ENGINE_PROFILES}
(DEFAULT_ENGINE,) = (p.name for p in ENGINE_PROFILES if p.default)
(ADAPTER_ENGINE,) = (p.name for p in ENGINE_PROFILES if p.adapter_default)
LAUNCH_FALLBACK = tuple(p.name for p in sorted((p for p in ENGINE_PROFILES if p.launch_order is not None),
                                               key=lambda p: p.launch_order))
ADAPTER_FALLBACK = tuple(name for name in LAUNCH_FALLBACK if not PROFILES[name].refuses_adapters)
"""The engines a LoRA/QLoRA request naming none is planned for, in order, when ADAPTER_ENGINE fits no layout."""
ADAPTER_ORDER = (ADAPTER_ENGINE, *ADAPTER_FALLBACK)
"""The engines a LoRA/QLoRA layout naming none is planned for and launched by: the first that runs it."""
PLAN_ENGINES = tuple(p.name for p in ENGINE_PROFILES if p.plan_candidate)
NON_HF_TRAINER_ENGINES = tuple(p.name for p in ENGINE_PROFILES if not p.hf_trainer)
"""The engines that are not Hugging Face Trainer tools (the report's choice when an engine refuses a layout)."""


def spoken(names) -> str:
    """Names as a sentence lists them: 'a, b or c'."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


ENGINE_LIST = spoken(ENGINES)
"""The engine names as a description lists them."""


def refusals_of(profile: EngineProfile) -> tuple[Refusal, ...]:
    """Everything `profile`'s engine refuses, in the order its exporter checks them: the parameter storage (bf16
    parameters engines), the head split, the adapters, the recompute modules, the Hugging Face Trainer rules, then
    its own."""
    engine = profile.name
    return (
        pure_bf16_refusal(engine, profile.pure_bf16_without_zero),
        *(() if profile.fp32_params else (param_storage_refusal(engine, " or ".join(FP32_PARAM_ENGINES)),)),
        *((head_split_refusal(engine, profile.head_split_why),) if profile.head_split_why else ()),
        *((adapter_refusal(engine, spoken(HF_TRAINER_ENGINES)),) if profile.refuses_adapters
          else (adapter_dropout_refusal(engine),)),
        *(() if profile.recompute_modules else (module_recompute_refusal(engine),)),
        *(() if profile.document_mask else (document_mask_refusal(engine, spoken(DOCUMENT_MASK_ENGINES)),)),
        optimizer_8bit_refusal(engine, profile.hf_trainer, spoken(HF_TRAINER_ENGINES)),
        *(hf_trainer_refusals(engine) if profile.hf_trainer else ()),
        *profile.refusals,
    )


DOCUMENT_MASK_ENGINES = tuple(p.name for p in ENGINE_PROFILES if p.document_mask)
"""The engines whose settings mask attention to each packed document (Layout.document_tokens)."""
ENGINE_REFUSALS = {p.name: refusals_of(p) for p in ENGINE_PROFILES}
"""Engine name -> its refusals, in the order its exporter checks them."""


def stores_fp32_params(engine: str) -> bool:
    """Layout.fp32_params as `engine` stores the parameters."""
    return engine in FP32_PARAM_ENGINES


def engine_knobs(engine: str) -> dict:
    """The Layout knobs an engine decides by how it runs: its parameter storage, its attention and loss kernels,
    whether its norms, rotary and SwiGLU are fused, and how it launches kernels. A search given the engine takes
    these where the request sets none."""
    profile = PROFILES[engine]
    return {"fp32_params": stores_fp32_params(engine), "attention": profile.attention,
            "loss_kernel": profile.loss_kernel, "fused_kernels": profile.fused_kernels, "launch": profile.launch.value}


ENGINE_DECIDED_KNOBS = tuple(engine_knobs(ENGINES[0]))
"""The names of the knobs engine_knobs sets (every engine sets the same ones)."""


def selects_recompute_modules(engine: str | None) -> bool:
    """Whether `engine` runs selective recompute of any module set (None: any engine will do)."""
    return engine is None or PROFILES[engine].recompute_modules


def check_engine(engine: str, error: type[InputError] = InputError) -> None:
    """Raise `error` unless `engine` is a registry engine."""
    if engine not in PROFILES:
        raise error(f"engine='{engine}' is not one of: {', '.join(ENGINES)}")


def job_refusal_knobs(job) -> dict[str, int]:
    """The knobs every refusal reads that one value serves for a whole job (a ParallelConfig, or a search's SearchJob
    whose layouts share them), as codes: precision, optimizer_offload, adapter (1 for lora/qlora), fp32_params,
    dropout_on_output, pure_bf16, documents (1 where attention runs within packed documents) and optimizer_8bit."""
    return dict(precision=PRECISION_CODES[job.precision], optimizer_offload=int(job.optimizer_offload),
                adapter=int(is_lora(job.method)), fp32_params=int(job.fp32_params),
                dropout_on_output=int(dropout_on_output(job)), pure_bf16=int(job.pure_bf16),
                documents=int(document_span(job) < job.seq), optimizer_8bit=int(job.optimizer_8bit))


def runs(engine: str, model, knobs) -> np.ndarray:
    """True where `engine` runs the layouts: knobs holds numpy columns tp, pp, cp, ep, zero, dp, dp_shard, vpp,
    schedule (codes as in codes.py) and recompute_modules (1 where selective recompute reruns more than the
    attention core), and the job's job_refusal_knobs."""
    check_engine(engine)
    ok = np.ones(np.broadcast(knobs.tp, knobs.pp, knobs.zero, knobs.schedule).shape, dtype=bool)
    for refusal in ENGINE_REFUSALS[engine]:
        ok &= ~np.asarray(refusal.refuses(model, knobs), dtype=bool)
    return ok
