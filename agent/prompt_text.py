"""The system prompt, the tool guide and the shipped prompt, filled from the tool registry (agent/registry.py)
and rendered by the templates in prompts/.

PLAN_FIGURES names every figure the prompt asks an answer to state, and `trainplan prompt --check` calls each
tool on FIGURE_CHECK_CALLS to prove that its result holds that field.
"""

from __future__ import annotations

from trainplan.agent.method_choice import METHOD_RULE
from trainplan.agent.registry import DEFAULT_GBS_RULE, TOOLS, dispatch
from trainplan.prompts import DEFAULT_SEQ_RULE, DEFAULT_TOKENS_PER_PARAM, render
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT

PLAN_FIGURES: tuple[tuple[str, str, str], ...] = (
    ("Memory per GPU", "calculate_memory", "memory_gib.total"),
    ("Memory per GPU", "calculate_memory", "memory_gib.headroom"),
    ("Memory per GPU", "calculate_memory", "memory_gib.headroom_share"),
    ("Step time and throughput", "estimate_step_time", "time.step_s"),
    ("Step time and throughput", "estimate_step_time", "time.tokens_per_s"),
    ("Step time and throughput", "estimate_step_time", "time.mfu"),
    ("Step time and throughput", "estimate_step_time", "time.comm_share"),
    ("Step time and throughput", "estimate_step_time", "time.bubble_share"),
    ("Cost", "estimate_cost", "training.days"),
    ("Cost", "estimate_cost", "training.gpu_hours"),
    ("Cost", "estimate_cost", "training.cost_usd"),
    ("Alternatives", "search_configs", "alternatives[].worse_by"),
    ("Alternatives", "search_configs", "alternatives[].why"),
)
"""(answer section, tool, field) for every figure the prompt asks the answer to state: the system prompt lists
them, and `trainplan prompt --check` calls each tool on FIGURE_CHECK_CALLS and fails when a field is not
in its result, so the model never has to do arithmetic for a figure it is asked for."""

FIGURE_CHECK_CALLS: dict[str, dict] = {
    "calculate_memory": {"model": "llama3-8b", "gpu": "h100", "gpus": 16, "tp": 2, "pp": 2},
    "estimate_step_time": {"model": "llama3-8b", "gpu": "h100", "gpus": 16, "tp": 2, "pp": 2},
    "estimate_cost": {"tokens": "1T", "step_s": 10.0, "gbs": 512, "seq": 8192, "gpus": 16, "gpu": "h100"},
    "search_configs": {"model": "llama3-8b", "gpu": "h100", "gpus": 16, "tokens": "1T", "top_k": 3},
}
"""One sample call of each tool that PLAN_FIGURES names (a small job, so the check stays quick)."""


def _field(result, path: str) -> list:
    """The values at a dotted path ("a.b", "a[].b" steps into every element of a list); [] when absent."""
    values = [result]
    for part in path.split("."):
        many = part.endswith("[]")
        key = part.removesuffix("[]")
        values = [v[key] for v in values if isinstance(v, dict) and key in v]
        if many:
            values = [item for v in values if isinstance(v, list) for item in v]
    return values


def figure_sections() -> list[tuple[str, str, list[str]]]:
    """PLAN_FIGURES grouped in order: (answer section, tool, fields)."""
    sections: list[tuple[str, str, list[str]]] = []
    for section, tool, field in PLAN_FIGURES:
        if not sections or sections[-1][:2] != (section, tool):
            sections.append((section, tool, []))
        sections[-1][2].append(field)
    return sections


def missing_figures() -> list[str]:
    """The PLAN_FIGURES whose field a tool result lacks (or holds no value in), each named with its tool."""
    results: dict[str, dict] = {}
    missing = []
    for figure, tool, path in PLAN_FIGURES:
        if tool not in results:
            results[tool] = dispatch(tool, FIGURE_CHECK_CALLS[tool])
        values = _field(results[tool], path)
        if not values or any(v is None for v in values):
            error = results[tool].get("error")
            missing.append(f"{figure}: {tool} returns no {path}" + (f" ({error})" if error else ""))
    return missing




def _type_name(schema: dict) -> str:
    if "anyOf" in schema:
        names = [_type_name(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(names)
    if "enum" in schema:
        return ", ".join(str(v) for v in schema["enum"])
    return {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}.get(
        schema.get("type", ""), schema.get("type", "any"))


def tool_specs() -> list[dict]:
    """Each tool's name, description and arguments (name, type, required, description), from the registry."""
    specs = []
    for tool in TOOLS:
        schema = tool.args.model_json_schema()
        required = set(schema.get("required", []))
        args = [{"name": name, "type": _type_name(prop), "required": name in required,
                 "description": prop.get("description", "")}
                for name, prop in schema.get("properties", {}).items()]
        specs.append({"name": tool.name, "description": tool.description, "args": args})
    return specs


def _defaults() -> dict:
    return {
        "default_gbs_rule": DEFAULT_GBS_RULE,
        "default_seq_rule": DEFAULT_SEQ_RULE,
        "default_tokens_rule": f"{DEFAULT_TOKENS_PER_PARAM} tokens per parameter (compute-optimal, Hoffmann "
                               "et al. 2022); say so",
        "goodput": DEFAULT_GOODPUT,
        "default_method_rule": METHOD_RULE,
    }


def tool_guide() -> str:
    return render("tool_guide.md.j2", tools=tool_specs())


def system_prompt() -> str:
    return render("system.md.j2", tools=tool_specs(), figures=figure_sections(), **_defaults())


def shipped_prompt() -> str:
    """The text of outputs/prompt-distributed-training-planner.md."""
    return render("shipped.md.j2", system_prompt=system_prompt().strip(), tool_guide=tool_guide().strip(),
                  tools=tool_specs(), figures=figure_sections(), **_defaults())
