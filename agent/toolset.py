"""The LLM's tool set: the registry's tools plus `submit_plan`, with lean schemas.

`submit_plan` is the tool through which the LLM hands over the layout it recommends.

The LLM backend's report is built from the last accepted submit_plan call, never from the
model's prose. The tool's `layout` argument is the layout tool model itself (today
tools.registry.StepArgs: the job, every layout knob and gbs, as estimate_step_time takes them),
so a knob added to the layout model reaches submit_plan with no edit here.

A submission is checked as estimate_step_time checks a layout: invalid arguments, and a layout
that does not fit in memory, come back as ``{"error": ...}`` for the model to fix. An accepted one
answers with the figures the plan will state (memory, step time, MFU, config), so the model can
quote them.

Lean schemas (`agent_tools`), so that the prompt fits the 8K context of a small local server
(tests/test_llm_agent.py checks the budget): ``anyOf: [X, null]`` is written ``type: [X, "null"]``
(the same JSON Schema; OpenAI strict mode and llama.cpp's grammar both read it), and
submit_plan's nested layout keeps its types but not its descriptions, which the model already has
from estimate_step_time.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import Field

from trainplan.tools.errors import InputError
from trainplan.tools.registry import TOOLS, TOOLS_BY_NAME, StepArgs, Tool, ToolArgs, dispatch

__all__ = ["SUBMIT_PLAN", "SubmitPlanArgs", "agent_tools", "agent_dispatch", "submitted_layout"]

LayoutModel = StepArgs
"""The layout argument's model: the one estimate_step_time validates."""


class SubmitPlanArgs(ToolArgs):
    layout: LayoutModel = Field(description="the layout you recommend: model, gpu, gpus and every knob as "
                                            "estimate_step_time takes them (null: the tool's default)")
    tokens: float | str | None = Field(default=None, description="training tokens the plan's cost assumes, a "
                                                                 "number or '15T'; null: the request's")
    price: float | None = Field(default=None, description="dollars per GPU-hour; null: the request's or the "
                                                          "GPU's catalog price")


def _submit(args: SubmitPlanArgs) -> dict:
    layout = args.layout.model_dump(exclude_none=True)
    result = dispatch("estimate_step_time", layout)
    if "error" in result:
        raise InputError(result["error"].removeprefix("estimate_step_time: "))
    if not result["fits"]:
        raise InputError(f"the layout does not fit: {result.get('reason')}; submit one that fits "
                         "(search_configs lists them)")
    time = result["time"]
    return {"accepted": True, "memory_gib": result["memory_gib"],
            "time": {k: time[k] for k in ("step_s", "tokens_per_s", "mfu", "bubble_fraction") if k in time},
            "config": result["config"]}


SUBMIT_PLAN = Tool(
    "submit_plan",
    "Hand over the layout you recommend; call it once you have chosen, before your final answer. The plan "
    "report is built from this call, so it must be the layout your answer recommends. It checks that the "
    "layout fits and returns its memory, step time and config.",
    SubmitPlanArgs, _submit)
AGENT_TOOLS_BY_NAME: dict[str, Tool] = {**TOOLS_BY_NAME, SUBMIT_PLAN.name: SUBMIT_PLAN}


def _inline_refs(schema: dict) -> dict:
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


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip_descriptions(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}


def agent_tools(strict: bool = True) -> list[dict]:
    """The tools the LLM gets, with lean schemas (module docstring): the registry's, then submit_plan."""
    out = []
    for tool in (*TOOLS, SUBMIT_PLAN):
        schema = tool.schema(strict=strict)
        parameters = _nullable(_inline_refs(schema["function"]["parameters"]))
        if tool is SUBMIT_PLAN:
            layout = parameters["properties"]["layout"]
            parameters["properties"]["layout"] = {**_strip_descriptions(layout), "description": layout["description"]}
        schema["function"]["parameters"] = parameters
        out.append(schema)
    return out


def agent_dispatch(name: str, arguments: str | dict | None) -> dict:
    """registry.dispatch over the registry's tools and submit_plan."""
    return dispatch(name, arguments, tools=AGENT_TOOLS_BY_NAME)


def submitted_layout(calls: list[dict]) -> tuple[dict, dict] | None:
    """(the arguments, the result) of the last accepted submit_plan call, or None."""
    for call in reversed(calls):
        result = call.get("result")
        if call["name"] != SUBMIT_PLAN.name or not isinstance(result, dict) or not result.get("accepted"):
            continue
        try:
            arguments = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else call["arguments"]
        except json.JSONDecodeError:
            continue
        return arguments, result
    return None
