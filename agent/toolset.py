"""The LLM's view of the tool set: the registry's tools (submit_plan included) with lean schemas,
and the layout the model handed over with submit_plan.

`submit_plan` (agent/registry.py) is the tool through which the LLM hands over the layout it
recommends: the LLM backend's report is built from the last accepted submit_plan call, never from
the model's prose. Its `layout` argument is the layout tool model itself (StepArgs: the job, every
layout knob and gbs, as estimate_step_time takes them), so a knob added to the layout model
reaches submit_plan with no edit.

Lean schemas (`agent_tools`): ``anyOf: [X, null]`` is written ``type: [X, "null"]`` (the same JSON
Schema; OpenAI strict mode and llama.cpp's grammar both read it), and submit_plan's nested layout
keeps its types but not its descriptions (nor pydantic's titles), which the model already has from
estimate_step_time.

For a small context (`lean_agent_tools`, what the loop falls back to when the server says the
first request exceeds its context): LEAN_TOOLS only, without LEAN_DROPPED_KNOBS or the arguments'
descriptions and titles. That prompt, with a first search result, fits the 8K context of a small local
server (tests/test_llm_plan.py checks the budget).
"""

from __future__ import annotations

from typing import Any

from trainplan.tools.core import safe_json
from trainplan.tools.core.errors import InputError
from trainplan.agent.registry import TOOLS
from trainplan.tools.config.contract import Job, Layout, SearchOptions
from trainplan.tools.config.fields import lean_dropped

__all__ = ["SUBMIT_PLAN", "agent_tools", "lean_agent_tools", "lean_result", "submitted_layout"]

SUBMIT_PLAN = "submit_plan"
LEAN_TOOLS = ("list_catalog", "describe_model", "search_configs", "estimate_step_time", "estimate_cost", SUBMIT_PLAN)
"""The tools kept when the context is small: estimate_step_time also reports memory and fits
(calculate_memory's answer), and the search and the step time already simulate the pipeline."""
LEAN_DROPPED_KNOBS = lean_dropped(Job, Layout, SearchOptions)
"""Knobs left out when the context is small (the fields marked contract.NOT_LEAN): null (the default) is what a plan mostly passes (dp_shard:
full sharding; the search still tries one-node shard groups for ZeRO-3); so do the MoE engine knobs
(null: expert TP = tp, alltoall, dropless, learned routing, per-expert GEMMs, no all-to-all overlap),
DeepSeek-V3's FP8 activation storage and fine-grained activation offloading, the stack's loss kernel,
norm precision and adapter dropout (null: what the method's stack runs, tools/config/resolve.py),
and the search's evidence margin (tools/search/evidence.py; null: 5%). The fine-tuning knobs
(contract.FINE_TUNING_KNOBS: method, lora_rank, lora_targets) stay, so that a small-context model can
plan "QLoRA on two RTX 4090s" as QLoRA."""
LEAN_DROPPED_RESULTS = ("candidate", "per_stage", "mfu_denominator", "convention", "units", "shares", "loss_kernel",
                        "fp32_norms", "lora_dropout", "lora_dropout_position", "pure_bf16", "optimizer_8bit",
                        "document_tokens", "evidence",
                        "evidence_margin", "wall_s", "layouts_per_s")
"""Result keys the model does not get when the context is small: each alternative's full estimate
(its `why` says why it lost), per-stage memory, the texts that restate conventions, the echo of the
stack knobs the lean tools leave out (loss_kernel, fp32_norms, lora_dropout and its position,
pure_bf16, optimizer_8bit, document_tokens), the search's evidence note (also left out of its notes) and
margin, and its timing."""
LEAN_TEXT_CHARS = 200
"""Longer texts in a result are cut to this many characters when the context is small."""


def _nullable(node: Any) -> Any:
    """``anyOf: [X, {type: null}]`` -> X with ``type: [X's type, "null"]`` (and null in an enum), everywhere."""
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {k: _nullable(v) for k, v in node.items()}
    variants = node.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        other = next(v for v in variants if v != {"type": "null"})
        if isinstance(other.get("type"), str) and "anyOf" not in other:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged.update(other)
            merged["type"] = [other["type"], "null"]
            if "enum" in other:
                merged["enum"] = [*other["enum"], None]
            return merged
    return node


ANNOTATIONS = ("description", "title")
"""JSON Schema keywords that only explain: pydantic's titles restate the field names."""


def _strip_annotations(node: Any) -> Any:
    """The schema without its ANNOTATIONS keywords (string-valued, so a property of that name stays)."""
    if isinstance(node, list):
        return [_strip_annotations(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {k: _strip_annotations(v) for k, v in node.items() if not (k in ANNOTATIONS and isinstance(v, str))}


def agent_tools(strict: bool = True) -> list[dict]:
    """The registry's tools as the LLM gets them, with lean schemas (module docstring)."""
    out = []
    for tool in TOOLS:
        schema = tool.schema(strict=strict)
        parameters = _nullable(schema["function"]["parameters"])
        if tool.name == SUBMIT_PLAN:
            layout = parameters["properties"]["layout"]
            parameters["properties"]["layout"] = {**_strip_annotations(layout), "description": layout["description"]}
        schema["function"]["parameters"] = parameters
        out.append(schema)
    return out


def _lean_parameters(schema: dict) -> dict:
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        if name in LEAN_DROPPED_KNOBS:
            continue
        properties[name] = _lean_parameters(prop) if prop.get("type") == "object" else _strip_annotations(prop)
    out = {**schema, "properties": properties}
    if "required" in schema:
        out["required"] = [name for name in schema["required"] if name in properties]
    return out


def lean_agent_tools(strict: bool = True) -> list[dict]:
    """The tools for a small context (module docstring): LEAN_TOOLS, without LEAN_DROPPED_KNOBS and without
    the arguments' descriptions and titles (each tool keeps its own description)."""
    out = []
    for schema in agent_tools(strict=strict):
        function = schema["function"]
        if function["name"] in LEAN_TOOLS:
            out.append({**schema, "function": {**function, "parameters": _lean_parameters(function["parameters"])}})
    return out


def lean_result(result: Any) -> Any:
    """A tool result as the model gets it when the context is small: without LEAN_DROPPED_RESULTS,
    nulls and empty values, with texts cut at LEAN_TEXT_CHARS. The grounding check keeps the full result."""
    if isinstance(result, dict):
        if result.get("evidence") and isinstance(result.get("notes"), list):   # the evidence note goes with its key
            result = {**result, "notes": [n for n in result["notes"] if n != result["evidence"]]}
        return {k: lean_result(v) for k, v in result.items()
                if k not in LEAN_DROPPED_RESULTS and v is not None and v != [] and v != {}}
    if isinstance(result, list):
        return [lean_result(item) for item in result]
    if isinstance(result, str) and len(result) > LEAN_TEXT_CHARS:
        return result[:LEAN_TEXT_CHARS - 3] + "..."
    return result


def submitted_layout(calls: list[dict]) -> tuple[dict, dict] | None:
    """(the arguments, the result) of the last accepted submit_plan call, or None."""
    for call in reversed(calls):
        result = call.get("result")
        if call["name"] != SUBMIT_PLAN or not isinstance(result, dict) or not result.get("accepted"):
            continue
        try:
            arguments = (safe_json.loads(call["arguments"], "the arguments", safe_json.ARGUMENTS)
                         if isinstance(call["arguments"], str) else call["arguments"])
        except InputError:
            continue
        if not isinstance(arguments, dict):
            continue
        return arguments, result
    return None
