"""How a layout's unset knobs resolve from its method and model: the defaults that tools/config/layout.py
applies and the perf models read back (tools/perf/finetune.py, loss.py and recompute.py explain the mechanisms).
"""

from __future__ import annotations

from trainplan.tools.core.enums import Attention, LoraDropoutPosition, LoraTargets, LossKernel, Method, RecomputeModule
from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.counting import is_moe_layer
from trainplan.tools.hardware.specs import ModelSpec

DEFAULT_LORA_RANK = 16
"""r when a LoRA method is chosen and no rank is given (PEFT/Axolotl examples use 8-64; QLoRA used 64)."""

DEFAULT_RECOMPUTE_MODULES = (RecomputeModule.core_attn,)
"""Megatron's default --recompute-modules (arguments.py): core_attn."""


def beyond_default_modules(modules) -> bool:
    """Whether a selective recompute module set reruns more than DEFAULT_RECOMPUTE_MODULES (what only an engine that
    selects modules runs: tools/config/engines.py selects_recompute_modules)."""
    return bool(set(modules or ()) - set(DEFAULT_RECOMPUTE_MODULES))


def is_lora(method: Method | str) -> bool:
    return Method(method) is not Method.full


def dropout_on_output(knobs) -> bool:
    """Whether a layout (a ParallelConfig or a search job) drops its adapters' outputs: lora_dropout above 0 with
    lora_dropout_position post (what only NeMo AutoModel's LoRA does; PEFT drops the input)."""
    return bool(knobs.lora_dropout > 0 and LoraDropoutPosition(knobs.lora_dropout_position) is LoraDropoutPosition.post)


def document_span(cfg) -> int:
    """The keys each query attends over in the model's math: the packed document's length (Layout.document_tokens)
    when attention is masked to documents, else the whole sequence; never more than the sequence."""
    return min(cfg.seq, cfg.document_tokens) if cfg.document_tokens else cfg.seq


def kernel_span(cfg) -> int:
    """The keys each query attends over as the attention kernel runs them: a fused kernel skips the blocks outside
    its document (document_span); unfused attention computes the full masked s x s scores."""
    return document_span(cfg) if Attention(cfg.attention).fused else cfg.seq


def resolve_method(method, lora_rank, lora_targets, model, precision) -> tuple[Method, int | None, LoraTargets | None]:
    """Validate the method knobs: (method, rank, targets); rank and targets are None for full."""
    try:
        method = Method(method)
    except ValueError:
        raise InputError(f"method='{method}' is not a fine-tuning method: use full, lora or qlora") from None
    if method is Method.full:
        if lora_rank is not None:
            raise InputError(f"lora_rank={lora_rank} needs --method lora or qlora (method is full)")
        return method, None, None
    try:
        targets = LoraTargets(lora_targets or LoraTargets.all_linear)
    except ValueError:
        raise InputError(f"lora_targets='{lora_targets}' is not one of: "
                         f"{', '.join(t.value for t in LoraTargets)}") from None
    if targets is LoraTargets.qv and model.attention_type == "mla":
        raise InputError(f"lora_targets=qv adapts q_proj and v_proj, which {model.name}'s multi-head latent attention "
                         "does not have: use attention or all-linear")
    rank = DEFAULT_LORA_RANK if lora_rank is None else lora_rank
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise InputError(f"lora_rank={lora_rank} must be a positive whole number (e.g. 16)")
    if rank > model.hidden_size:
        raise InputError(f"lora_rank={rank} is larger than the hidden size {model.hidden_size}: use a rank such as 16")
    if method is Method.qlora and str(getattr(precision, "value", precision)) == "fp8":
        raise InputError("method=qlora computes in bf16 from a 4-bit base: use --precision bf16")
    return method, rank, targets


def resolved_double_quant(double_quant, method) -> bool | None:
    """Layout.double_quant: as given, else true for qlora; None for the other methods (no 4-bit base)."""
    if Method(method) is not Method.qlora:
        return None
    return True if double_quant is None else bool(double_quant)


def resolved_fp32_norms(fp32_norms, method) -> bool:
    """Layout.fp32_norms: as given, else true for qlora (PEFT's k-bit preparation, fp32_norm_changes)."""
    if fp32_norms is not None:
        return bool(fp32_norms)
    return Method(method) is Method.qlora


def resolved_loss_kernel(loss_kernel, method) -> LossKernel:
    """The loss kernel of a layout: the one given, else the method's stack's (tools/perf/loss.py)."""
    if loss_kernel is not None:
        return LossKernel(loss_kernel)
    return LossKernel.materialised if is_lora(method) else LossKernel.fused


def module_applies(model: ModelSpec, module: RecomputeModule) -> bool:
    """Whether the model has the module at all (mla_up_proj needs MLA, moe/moe_act an MoE layer,
    mlp a dense layer)."""
    if module is RecomputeModule.mla_up_proj:
        return model.attention_type == "mla"
    if module in (RecomputeModule.moe, RecomputeModule.moe_act):
        return model.is_moe
    if module is RecomputeModule.mlp:
        return any(not is_moe_layer(model, i) for i in range(model.num_layers))
    return True
