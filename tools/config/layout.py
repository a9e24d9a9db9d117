"""Resolve a Layout (contract.py) into one validated ParallelConfig.

Every check names all of its factors, e.g. "tp*pp*cp=24 does not divide gpus=64".
"""

from __future__ import annotations

import math
import numbers
import typing
from typing import Any

from trainplan.tools.config.codes import RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.config.contract import MAX_SEQUENCES_OR_TOKENS, Layout, default_seq
from trainplan.tools.core.enums import Dispatcher, GroupedGemm
from trainplan.tools.config.plan_defaults import default_gbs, default_gbs_reason
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.resolve import DEFAULT_RECOMPUTE_MODULES
from trainplan.tools.config.resolve import module_applies
from trainplan.tools.core.enums import OffloadModule
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Attention, Precision, Recompute, RecomputeModule, Schedule
from trainplan.tools.config.validity import Knobs, check
from trainplan.tools.config.resolve import is_lora, resolve_method, resolved_double_quant, resolved_fp32_norms
from trainplan.tools.config.resolve import resolved_loss_kernel
from trainplan.tools.core.enums import LoraDropoutPosition, LossKernel, Method
from trainplan.tools.hardware.counting import count_params


def _whole_number_knobs() -> tuple[str, ...]:
    """The Layout fields typed as whole numbers (int or int | None), read from the contract."""
    out = []
    for name, info in Layout.model_fields.items():
        kinds = typing.get_args(info.annotation) or (info.annotation,)
        if int in kinds and float not in kinds:
            out.append(name)
    return tuple(out)


WHOLE_NUMBER_KNOBS = _whole_number_knobs()
"""tp, pp, mbs, gbs, seq, lora_rank, document_tokens, ...: a caller's value for one is a whole number or refused."""


def _whole(name: str, value: Any) -> Any:
    """A whole-number knob as an int (2.0 is 2); a bool, a string, a fraction or a non-finite number in one line."""
    if value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        return value
    whole_float = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    if whole_float and abs(value) <= MAX_SEQUENCES_OR_TOKENS:
        return int(value)
    raise InputError(f"{name}={value!r} must be a whole number of at most {MAX_SEQUENCES_OR_TOKENS:,}")


def _positive(name: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise InputError(f"{name}={value} must be a positive number")


def _choice(enum: type, name: str, value):
    try:
        return enum(value)
    except ValueError:
        options = ", ".join(member.value for member in enum)
        raise InputError(f"{name}='{value}' is not one of: {options}") from None


def resolve_recompute_modules(model: ModelSpec, recompute: Recompute,
                              modules: str | tuple | list | None) -> tuple[RecomputeModule, ...] | None:
    """The modules selective recompute reruns, in RecomputeModule order (recompute.py); None unless
    recompute is selective. Text is split at commas ("layernorm,mla_up_proj,moe_act")."""
    if isinstance(modules, str):
        modules = [part.strip() for part in modules.split(",") if part.strip()]
    if modules is None or (recompute is not Recompute.selective and not modules):
        return DEFAULT_RECOMPUTE_MODULES if recompute is Recompute.selective else None
    if recompute is not Recompute.selective:
        raise InputError(f"recompute_modules needs recompute=selective (got recompute={recompute.value}): "
                         "use --recompute selective or drop the modules")
    if not modules:
        raise InputError("recompute_modules is empty: name at least one module, or use recompute=none")
    chosen = {_choice(RecomputeModule, "recompute_modules", m) for m in modules}
    missing = [m.value for m in RecomputeModule if m in chosen and not module_applies(model, m)]
    if missing:
        raise InputError(f"{model.name} has no {', '.join(missing)} module to recompute: "
                         "mla_up_proj needs MLA, moe and moe_act an MoE layer, mlp a dense layer")
    return tuple(m for m in RecomputeModule if m in chosen)


def resolve_offload_modules(model: ModelSpec, modules: str | tuple | list | None) -> tuple[OffloadModule, ...] | None:
    """The modules whose activations are offloaded (offload.py), in OffloadModule order; None for
    none. Text is split at commas ("expert_fc1,moe_act")."""
    if isinstance(modules, str):
        modules = [part.strip() for part in modules.split(",") if part.strip()]
    if not modules:
        return None
    chosen = {_choice(OffloadModule, "offload_modules", m) for m in modules}
    moe_only = [m.value for m in (OffloadModule.expert_fc1, OffloadModule.moe_act) if m in chosen]
    if moe_only and not model.is_moe:
        raise InputError(f"{model.name} is dense: {', '.join(moe_only)} offloading needs an MoE model")
    return tuple(m for m in OffloadModule if m in chosen)


def resolve_config(model: ModelSpec, gpus: int, layout: Layout | None = None, *, fp8_supported: bool = True,
                   **given: Any) -> ParallelConfig:
    """Validate a layout for a model on gpus GPUs and return it with every knob resolved.

    The knobs are the fields of contract.Layout, given as a Layout or as keywords (a None keyword
    means the field's default). Every field reaches the ParallelConfig; the checks below are the
    rules that relate them to the model and the GPU count.
    """
    values = _layout_values(layout, given)
    values.update({name: _whole(name, values[name]) for name in WHOLE_NUMBER_KNOBS})
    tp, pp, cp, ep, vpp, zero, mbs, gbs, seq = (values[k] for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs",
                                                                    "gbs", "seq"))
    recompute, schedule, precision = values["recompute"], values["schedule"], values["precision"]
    sequence_parallel, tp_comm_overlap = values["sequence_parallel"], values["tp_comm_overlap"]
    for name, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("vpp", vpp),
                        ("mbs", mbs), ("gbs", gbs), ("seq", seq), ("etp", values["etp"]),
                        ("dp_shard", values["dp_shard"]),
                        ("capacity_factor", values["capacity_factor"]), ("document_tokens", values["document_tokens"])):
        _positive(name, value)
    if zero not in (0, 1, 2, 3):
        raise InputError(f"zero={zero} is not a ZeRO stage: use 0, 1, 2 or 3")
    recompute = _choice(Recompute, "recompute", recompute)
    recompute_modules = resolve_recompute_modules(model, recompute, values["recompute_modules"])
    precision = _choice(Precision, "precision", precision)
    attention = _choice(Attention, "attention", values["attention"])
    offload_modules = resolve_offload_modules(model, values["offload_modules"])
    if not values["save_mlp_act_output"] and not module_applies(model, RecomputeModule.mlp):
        raise InputError(f"{model.name} has no dense MLP layer: save_mlp_act_output=false applies to dense MLPs; "
                         "use --save-mlp-act-output, or recompute_modules=moe_act for the experts")
    moe_knobs = [name for name, value, default in (
        ("capacity_factor", values["capacity_factor"], None), ("force_balance", values["force_balance"], False),
        ("dispatcher", values["dispatcher"], Dispatcher.alltoall.value),
        ("grouped_gemm", values["grouped_gemm"], GroupedGemm.per_expert.value))
        if value is not None and getattr(value, "value", value) != default]
    if moe_knobs and not model.is_moe:
        raise InputError(f"{', '.join(moe_knobs)}: MoE routing and expert settings, and {model.name} is dense: "
                         "drop " + ", ".join(f"--{name.replace('_', '-')}" for name in moe_knobs))
    if values["pure_bf16"] and (values["fp32_params"] or values["optimizer_offload"]):
        clash = ("fp32_params (an fp32 master)" if values["fp32_params"] else
                 "optimizer_offload (the offloading engines keep an fp32 master on the CPU)")
        raise InputError(f"pure_bf16 keeps no fp32 master, and {clash} needs one: drop one of them")
    if values["optimizer_8bit"] and (values["optimizer_offload"] or values["bf16_moments"]):
        clash = ("optimizer_offload (the offloading engines run a 32-bit CPU Adam)" if values["optimizer_offload"]
                 else "bf16_moments (16-bit moments)")
        raise InputError(f"optimizer_8bit keeps Adam's moments in 8 bits on the GPU, and {clash} keeps them "
                         "otherwise: drop one of them")
    if values["fp8_activations"] and precision is not Precision.fp8:
        raise InputError("fp8_activations needs precision=fp8 (FP8 GEMMs): use --precision fp8 or drop it")
    if precision is Precision.fp8 and not fp8_supported:
        raise InputError("precision=fp8 needs FP8 tensor cores (Hopper or newer): use --precision bf16")
    method, lora_rank, lora_targets = resolve_method(values["method"], values["lora_rank"], values["lora_targets"],
                                                     model, precision)
    dropout = values["lora_dropout"]
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise InputError(f"lora_dropout={dropout!r} must be a probability from 0 to below 1 (e.g. 0.05)")
    if dropout and not is_lora(method):
        raise InputError(f"lora_dropout={dropout} needs --method lora or qlora (method is full)")
    alpha = values["lora_alpha"]
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha)
                              or alpha <= 0):
        raise InputError(f"lora_alpha={alpha!r} must be a positive number (e.g. 32, twice the rank)")
    if alpha is not None and not is_lora(method):
        raise InputError(f"lora_alpha={alpha:g} needs --method lora or qlora (method is full): drop it")
    if values["pure_bf16"] and is_lora(method):
        raise InputError(f"pure_bf16 sets the states of full training; with method {method.value} the frozen base "
                         "has none and the adapters' precision is the method's: drop --pure-bf16")
    dropout_position = _choice(LoraDropoutPosition, "lora_dropout_position", values["lora_dropout_position"])
    if dropout_position is not LoraDropoutPosition.pre and not is_lora(method):
        raise InputError(f"lora_dropout_position={dropout_position.value} needs --method lora or qlora "
                         "(method is full): drop it")
    if values["double_quant"] is not None and method is not Method.qlora:
        raise InputError(f"double_quant applies to qlora's 4-bit base (method is {method.value}): drop it")
    seq = seq or default_seq(model.max_seq_len, fine_tune=is_lora(method))
    loss_kernel = resolved_loss_kernel(_choice(LossKernel, "loss_kernel", values["loss_kernel"])
                                       if values["loss_kernel"] is not None else None, method)

    if schedule is None:
        schedule = Schedule.interleaved if vpp > 1 else Schedule.one_f_one_b
    schedule = _choice(Schedule, "schedule", schedule)
    dispatcher = _choice(Dispatcher, "dispatcher", values["dispatcher"])
    grouped_gemm = _choice(GroupedGemm, "grouped_gemm", values["grouped_gemm"])
    etp = values["etp"] if values["etp"] and values["etp"] != tp else None   # null: expert TP = tp
    if values["moe_a2a_overlap"]:
        check_moe_a2a_overlap_job(model, dispatcher)
    knobs = Knobs(gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, mbs=mbs, seq=seq, gbs=gbs,
                  schedule=SCHEDULE_CODES[schedule], sequence_parallel=sequence_parallel, etp=etp,
                  moe_a2a_overlap=values["moe_a2a_overlap"], recompute=RECOMPUTE_CODES[recompute],
                  dp_shard=values["dp_shard"], zero=zero)
    check(model, knobs)   # validity.RULES, the search's rules too (moe_a2a_overlap's ep, schedule, recompute)
    dp = int(knobs.dp)
    dp_shard = values["dp_shard"] if values["dp_shard"] and values["dp_shard"] != dp else None   # null: dp

    values.update(dp=dp, seq=seq, recompute=recompute, recompute_modules=recompute_modules,
                  offload_modules=offload_modules, schedule=schedule,
                  precision=precision, attention=attention, etp=etp, dp_shard=dp_shard, dispatcher=dispatcher,
                  grouped_gemm=grouped_gemm,
                  sequence_parallel=sequence_parallel and tp > 1, tp_comm_overlap=tp_comm_overlap and tp > 1,
                  method=method, lora_rank=lora_rank, lora_targets=lora_targets, loss_kernel=loss_kernel,
                  lora_dropout_position=dropout_position,
                  fp32_norms=resolved_fp32_norms(values["fp32_norms"], method),
                  double_quant=resolved_double_quant(values["double_quant"], method))
    return ParallelConfig(**values)


def check_moe_a2a_overlap_job(model: ModelSpec, dispatcher: Dispatcher) -> None:
    """What the whole job must have for Megatron-Core's combined 1F1B (transformer_config.py,
    overlap_moe_expert_parallel_comm): experts, and the alltoall or deepep dispatcher. Its conditions on
    each layout (ep, schedule, recompute) are validity.RULES, which the search applies per layout."""
    if not model.is_moe:
        raise InputError(f"moe_a2a_overlap: MoE routing and expert settings, and {model.name} is dense: "
                         "drop --moe-a2a-overlap")
    if dispatcher is Dispatcher.allgather:
        raise InputError("moe_a2a_overlap needs the alltoall or deepep dispatcher: use --dispatcher alltoall")


def resolve_with_batch(model: ModelSpec, gpus: int, *, fp8_supported: bool = True,
                       **knobs: Any) -> tuple[ParallelConfig, str | None]:
    """resolve_config, with a null gbs replaced by the shared default rule (contract.DEFAULT_GBS_RULE, the
    fine-tuning default for method lora/qlora, rounded up to a multiple of dp*mbs); also returns the note that says so (None when gbs was given)."""
    cfg = resolve_config(model, gpus, fp8_supported=fp8_supported, **knobs)
    if cfg.gbs is not None:
        return cfg, None
    unit = cfg.dp * cfg.mbs
    params = count_params(model).total
    fine_tune = is_lora(cfg.method)
    gbs = -(-default_gbs(cfg.seq, gpus, params, fine_tune) // unit) * unit
    cfg = resolve_config(model, gpus, fp8_supported=fp8_supported, **{**knobs, "gbs": gbs})
    return cfg, f"gbs not given: used {gbs} sequences; {default_gbs_reason(cfg.seq, gpus, params, fine_tune)}"


def _layout_values(layout: Layout | None, knobs: dict[str, Any]) -> dict[str, Any]:
    """Every Layout field: from `layout`, then the keywords that are not None, then the defaults."""
    unknown = sorted(set(knobs) - set(Layout.model_fields))
    if unknown:
        raise InputError(f"unknown layout knob(s) {', '.join(unknown)}: use {', '.join(Layout.model_fields)}")
    values = {name: info.default for name, info in Layout.model_fields.items()}
    if layout is not None:
        values.update({name: getattr(layout, name) for name in Layout.model_fields})
    values.update({name: value for name, value in knobs.items() if value is not None})
    return values
