"""The tool set of the agent: one explicit tuple of tools, their OpenAI schemas, and `dispatch`.

Each Tool has a name, a description, a pydantic arguments model (agent/tool_args.py) and a function that takes the
validated arguments and returns a JSON-able dict with the result keys of tools/config/contract.py (memory_gib.total,
time.step_s, training.cost_usd, config, ...). Argument names are the contract's vocabulary.

- Every argument field must carry a description; a Tool whose model lacks one fails when it is
  defined (at import), as smolagents' @tool does.
- An optional knob is typed ``X | None`` with default None, so OpenAI strict mode (every field
  required) works: the model sends null and the tool resolves the default.
- `openai_tools(strict=True)` generates the function schemas from the models; nothing is written
  by hand.
- `dispatch(name, arguments_json)` validates and calls. An invalid call (unknown tool, bad JSON,
  validation error, the project's InputError) returns ``{"error": "..."}`` with one actionable
  line, and never raises: the agent loop sends it back to the model as the tool's reply.
- Every call runs as an untrusted caller (tools/core/file_access.py): a model or GPU argument opens a file
  only under the allowed roots, and an error about a file quotes none of its content.

The default global batch (`default_gbs`) lives in plan_defaults, shared with the offline planner
and the prompts.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from trainplan.agent.tool_args import (CatalogArgs, CostArgs, DescribeArgs, LayoutArgs, LimitArgs, MemoryArgs,
                                       PipelineArgs, SearchArgs, StepArgs, SubmitPlanArgs, ToolArgs)
from trainplan.tools.hardware import catalog
from trainplan.tools.core import safe_json
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT
from trainplan.tools.perf.cost import parse_tokens, training_cost
from trainplan.tools.hardware.counting import count_params, flops_per_token
from trainplan.tools.core.errors import InputError
from trainplan.tools.core.file_access import untrusted_caller
from trainplan.tools.perf.estimate import estimate
from trainplan.tools.perf.memory import memory_breakdown
from trainplan.tools.perf.pipeline import simulate
from trainplan.tools.perf.pipeline_closed_form import StageTimes
from trainplan.tools.perf.pipeline_render import render_ascii
from trainplan.tools.config.contract import Job, Layout, ParallelConfig
from trainplan.tools.config.job_checks import check_job_numbers
from trainplan.tools.config.plan_defaults import DEFAULT_GBS_RULE, default_gbs, default_gbs_reason

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())  # a library: records reach the application's handlers, never a bare stderr

__all__ = ["Tool", "TOOLS", "TOOLS_BY_NAME", "tool_names", "openai_tools", "dispatch", "default_gbs",
           "DEFAULT_GBS_RULE", "estimate_kwargs", "inline_refs"]

# --- tool definitions ------------------------------------------------------------------------------


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
        parameters = inline_refs(copy.deepcopy(self.args.model_json_schema()))  # nested models inline
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        function: dict[str, Any] = {"name": self.name, "description": self.description}
        if strict:
            parameters = _strict(parameters)
            function["strict"] = True
        function["parameters"] = parameters
        return {"type": "function", "function": function}


def inline_refs(schema: dict) -> dict:
    """The schema with every local $ref replaced by its definition (some servers ignore $defs)."""
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                target = copy.deepcopy(definitions[node["$ref"].rsplit("/", 1)[-1]])
                target.pop("title", None)
                extra = {k: v for k, v in node.items() if k != "$ref"}
                return resolve({**target, **extra})
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)


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


# --- tool functions ------------------------------------------------------------------------------


def _given(args: BaseModel, *exclude: str) -> dict:
    """The arguments that were given (not None), minus `exclude`."""
    return {k: v for k, v in args.model_dump().items() if v is not None and k not in exclude}


def estimate_kwargs(config: dict) -> dict:
    """A result's `config` -> the keyword arguments of `estimate` that reproduce it: the Layout's
    fields and the Job's that the config echoes."""
    return {k: v for k, v in config.items() if k in Layout.model_fields or k in Job.model_fields}


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
    architecture["attention_type"] = spec.attention_kind
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


def _calculate_memory(args: LayoutArgs) -> dict:
    result = estimate(**_given(args))
    cfg = ParallelConfig(**result.config.model_dump(include=set(ParallelConfig.model_fields)))
    memory = memory_breakdown(catalog.load_model(args.model), cfg, catalog.load_gpu(args.gpu),
                              headroom_gib=args.headroom_gib or 0.0)
    out = result.model_dump(mode="json", include={"params", "memory_gib", "fits", "reason"})
    out["worst_stage"] = memory.worst_stage
    out["per_stage"] = memory.per_stage
    out.update(result.model_dump(mode="json", include={"config", "notes"}))
    out["convention"] = ("GiB = 2^30 bytes, per GPU on the most loaded rank; bf16 weights 2 B/param, fp32 "
                         "gradients 4, fp32 master + Adam m + v 12, sharded by the ZeRO stage")
    return out


def _find_limit(args: LimitArgs) -> dict:
    from trainplan.tools.search.limits import solve

    if args.gpu is None and args.solve != "gpu":
        raise InputError(f"gpu: required with solve={args.solve} (only solve=gpu tries every catalog GPU)")
    return solve(args.solve, **_given(args, "solve"))


def _estimate_step_time(args: LayoutArgs) -> dict:
    result = estimate(**_given(args))
    return result.model_dump(mode="json", include={"time", "fits", "reason", "memory_gib", "config", "notes"})


def _submit_plan(args: SubmitPlanArgs) -> dict:
    """The hand-over of the agent's chosen layout: checked as estimate_step_time checks it; a layout
    that does not fit is refused, so the model can fix it."""
    result = _estimate_step_time(args.layout)
    if not result["fits"]:
        raise InputError(f"the layout does not fit: {result.get('reason')}; submit one that fits "
                         "(search_configs lists them)")
    time = result["time"]
    return {"accepted": True, "memory_gib": result["memory_gib"],
            "time": {k: time[k] for k in ("step_s", "tokens_per_s", "mfu", "bubble_fraction")},
            "config": result["config"]}


def _simulate_pipeline(args: PipelineArgs) -> dict:
    forward = 1.0 if args.forward_s is None else args.forward_s
    backward = 2 * forward if args.backward_s is None else args.backward_s
    result = simulate(args.schedule, args.pp, args.num_microbatches, vpp=args.vpp or 1,
                      stages=StageTimes(forward_s=forward, backward_s=backward, weight_grad_s=args.weight_grad_s),
                      p2p_s=args.p2p_s or 0.0, record_timeline=bool(args.timeline))
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
    check_job_numbers({"gpus": args.gpus, "gbs": args.gbs, "seq": args.seq, "price": args.price,
                       "goodput": args.goodput}, math.inf)
    cost = training_cost(tokens, args.gbs * args.seq, args.step_s, args.gpus, price,
                         DEFAULT_GOODPUT if args.goodput is None else args.goodput)
    return {"training": cost.to_dict()}


def _search_configs(args: SearchArgs) -> dict:
    from trainplan.tools.search.driver import names_lora, search

    kwargs = _given(args)
    model, gpu, gpus = kwargs.pop("model"), kwargs.pop("gpu"), kwargs.pop("gpus")
    result = search(model, gpu, gpus, **kwargs)
    if args.gbs is None:
        spec = catalog.load_model(model)
        reason = default_gbs_reason(result.job.seq, gpus, count_params(spec).total, names_lora(args.method))
        result.notes = [*result.notes, f"gbs not given: {reason}"]
    out = result.model_dump()
    for candidate in out["candidates"]:
        candidate.pop("pipeline", None)
    return out


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
         "activations, other, total, capacity, headroom; whether it fits (with the reason when not) and every "
         "pipeline stage. Checks a layout search_configs found.",
         MemoryArgs, _calculate_memory),
    Tool("find_limit",
         "The limit of a layout over the memory model: the longest sequence (solve=seq) or the largest micro-batch "
         "(solve=mbs) that fits, with the memory at the limit and one past it, or every catalog GPU it fits on "
         "(solve=gpu), the smallest and the cheapest per token. Answers 'longest context I can QLoRA Llama 3 8B on "
         "a 4090'.",
         LimitArgs, _find_limit),
    Tool("estimate_step_time",
         "Step time of one layout built bottom-up (GEMMs, attention, collectives, pipeline bubble): "
         "time.step_s, tokens_per_s, MFU, HFU, bubble_fraction and a breakdown (compute, comm/tp, comm/cp, "
         "comm/ep, bubble, comm/dp, optimizer) that sums to step_s, with shares; also memory and fits.",
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
         "many were evaluated, feasible and rejected by reason, and alternatives (worse_by, why). Pin any knob "
         "to constrain it. Call this first.",
         SearchArgs, _search_configs),
    Tool("submit_plan",
         "Hand over the layout you recommend, once you have chosen it and before your final answer. The plan "
         "report is built from this call, so it must be the layout your answer recommends. It checks that the "
         "layout fits and returns its memory, step time and config.",
         SubmitPlanArgs, _submit_plan),
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
            parts.append(f"{field}: {error['msg']} (got {_shown(error.get('input'))})")
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return f"{name}: invalid arguments: " + "; ".join(parts) + more


def dispatch(name: str, arguments_json: str | dict | None) -> dict:
    """Validate and run one tool call; every failure is an {"error": "..."} result, never an exception.
    Arguments are untrusted (an LLM's or an MCP client's): read within safe_json.ARGUMENTS' limits; a
    result that would hold NaN or an infinity is an error too, so no tool output is non-finite JSON."""
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        shown = name if isinstance(name, str) and len(name) <= 64 else "(a long name)"
        return {"error": f"unknown tool '{shown}': use one of {', '.join(tool_names())}"}
    try:
        if isinstance(arguments_json, dict):
            arguments = safe_json.check_value(arguments_json, f"{name}: the arguments", safe_json.ARGUMENTS)
        elif arguments_json is None or isinstance(arguments_json, (str, bytes)):
            arguments = safe_json.loads(arguments_json or "{}", f"{name}: the arguments", safe_json.ARGUMENTS)
        else:
            arguments = arguments_json
    except InputError as exc:
        return {"error": str(exc)}
    if not isinstance(arguments, dict):
        return {"error": f"{name}: arguments must be a JSON object, not {type(arguments).__name__}"}
    try:
        args = tool.args.model_validate(arguments)
    except ValidationError as exc:
        return {"error": _validation_line(name, exc)}
    try:
        with untrusted_caller():
            result = tool.function(args)
    except InputError as exc:
        return {"error": f"{name}: {exc}"}
    except Exception as exc:  # the loop must go on; a bug shows as a tool error, named, and in the log
        log.exception("tool %s failed on arguments %s", name, _shown(arguments, 2000))
        return {"error": f"{name} failed: {type(exc).__name__}: {_shown(str(exc), 300)}"}
    where = safe_json.non_finite_path(result)
    if where is not None:
        return {"error": f"{name}: the result's {where} is not a finite number: the inputs are outside what "
                         "trainplan can compute; check their sizes"}
    return result


def _shown(value: Any, limit: int = 80) -> str:
    """A value in an error line: its repr, cut at `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
