"""The tool set of the agent: one explicit tuple of tools, their OpenAI schemas, and `dispatch`.

Each Tool has a name, a description, a pydantic arguments model and a function that takes the
validated arguments and returns a JSON-able dict with DESIGN.md keys (memory_gib.total,
time.step_s, training.cost_usd, config, ...). Argument names are the DESIGN.md vocabulary.

- Every argument field must carry a description; a Tool whose model lacks one fails when it is
  defined (at import), as smolagents' @tool does.
- An optional knob is typed ``X | None`` with default None, so OpenAI strict mode (every field
  required) works: the model sends null and the tool resolves the default.
- `openai_tools(strict=True)` generates the function schemas from the models; nothing is written
  by hand.
- `dispatch(name, arguments_json)` validates and calls. An invalid call (unknown tool, bad JSON,
  validation error, the project's InputError) returns ``{"error": "..."}`` with one actionable
  line, and never raises: the agent loop sends it back to the model as the tool's reply.

The default global batch (`default_gbs`) lives here so the tools, the offline planner and the
prompts share one rule.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import catalog
from .cost import DEFAULT_GOODPUT, parse_tokens, training_cost
from .counting import count_params, flops_per_token
from .errors import InputError
from .estimate import estimate
from .memory import memory_breakdown
from .pipeline import render_ascii, simulate
from .specs import ParallelConfig, Schedule

__all__ = ["Tool", "TOOLS", "TOOLS_BY_NAME", "tool_names", "openai_tools", "dispatch", "default_gbs",
           "DEFAULT_GBS_RULE", "TARGET_TOKENS_PER_STEP", "estimate_kwargs"]

# --- the default global batch ---------------------------------------------------------------------

TARGET_TOKENS_PER_STEP = 4 * 2**20
"""About 4M tokens per step: Llama 3 405B started at 4M tokens per batch (Llama 3 paper §3.4.1);
GPT-3 175B used 3.2M (Brown et al. 2020, Table 2.1)."""
GPUS_PER_SEQUENCE = 8
"""At least one sequence per 8 GPUs, so that even a TP8 layout gives every data-parallel rank a
micro-batch (Llama 3 405B on 16K GPUs: 16M tokens per step at seq 8192 = 2048 sequences)."""
DEFAULT_GBS_RULE = (
    "the power of two nearest to 4M tokens / seq (4M = 2^22), raised to the next power of two of "
    "gpus/8 when that is larger, so that data parallelism divides it (seq 8192: 512 sequences; "
    "16,384 GPUs: 2048)"
)


def default_gbs(seq: int, gpus: int) -> int:
    """Global batch in sequences when the request gives none; see DEFAULT_GBS_RULE."""
    if seq <= 0 or gpus <= 0:
        raise InputError(f"seq={seq} and gpus={gpus} must be positive to choose a default gbs")
    by_tokens = 2 ** max(0, round(math.log2(TARGET_TOKENS_PER_STEP / seq)))
    by_gpus = 2 ** math.ceil(math.log2(max(1.0, gpus / GPUS_PER_SEQUENCE)))
    return max(by_tokens, by_gpus)


# --- tool definitions ------------------------------------------------------------------------------


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown keys are an error the model can fix."""

    model_config = ConfigDict(extra="forbid")


def _undescribed(args: type[BaseModel]) -> list[str]:
    return [name for name, info in args.model_fields.items() if not (info.description or "").strip()]


@dataclass(frozen=True)
class Tool:
    """One tool: what the model sees (name, description, argument schema) and what runs."""

    name: str
    description: str
    args: type[ToolArgs]
    function: Callable[[Any], dict]

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise TypeError(f"tool '{self.name}' has no description")
        missing = _undescribed(self.args)
        if missing:
            raise TypeError(f"tool '{self.name}': argument(s) {', '.join(missing)} of {self.args.__name__} "
                            "have no description; add Field(description=...)")

    def schema(self, strict: bool = True) -> dict:
        """The OpenAI function-tool schema, generated from the arguments model."""
        parameters = copy.deepcopy(self.args.model_json_schema())
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        function: dict[str, Any] = {"name": self.name, "description": self.description}
        if strict:
            parameters = _strict(parameters)
            function["strict"] = True
        function["parameters"] = parameters
        return {"type": "function", "function": function}


def _strict(schema: dict) -> dict:
    """OpenAI strict mode: every property required, no extra keys, no null defaults."""
    if schema.get("type") == "object":
        schema["additionalProperties"] = False
        schema["required"] = list(schema.get("properties", {}))
    for prop in schema.get("properties", {}).values():
        _strict(prop)
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    for variant in schema.get("anyOf", []):
        _strict(variant)
    if isinstance(schema.get("items"), dict):
        _strict(schema["items"])
    for sub in schema.get("$defs", {}).values():
        _strict(sub)
    return schema


def _opt(description: str) -> Any:
    """An optional knob: None means the documented default."""
    return Field(default=None, description=description)


RecomputeName = Literal["none", "selective", "full"]
ScheduleName = Literal[tuple(s.value for s in Schedule)]  # type: ignore[valid-type]
PrecisionName = Literal["bf16", "fp8"]


class JobArgs(ToolArgs):
    model: str = Field(description="catalog model name (llama3-8b, llama3-70b, llama3-405b, deepseek-v3, "
                                   "gpt3-175b, ...; see list_catalog) or a path to an HF config.json")
    gpu: str = Field(description="catalog GPU name (h100-sxm-80gb, h800-sxm-80gb, a100-sxm-80gb, h200-sxm-141gb, "
                                 "b200, gb200-nvl72, mi300x, l40s, rtx-4090, ...; see list_catalog; aliases like h100 "
                                 "or mi300x work) or a path to a GPU JSON")
    gpus: int = Field(description="total GPUs")


class LayoutArgs(JobArgs):
    tp: int | None = _opt("tensor-parallel size, with sequence parallelism; null: 1")
    pp: int | None = _opt("pipeline-parallel size; null: 1")
    cp: int | None = _opt("context-parallel size; null: 1")
    ep: int | None = _opt("expert-parallel size (MoE models only; must divide dp*cp); null: 1")
    vpp: int | None = _opt("virtual pipeline stages per rank; >1 selects the interleaved schedule; null: 1")
    zero: int | None = _opt("ZeRO stage 0-3: 1 shards optimizer states, 2 also gradients, 3 also weights "
                            "(FSDP); null: 1")
    mbs: int | None = _opt("micro-batch size, sequences; null: 1")
    seq: int | None = _opt("sequence length, tokens; null: the model's default")
    recompute: RecomputeName | None = _opt("activation recompute: none (keep all), selective (recompute the "
                                           "attention core), full (rerun each layer's forward); null: selective")
    schedule: ScheduleName | None = _opt("pipeline schedule: gpipe, 1f1b, interleaved (needs vpp>1), zb-h1, "
                                         "dualpipe (even pp); null: 1f1b, or interleaved when vpp>1")
    precision: PrecisionName | None = _opt("GEMM precision: bf16 or fp8 (Hopper and newer); null: bf16")
    attention: Literal["flash", "eager"] | None = _opt(
        "attention kernel: flash (fused, causal blocks skipped) or eager (unfused s x s scores, as 2021-22 "
        "Megatron); null: flash")
    gpus_per_node: int | None = _opt("GPUs per NVLink/xGMI domain (PCIe cards: per host); null: the GPU's catalog value")
    intra_node_bw: float | None = _opt("NVLink/xGMI (PCIe cards: PCIe) GB/s per GPU per direction; null: the GPU's "
                                       "catalog value")
    inter_node_bw: float | None = _opt("network GB/s per GPU per direction; null: the GPU's catalog value")
    optimizer_offload: bool | None = _opt("ZeRO-Offload: optimizer states and step on the CPU; null: false")
    bf16_grads: bool | None = _opt("bf16 gradients (DeepSpeed's 16 B/param) instead of an fp32 buffer; null: false")
    tp_comm_overlap: bool | None = _opt("overlap tensor-parallel communication with the GEMMs (Megatron "
                                        "--tp-comm-overlap); null: false")


class MemoryArgs(LayoutArgs):
    gbs: int | None = _opt("global batch, sequences; sets the micro-batches in flight (gbs / (dp*mbs)); "
                           "null: one micro-batch per step")
    headroom_gib: float | None = _opt("GiB per GPU to keep free when deciding fits; null: 0")


class StepArgs(LayoutArgs):
    gbs: int | None = _opt(f"global batch, sequences; null: the default rule ({DEFAULT_GBS_RULE})")


class CatalogArgs(ToolArgs):
    kind: Literal["all", "models", "gpus"] | None = _opt("which catalog to list: all, models or gpus; null: all")


class DescribeArgs(ToolArgs):
    model: str = Field(description="catalog model name or a path to an HF config.json")
    seq: int | None = _opt("sequence length for the FLOPs per token (attention grows with it); "
                           "null: the model's default")


class PipelineArgs(ToolArgs):
    schedule: ScheduleName = Field(description="gpipe, 1f1b, interleaved (needs vpp>1), zb-h1 or dualpipe "
                                               "(even pp and an even number of micro-batches)")
    pp: int = Field(description="pipeline stages (ranks)")
    num_microbatches: int = Field(description="micro-batches per step, m = gbs / (dp*mbs)")
    vpp: int | None = _opt("model chunks per rank for the interleaved schedule; null: 1")
    forward_s: float | None = _opt("seconds of one micro-batch's forward through one stage; null: 1.0 "
                                   "(then times are in units of a forward)")
    backward_s: float | None = _opt("seconds of one micro-batch's backward (input + weight gradient) "
                                    "through one stage; null: 2 x forward_s")
    weight_grad_s: float | None = _opt("the weight-gradient part of backward_s, run apart by zb-h1 and "
                                       "dualpipe; null: backward_s / 2")
    p2p_s: float | None = _opt("seconds to send one activation or gradient between adjacent stages; null: 0")
    timeline: bool | None = _opt("also return an ASCII timeline (ranks x time); null: false")


class CostArgs(ToolArgs):
    tokens: float | str = Field(description="training tokens: a number (15.6e12) or text with a suffix "
                                            "('15T', '300B')")
    step_s: float = Field(description="seconds per training step, from estimate_step_time (time.step_s)")
    gbs: int = Field(description="global batch, sequences per step")
    seq: int = Field(description="sequence length, tokens")
    gpus: int = Field(description="total GPUs")
    gpu: str | None = _opt("catalog GPU name, for its default price; null: price must be given")
    price: float | None = _opt("dollars per GPU-hour; null: the GPU's catalog price")
    goodput: float | None = _opt(f"share of wall-clock time that trains, in (0, 1]; null: {DEFAULT_GOODPUT} "
                                 "(Llama 3 reports more than 90% effective training time)")


class SearchArgs(JobArgs):
    gbs: int | None = _opt(f"global batch, sequences; null: the default rule ({DEFAULT_GBS_RULE})")
    seq: int | None = _opt("sequence length, tokens; null: the model's default")
    tokens: float | str | None = _opt("training tokens, a number or '15T'; needed to rank by cost or days "
                                      "and to report training cost")
    price: float | None = _opt("dollars per GPU-hour; null: the GPU's catalog price")
    precision: PrecisionName | None = _opt("GEMM precision: bf16 or fp8; null: bf16")
    objective: Literal["throughput", "cost", "time"] | None = _opt(
        "what to rank by: throughput (most tokens/s), cost (fewest dollars; GPU-seconds per step without "
        "tokens), time (fewest days); null: throughput")
    top_k: int | None = _opt("how many of the best layouts to return; null: 5")
    tp: int | None = _opt("pin the tensor-parallel size; null: search it")
    pp: int | None = _opt("pin the pipeline-parallel size; null: search it")
    cp: int | None = _opt("pin the context-parallel size; null: search it")
    ep: int | None = _opt("pin the expert-parallel size; null: search it")
    vpp: int | None = _opt("pin the virtual pipeline stages per rank; null: search it")
    zero: int | None = _opt("pin the ZeRO stage 0-3; null: search it")
    mbs: int | None = _opt("pin the micro-batch size; null: search it")
    recompute: RecomputeName | None = _opt("pin the recompute mode: none, selective or full; null: search it")
    schedule: ScheduleName | None = _opt("pin the pipeline schedule; null: search it")
    max_gpus: int | None = _opt("also try other GPU counts: max_gpus and halvings of it down to what the model "
                                "needs, plus gpus; null: exactly gpus")
    deadline_days: float | None = _opt("reject layouts whose training takes longer than this many days "
                                       "(needs tokens); null: no deadline")
    budget_usd: float | None = _opt("reject layouts whose training costs more dollars than this "
                                    "(needs tokens); null: no budget")
    headroom_gib: float | None = _opt("GiB per GPU to keep free when deciding fits; null: 0")
    allow_cross_node_tp: bool | None = _opt("allow tp larger than a node; null: false")
    goodput: float | None = _opt(f"share of wall-clock time that trains; null: {DEFAULT_GOODPUT}")


# --- tool functions ------------------------------------------------------------------------------


def _given(args: BaseModel, *exclude: str) -> dict:
    """The arguments that were given (not None), minus `exclude`."""
    return {k: v for k, v in args.model_dump().items() if v is not None and k not in exclude}


def estimate_kwargs(config: dict) -> dict:
    """A result's `config` -> the keyword arguments of `estimate` that reproduce it."""
    skip = {"dp", "num_microbatches", "gpus_per_host", "interconnect"}   # derived, not knobs
    return {k: v for k, v in config.items() if k not in skip}


def _list_catalog(args: CatalogArgs) -> dict:
    kind = args.kind or "all"
    out: dict[str, Any] = {}
    if kind in ("all", "models"):
        models = []
        for name in catalog.model_names():
            spec = catalog.load_model(name)
            counts = count_params(spec)
            models.append({
                "name": name, "model_type": spec.model_type, "params_total": counts.total,
                "params_active": counts.active, "num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
                "num_attention_heads": spec.num_attention_heads, "num_kv_heads": spec.num_kv_heads,
                "num_experts": spec.num_experts, "seq": spec.max_seq_len,
            })
        out["models"] = models
    if kind in ("all", "gpus"):
        out["gpus"] = [catalog.load_gpu(name).model_dump(
            include={"name", "architecture", "interconnect", "aliases", "bf16_tflops", "fp8_tflops", "memory_gib",
                     "hbm_bandwidth_gb_s", "intra_node_bw", "inter_node_bw", "gpus_per_node", "gpus_per_host",
                     "price", "price_date", "efficiency_basis"})
            | {"gpus_per_host": catalog.load_gpu(name).host_size} for name in catalog.gpu_names()]
    out["units"] = ("tflops: dense peak TFLOP/s; memory_gib: GiB (2^30 B); bandwidths: GB/s per GPU per "
                    "direction; price: dollars per GPU-hour; gpus_per_node: GPUs in one NVLink/xGMI domain "
                    "(PCIe cards: one host); gpus_per_host: GPUs per server; efficiency_basis: assumed means no "
                    "public fit for that GPU family")
    return out


def _describe_model(args: DescribeArgs) -> dict:
    spec = catalog.load_model(args.model)
    seq = args.seq or spec.max_seq_len
    if seq <= 0:
        raise InputError(f"seq={seq} must be a positive number of tokens")
    counts = count_params(spec)
    flops = flops_per_token(spec, seq)
    architecture = spec.model_dump(exclude={"name", "moe_layers"})
    architecture = {k: v for k, v in architecture.items() if v not in (0, False, None) or k in (
        "num_experts", "tie_word_embeddings")}
    architecture["num_moe_layers"] = len(spec.moe_layers)
    return {
        "model": spec.name,
        "architecture": architecture,
        "params": {"total": counts.total, "active": counts.active, "mtp": counts.mtp,
                   "embedding": counts.embedding, "lm_head": counts.lm_head, "expert": counts.expert},
        "flops_per_token": {"seq": seq, "forward": flops.forward, "training": flops.training(),
                            "breakdown": flops.breakdown,
                            "convention": "2 FLOPs per multiply-add; training = 3 x forward (no recompute); "
                                          "attention without the causal discount"},
    }


def _calculate_memory(args: MemoryArgs) -> dict:
    result = estimate(**_given(args))
    cfg = ParallelConfig(**{k: v for k, v in result["config"].items() if k in ParallelConfig.model_fields})
    memory = memory_breakdown(catalog.load_model(args.model), cfg, catalog.load_gpu(args.gpu),
                              headroom_gib=args.headroom_gib or 0.0)
    out = {"params": result["params"], "memory_gib": result["memory_gib"], "fits": result["fits"]}
    if not result["fits"]:
        out["reason"] = result["reason"]
    out["worst_stage"] = memory.worst_stage
    out["per_stage"] = memory.per_stage
    out["config"] = result["config"]
    out["convention"] = ("GiB = 2^30 bytes, per GPU on the most loaded rank; bf16 weights 2 B/param, fp32 "
                         "gradients 4, fp32 master + Adam m + v 12, sharded by the ZeRO stage")
    return out


def _with_default_gbs(args: StepArgs | SearchArgs) -> tuple[dict, list[str]]:
    kwargs = _given(args)
    notes = []
    if args.gbs is None:
        seq = args.seq or catalog.load_model(args.model).max_seq_len
        kwargs["gbs"] = default_gbs(seq, args.gpus)
        notes.append(f"gbs not given: used {kwargs['gbs']} sequences by the default rule ({DEFAULT_GBS_RULE})")
    return kwargs, notes


def _estimate_step_time(args: StepArgs) -> dict:
    kwargs, notes = _with_default_gbs(args)
    result = estimate(**kwargs)
    out = {"time": result["time"], "fits": result["fits"]}
    if not result["fits"]:
        out["reason"] = result["reason"]
    out["memory_gib"] = result["memory_gib"]
    out["config"] = result["config"]
    if notes:
        out["notes"] = notes
    return out


def _simulate_pipeline(args: PipelineArgs) -> dict:
    forward = 1.0 if args.forward_s is None else args.forward_s
    backward = 2 * forward if args.backward_s is None else args.backward_s
    result = simulate(args.schedule, args.pp, args.num_microbatches, vpp=args.vpp or 1, forward_s=forward,
                      backward_s=backward, weight_grad_s=args.weight_grad_s, p2p_s=args.p2p_s or 0.0,
                      record_timeline=bool(args.timeline))
    out = result.to_dict(include_timeline=False)
    if args.timeline:
        out["ascii"] = render_ascii(result)
    return out


def _estimate_cost(args: CostArgs) -> dict:
    tokens = parse_tokens(args.tokens)
    for name in ("step_s", "gbs", "seq", "gpus"):
        if getattr(args, name) <= 0:
            raise InputError(f"{name}={getattr(args, name)} must be positive")
    if args.price is None and args.gpu is None:
        raise InputError("give price (dollars per GPU-hour) or gpu (for its catalog price)")
    price = catalog.load_gpu(args.gpu).price if args.price is None else args.price
    cost = training_cost(tokens, args.gbs * args.seq, args.step_s, args.gpus, price,
                         DEFAULT_GOODPUT if args.goodput is None else args.goodput)
    return {"training": cost.to_dict()}


def _search_configs(args: SearchArgs) -> dict:
    from .search import search

    kwargs, notes = _with_default_gbs(args)
    model, gpu, gpus = kwargs.pop("model"), kwargs.pop("gpu"), kwargs.pop("gpus")
    if "tokens" in kwargs:
        kwargs["tokens"] = parse_tokens(kwargs["tokens"])
    kwargs.setdefault("top_k", 5)
    result = search(model, gpu, gpus, **kwargs)
    for candidate in result.get("candidates", []):
        candidate.pop("pipeline", None)
    if notes:
        result["notes"] = [*result.get("notes", []), *notes]
    return result


TOOLS: tuple[Tool, ...] = (
    Tool("list_catalog",
         "List the catalog: models (parameters, layers, heads, experts, default seq) and GPUs (dense BF16/FP8 "
         "peaks, HBM GiB, NVLink and network GB/s, GPUs per node, dollars per GPU-hour).",
         CatalogArgs, _list_catalog),
    Tool("describe_model",
         "One model's architecture, exact parameter counts (total, active, MTP apart) and FLOPs per token "
         "at a sequence length.",
         DescribeArgs, _describe_model),
    Tool("calculate_memory",
         "Memory per GPU of one layout on the most loaded rank, in GiB: weights, gradients, optimizer, "
         "activations, other, total, capacity; whether it fits (with the reason when not) and every "
         "pipeline stage. Call this first: a layout that does not fit needs no timing.",
         MemoryArgs, _calculate_memory),
    Tool("estimate_step_time",
         "Step time of one layout built bottom-up (GEMMs, attention, collectives, pipeline bubble): "
         "time.step_s, tokens_per_s, MFU, HFU, bubble_fraction and a breakdown (compute, comm/tp, comm/cp, "
         "comm/ep, bubble, comm/dp, optimizer) that sums to step_s; also memory and fits.",
         StepArgs, _estimate_step_time),
    Tool("simulate_pipeline",
         "Simulate a pipeline schedule event by event: bubble fraction, makespan, in-flight micro-batches "
         "per stage, optionally an ASCII timeline. Use it to compare schedules, pp and micro-batch counts.",
         PipelineArgs, _simulate_pipeline),
    Tool("estimate_cost",
         "Training cost from a step time: steps, days, GPU-hours and dollars, dividing by goodput.",
         CostArgs, _estimate_cost),
    Tool("search_configs",
         "Search the layouts (tp, pp, cp, ep, vpp, zero, mbs, recompute, schedule) for a job and return "
         "the best candidates, each a full estimate (memory_gib, fits, time, training, config), plus how "
         "many were evaluated, feasible and rejected by reason. Pin any knob to constrain it.",
         SearchArgs, _search_configs),
)
TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}


def tool_names() -> list[str]:
    return [tool.name for tool in TOOLS]


def openai_tools(strict: bool = True) -> list[dict]:
    """The `tools` parameter of a chat completion: one function schema per tool."""
    return [tool.schema(strict=strict) for tool in TOOLS]


# --- dispatch -------------------------------------------------------------------------------------


def _validation_line(name: str, exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        field = ".".join(str(p) for p in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            known = ", ".join(TOOLS_BY_NAME[name].args.model_fields)
            parts.append(f"unknown argument '{field}' (arguments: {known})")
        elif error["type"] == "missing":
            parts.append(f"{field}: required")
        else:
            parts.append(f"{field}: {error['msg']} (got {error.get('input')!r})")
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return f"{name}: invalid arguments: " + "; ".join(parts) + more


def dispatch(name: str, arguments_json: str | dict | None) -> dict:
    """Validate and run one tool call; every failure is an {"error": "..."} result, never an exception."""
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        return {"error": f"unknown tool '{name}': use one of {', '.join(tool_names())}"}
    if isinstance(arguments_json, dict):
        arguments = arguments_json
    else:
        try:
            arguments = json.loads(arguments_json or "{}")
        except json.JSONDecodeError as exc:
            return {"error": f"{name}: arguments are not valid JSON ({exc.msg} at column {exc.colno}): "
                             "send one JSON object"}
    if not isinstance(arguments, dict):
        return {"error": f"{name}: arguments must be a JSON object, not {type(arguments).__name__}"}
    try:
        args = tool.args.model_validate(arguments)
    except ValidationError as exc:
        return {"error": _validation_line(name, exc)}
    try:
        return tool.function(args)
    except InputError as exc:
        return {"error": f"{name}: {exc}"}
    except Exception as exc:  # the loop must go on; a bug shows as a tool error, named
        return {"error": f"{name} failed: {type(exc).__name__}: {exc}"}
