"""trainplan.prompts: the jinja2 templates of the agent, rendered with StrictUndefined.

- system.md.j2: the system prompt (the method, the rules, the conventions, the defaults);
- tool_guide.md.j2: each tool's purpose and arguments (agent/prompt_text.py fills it from the registry);
- report.md.j2: the Markdown plan report (agent/report.py's PlanReport);
- rationale.md.j2: the offline planner's rationale, written from the tools' numbers;
- shipped.md.j2: outputs/prompt-distributed-training-planner.md, the shipped prompt.

A missing variable raises jinja2.UndefinedError: nothing renders half-filled. This package renders templates and
nothing else (it sits below agent/); agent/prompt_text.py fills the system prompt, the tool guide and the shipped
prompt from the tool registry.
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


def usd(value: float) -> str:
    """Whole dollars; cents under $100 (a short fine-tune's cost: '$1.48', not '$1')."""
    amount = _unsigned_zero(f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}")
    return f"-${amount[1:]}" if amount.startswith("-") else f"${amount}"


def duration(days: float, decimals: int | None = None) -> str:
    """A training time: '2.206 days' (four significant digits, as sig, or `decimals` places), in hours under a
    day ('23.8 hours')."""
    if days < 1:
        return f"{_sig(days * 24, 3)} hours"
    return f"{_sig(days) if decimals is None else _num(days, decimals)} days"


def days_cell(days: float) -> str:
    """A table's days column: one decimal, or two significant digits under a day (0.04, not 0.0)."""
    return _num(days, 1) if days >= 1 else f"{days:.2g}"


def gpu_hours(value: float) -> str:
    """GPU-hours: whole hours, or three significant digits under 100 (0.988, not 1)."""
    return _num(value) if value >= 100 else _sig(value, 3)


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
    env.filters.update(gib=_gib, pct=_pct, num=_num, sig=_sig, usd=usd, tokens=_tokens, duration=duration,
                       days_cell=days_cell, gpu_hours=gpu_hours)
    return env


def render(template: str, **variables: Any) -> str:
    """Render one template; a variable the template uses but is not given raises UndefinedError."""
    return environment().get_template(template).render(**variables)
