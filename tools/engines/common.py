"""What every exporter shares: the result type, the export error, and the batch identity.

Batch identity (the contract's vocabulary, tools/config/contract.py; sequences):
    gbs = mbs x dp x m,   dp = gpus / (tp*pp*cp),   m = gradient-accumulation steps
          (with pp > 1, m is also the number of pipeline micro-batches per step).
Each exporter writes the three factors in the engine's own keys, and every file repeats the identity
so that a reader can check it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.config.engines import ENGINE_LIST
from trainplan.tools.core.enums import Attention
from trainplan.tools.core.enums import Launch, LossKernel, Method
from trainplan.tools.perf.finetune import DEFAULT_LORA_ALPHA_PER_RANK, targeted_linears
from trainplan.tools.config.resolve import document_span, is_lora
from trainplan.tools.core.enums import LoraTargets


class ExportError(InputError):
    """The layout cannot be written for this engine. One line: what the engine lacks and what to do."""


class ExportResult(BaseModel):
    """One engine's launch settings for one layout."""

    engine: str = Field(description=ENGINE_LIST)
    filename_suggestion: str = Field(description="a file name that fits the engine's convention")
    content: str = Field(description="the file's text, ready to save")
    format: Literal["args", "json", "toml", "yaml"] = Field(description="how content is written")
    notes: list[str] = Field(default_factory=list, description="what the engine maps differently, and what to add")


@dataclass(frozen=True)
class Batch:
    """global = micro x data_parallel x accumulation, in sequences."""

    micro: int
    data_parallel: int
    accumulation: int

    @property
    def global_(self) -> int:
        return self.micro * self.data_parallel * self.accumulation

    def identity(self) -> str:
        return (f"global batch {self.global_} = micro-batch {self.micro} x data-parallel {self.data_parallel}"
                f" x accumulation {self.accumulation}")


def batch_of(cfg: ParallelConfig) -> Batch:
    """The batch factors of a resolved layout; without a gbs, one micro-batch per data-parallel rank."""
    return Batch(micro=cfg.mbs, data_parallel=cfg.dp, accumulation=cfg.num_microbatches)


def layout_line(cfg: ParallelConfig) -> str:
    return (f"tp={cfg.tp} pp={cfg.pp} cp={cfg.cp} ep={cfg.ep} dp={cfg.dp} vpp={cfg.vpp} zero={cfg.zero}"
            f" schedule={cfg.schedule.value} recompute={cfg.recompute.value} precision={cfg.precision.value}"
            f" attention={cfg.attention.value} fused_kernels={str(cfg.fused_kernels).lower()}"
            f" seq={cfg.seq}")


def header(engine: str, model: ModelSpec, cfg: ParallelConfig, model_ref: str) -> list[str]:
    """Comment lines (without the leading '# ') that open every args/TOML/YAML export."""
    return [
        f"trainplan export for {engine}: {model_ref} ({model.name}) on {cfg.num_gpus} GPUs",
        f"layout: {layout_line(cfg)}",
        f"batch: {batch_of(cfg).identity()} (sequences of {cfg.seq} tokens)",
    ]


def comment_block(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def slug(text: str) -> str:
    """A file-name-safe form of a model reference."""
    out = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text.rsplit("/", 1)[-1])
    return out.strip("-.") or "model"


def fusion_note(cfg: ParallelConfig, fused_by_default: bool, compiled: bool = False) -> str | None:
    """What the layout's kernel knobs ask of an engine that does (Megatron) or does not (plain PyTorch
    models) fuse norms, rotary and SwiGLU by itself, or whose export compiles each block (`compiled`:
    torchtitan's [compile]): fused_kernels, launch, and save_mlp_act_output=false (a fused SwiGLU that
    recomputes its product, which no exported engine has a setting for); None when nothing needs doing."""
    notes = []
    fuses = fused_by_default or compiled
    if cfg.fused_kernels != fuses and cfg.fused_kernels:
        notes.append("fused_kernels=true: compile the model (torch.compile) or use fused kernels for RMSNorm, rotary"
                     " and SwiGLU; as loaded, these run as separate PyTorch ops and the step is slower than estimated")
    elif cfg.fused_kernels != fuses:
        who = "the compiled blocks fuse" if compiled else "this engine fuses"
        notes.append(f"fused_kernels=false has no setting here: {who} norms, rotary and SwiGLU, so the"
                     " step will be shorter than estimated")
    if cfg.attention is Attention.flash2 and fused_by_default:
        notes.append("attention=flash2 (FlashAttention-2) has no setting here: the engine runs Transformer Engine's"
                     " fused attention, which uses the GPU's own instructions, so on Hopper and newer the step will"
                     " be shorter than estimated")
    if cfg.attention is Attention.flash1:
        notes.append("attention=flash1 (a first-generation flash kernel) has no setting here: the engine runs its"
                     " current flash kernel, so the step will be shorter than estimated")
    if compiled and cfg.launch is Launch.eager:
        notes.append("launch=eager: this export compiles each block, so the host issues fewer kernels and small"
                     " layers take less time than estimated")
    elif cfg.launch is Launch.compile and not compiled:
        notes.append("launch=compile: compile the model with torch.compile (Inductor); run eagerly, every op waits on"
                     " the host and small layers take longer than estimated")
    elif cfg.launch is Launch.cuda_graphs:
        notes.append("launch=cuda_graphs: capture each layer's forward and backward in CUDA graphs (Megatron-Core"
                     " --cuda-graph-impl transformer_engine, or torch.compile mode=\"reduce-overhead\"); run"
                     " eagerly, small layers wait on the host and take longer than estimated")
    if not cfg.save_mlp_act_output:
        notes.append("save_mlp_act_output=false (a fused SwiGLU that recomputes its product in its backward, as"
                     " xformers.ops.swiglu) has no setting here: this engine keeps the product, 2sbf/t bytes per"
                     " layer and micro-batch more than planned; re-plan with --save-mlp-act-output to check it fits")
    return "; ".join(notes) or None


HF_ATTN_IMPLEMENTATION = {Attention.flash: "flash_attention_2", Attention.eager: "eager",
                          Attention.flash1: "flash_attention_2", Attention.flash2: "flash_attention_2"}
"""The layout's attention kernel as Hugging Face models name it (from_pretrained's attn_implementation; Axolotl's
attn_implementation key takes the same names). Transformers has no first-generation kernel: flash1 loads
FlashAttention-2, which runs faster than the plan (fusion_note says so)."""


def hf_attention_note(cfg: ParallelConfig) -> str:
    """How a Hugging Face model picks the layout's attention kernel (from_pretrained's attn_implementation)."""
    name = HF_ATTN_IMPLEMENTATION[cfg.attention]
    if cfg.attention is Attention.eager:
        return f'attention=eager: load the model with attn_implementation="{name}" (unfused s x s attention)'
    return (f'attention={cfg.attention.value}: load the model with attn_implementation="{name}" (or "sdpa", whose flash'
            ' backend runs the same kernel)')


@dataclass(frozen=True)
class Adapter:
    """The LoRA settings of a layout as the fine-tuning tools write them (None for method=full)."""

    method: str          # lora or qlora
    rank: int
    alpha: float         # Layout.lora_alpha, or DEFAULT_LORA_ALPHA_PER_RANK x rank
    all_linear: bool     # True: every linear layer of the blocks (PEFT "all-linear")
    modules: tuple[str, ...]  # Hugging Face module names of the targeted layers (attention targets)
    dropout: float = 0.0      # Layout.lora_dropout: PEFT's lora_dropout
    double_quant: bool = True  # Layout.double_quant (qlora): bitsandbytes' bnb_4bit_use_double_quant


# trainplan's linear names (finetune.targeted_linears) that Hugging Face models spell differently.
_HF_MODULE_NAMES = {"kv_a_proj": "kv_a_proj_with_mqa"}   # DeepSeek-V2/V3 modeling code


def adapter_of(model: ModelSpec, cfg: ParallelConfig) -> Adapter | None:
    """The adapter a lora/qlora layout trains: rank, alpha, and the targeted modules."""
    if not is_lora(cfg.method):
        return None
    targets = LoraTargets(cfg.lora_targets)
    modules = tuple(_HF_MODULE_NAMES.get(lin.name, lin.name) for lin in targeted_linears(model, False, targets))
    alpha = cfg.lora_alpha if cfg.lora_alpha is not None else DEFAULT_LORA_ALPHA_PER_RANK * cfg.lora_rank
    return Adapter(method=cfg.method.value, rank=cfg.lora_rank, alpha=int(alpha) if float(alpha).is_integer() else alpha,
                   all_linear=targets is LoraTargets.all_linear, modules=modules, dropout=cfg.lora_dropout,
                   double_quant=cfg.double_quant is not False)


MOE_ALL_LINEAR_NOTE = (
    "all-linear on an MoE model: the estimate counts a LoRA adapter on each routed expert's projections and none on"
    " the router; what the tools adapt depends on their releases (tests/test_export_finetune_tools.py): transformers"
    " 5 fuses the routed experts into 3D weights, which LLaMA-Factory's lora_target all and PEFT 0.18 leave frozen"
    " (attention, dense and shared-expert layers only), while PEFT 0.20 and later adapt them and the router too;"
    " compare model.print_trainable_parameters() with the estimate's adapter count")
"""Measured with get_peft_model on tiny Qwen3-MoE and DeepSeek-V3 configs: transformers 5.6 + PEFT 0.18.1 adapt
neither routed experts nor router; transformers 5.16/5.24 + PEFT 0.20/0.21 adapt both."""


def adapter_notes(adapter: Adapter | None, model: ModelSpec) -> list[str]:
    """What every fine-tuning export says about the adapter it writes."""
    if adapter is None:
        return ["method=full: every weight is trained (no adapter)"]
    twice = adapter.alpha == DEFAULT_LORA_ALPHA_PER_RANK * adapter.rank
    notes = [f"method={adapter.method}: LoRA rank {adapter.rank}, alpha {adapter.alpha:g} ({'2 x rank; ' if twice else ''}"
             f"alpha only scales the update), lora_dropout {adapter.dropout:g} as the estimate assumes"]
    if not adapter.all_linear:
        notes.append(f"attention targets written as Hugging Face module names {', '.join(adapter.modules)}:"
                     " check them against model.named_modules() for this architecture")
    elif model.is_moe:
        notes.append(MOE_ALL_LINEAR_NOTE)
    if adapter.method == "qlora":
        notes.append(f"qlora: base weights in 4-bit NF4 {'with' if adapter.double_quant else 'without'} double quantisation, "
                     "bf16 compute, and paged 32-bit AdamW (optim paged_adamw_32bit), as the estimate assumes (QLoRA "
                     "reference code)")
    return notes


def data_parallel_note(engine: str, cfg: ParallelConfig) -> str:
    """How a Hugging Face Trainer tool gets the data-parallel size: from the launcher's world size."""
    return (f"{engine} takes the data-parallel size from the launcher: start {cfg.num_gpus} processes"
            f" (e.g. accelerate launch or torchrun --nproc-per-node), one per GPU")


def base_model_note(key: str, model_ref: str) -> str:
    return (f"{key}: {model_ref} is the model as trainplan named it: put the Hugging Face repository id or a local"
            " path there if it differs")


def hf_optimizer(cfg: ParallelConfig) -> str | None:
    """The Hugging Face TrainingArguments optim (and Axolotl's optimizer) name a plan's Adam needs written: qlora's
    paged one (its states in CPU-evictable memory, 32-bit or, with optimizer_8bit, 8-bit), bitsandbytes' 8-bit AdamW
    with optimizer_8bit; None where the tool's default AdamW is the plan's."""
    if cfg.method is Method.qlora:
        return "paged_adamw_8bit" if cfg.optimizer_8bit else "paged_adamw_32bit"
    return "adamw_bnb_8bit" if cfg.optimizer_8bit else None


def packs_documents(tool: str, cfg: ParallelConfig) -> bool:
    """Whether a Hugging Face Trainer tool's export must pack documents behind a per-document attention mask
    (Layout.document_tokens below seq). Those tools mask through FlashAttention's variable-length kernels (the
    packed documents' position ids), which eager attention does not have: that plan is refused in one line."""
    if document_span(cfg) >= cfg.seq:
        return False
    if not cfg.attention.fused:
        raise ExportError(f"document_tokens with attention=eager: {tool} masks packed documents through "
                          "FlashAttention's variable-length kernels, which eager attention lacks: use --attention "
                          "flash2, or drop --document-tokens")
    return True


def liger_wanted(cfg: ParallelConfig) -> tuple[bool, bool]:
    """(the fused linear cross-entropy, the fused RMSNorm, RoPE and SwiGLU) a Hugging Face Trainer tool's export
    must switch on for the plan: the transformers models run neither, and Liger Kernel supplies both
    (liger_kernel.transformers apply_liger_kernel_to_llama: rope, rms_norm, swiglu and fused_linear_cross_entropy,
    each on by default)."""
    return cfg.loss_kernel is LossKernel.fused_linear, cfg.fused_kernels


def liger_notes(tool: str, cfg: ParallelConfig, all_or_nothing: bool) -> list[str]:
    """What a Hugging Face Trainer tool's Liger switch cannot say of the plan: a loss kernel it has no setting for,
    and (all_or_nothing: one switch for every Liger kernel) a plan that assumed only some of them."""
    notes = []
    loss, kernels = liger_wanted(cfg)
    if loss or kernels:
        planned = " and ".join(part for part, wanted in (("fused norms, rotary and SwiGLU", kernels),
                                                          ("the fused linear cross-entropy", loss)) if wanted)
        notes.append(f"the plan assumes {planned}, which Liger Kernel supplies to the transformers models: "
                     f"pip install liger-kernel (or re-plan with --unfused-kernels --loss-kernel materialised)")
    if cfg.loss_kernel in (LossKernel.chunked, LossKernel.fused):
        notes.append(f"loss_kernel={cfg.loss_kernel.value} has no {tool} setting: the transformers model upcasts the "
                     "whole logits (materialised), more memory than planned; re-plan with --loss-kernel materialised, "
                     "or fused_linear for Liger's fused linear cross-entropy")
    if all_or_nothing and loss != kernels:
        notes.append(f"{tool} switches Liger on whole (its RMSNorm, RoPE, SwiGLU and fused linear cross-entropy), "
                     + ("and the plan assumed the fused loss alone: the step will be shorter than estimated"
                        if loss else "and the plan assumed fused kernels with the whole logits: the logits will take "
                        "less memory than planned") + "; re-plan with --fused-kernels and --loss-kernel fused_linear")
    return notes


def selective_recompute_note(where: str) -> str:
    """The note for selective recompute in an engine with no such setting (`where`: the engine's config name)."""
    return (f"selective recompute (the attention core) has no {where} setting; FlashAttention"
            " recomputes it in the backward pass anyway")


@dataclass(frozen=True)
class ToolYaml:
    """What one fine-tuning tool's export writes (Axolotl, LLaMA-Factory, TRL): its YAML data, its own notes, the
    adapter, the key that names the base model, `todo` (what the user adds) and `head` (the tool's usage lines)."""

    data: dict
    notes: list[str]
    adapter: Adapter | None
    base_key: str
    todo: str
    head: list[str]


def finetune_yaml_export(engine: str, model: ModelSpec, cfg: ParallelConfig, model_ref: str,
                         tool: ToolYaml) -> ExportResult:
    """The shared end of the fine-tuning exports: the adapter, base-model, data-parallel and what-to-add notes
    after the tool's own, and the YAML file under its comment block (the layout header, then the usage lines)."""
    import yaml

    data, notes, adapter, base_key, todo, head = (tool.data, tool.notes, tool.adapter, tool.base_key, tool.todo,
                                                  tool.head)
    notes = [*notes, *adapter_notes(adapter, model), base_model_note(base_key, model_ref),
             data_parallel_note(engine, cfg), f"{todo}; {batch_of(cfg).identity()}"]
    lines = [*header(engine, model, cfg, model_ref), *head]
    return ExportResult(engine=engine, filename_suggestion=f"{slug(model_ref)}-{engine}.yaml",
                        content=comment_block(lines) + yaml.safe_dump(data, sort_keys=False), format="yaml",
                        notes=notes)

