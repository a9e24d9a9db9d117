"""trainplan.prompts: the jinja2 templates of the agent, rendered with StrictUndefined.

- system.md.j2: the system prompt (the method, the rules, the conventions, the defaults);
- tool_guide.md.j2: each tool's purpose and arguments, rendered from trainplan.agent.registry;
- report.md.j2: the Markdown plan report (agent/report.py's PlanReport);
- rationale.md.j2: the offline planner's rationale, written from the tools' numbers;
- shipped.md.j2: outputs/prompt-distributed-training-planner.md, the shipped prompt.

A missing variable raises jinja2.UndefinedError: nothing renders half-filled.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).resolve().parent
SHIPPED_NAME = "prompt-distributed-training-planner.md"
SHIPPED_PATH = Path(str(resources.files("trainplan.outputs") / SHIPPED_NAME))
"""The shipped prompt: outputs/ at the repository root, which installs as the package trainplan.outputs
(in a wheel, site-packages/trainplan/outputs/)."""
IN_REPOSITORY = (TEMPLATE_DIR.parent / "pyproject.toml").is_file()
"""Whether this is a source checkout (editable install), where `trainplan prompt` rewrites SHIPPED_PATH;
an installed trainplan prints the prompt instead and checks it against its packaged copy."""

from trainplan.tools.config.contract import DEFAULT_SEQ_CAP, DEFAULT_SEQ_RULE  # noqa: E402,F401  (one seq default)
DEFAULT_TOKENS_PER_PARAM = 20
"""tokens, when not given: 20 per parameter, the compute-optimal ratio of Hoffmann et al. 2022."""

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
    from trainplan.agent.registry import dispatch

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


def _unsigned_zero(text: str) -> str:
    """'-0.0' -> '0.0': a value that rounds to zero is shown without a sign."""
    if text.startswith("-") and not any(ch in "123456789" for ch in text):
        return text[1:]
    return text


def _gib(value: float) -> str:
    return _unsigned_zero(f"{value:,.2f}")


def _pct(value: float, digits: int = 1) -> str:
    return _unsigned_zero(f"{value * 100:.{digits}f}") + "%"


def _num(value: float, digits: int = 0) -> str:
    return _unsigned_zero(f"{value:,.{digits}f}")


def _sig(value: float, digits: int = 4) -> str:
    if abs(value) < 1e-9:
        return "0"  # float dust (e.g. a bubble of 4e-16 s)
    return f"{value:.{digits}g}"


def _usd(value: float) -> str:
    amount = _unsigned_zero(f"{value:,.0f}")
    return f"-${amount[1:]}" if amount.startswith("-") else f"${amount}"


def _tokens(value: float) -> str:
    """15e12 -> '15T', 2.5e11 -> '250B', keeping the digits the number has (up to four); past 9,999T the
    whole number of T with separators (1e18 -> '1,000,000T'), never an exponent."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= scale:
            if value / scale >= 1e4:
                return f"{value / scale:,.0f}{suffix}"
            return f"{value / scale:.4g}{suffix}"
    return f"{value:g}"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(gib=_gib, pct=_pct, num=_num, sig=_sig, usd=_usd, tokens=_tokens)
    return env


def render(template: str, **variables: Any) -> str:
    """Render one template; a variable the template uses but is not given raises UndefinedError."""
    return environment().get_template(template).render(**variables)


# --- the tool guide, from the registry ------------------------------------------------------------


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
    from trainplan.agent.registry import TOOLS

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
    from trainplan.tools.perf.cost import DEFAULT_GOODPUT
    from trainplan.agent.registry import DEFAULT_GBS_RULE

    return {
        "default_gbs_rule": DEFAULT_GBS_RULE,
        "default_seq_rule": DEFAULT_SEQ_RULE,
        "default_tokens_rule": f"{DEFAULT_TOKENS_PER_PARAM} tokens per parameter (compute-optimal, Hoffmann "
                               "et al. 2022); say so",
        "goodput": DEFAULT_GOODPUT,
    }


def tool_guide() -> str:
    return render("tool_guide.md.j2", tools=tool_specs())


def system_prompt() -> str:
    return render("system.md.j2", tools=tool_specs(), figures=figure_sections(), **_defaults())


def shipped_prompt() -> str:
    """The text of outputs/prompt-distributed-training-planner.md."""
    return render("shipped.md.j2", system_prompt=system_prompt().strip(), tool_guide=tool_guide().strip(),
                  tools=tool_specs(), figures=figure_sections(), **_defaults())
