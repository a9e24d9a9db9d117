"""The prompts: rendered from the registry, strict about variables, and the shipped file in step."""

from __future__ import annotations

import subprocess

import jinja2
from cli_inprocess import run_cli as in_process
import pytest

from trainplan import prompts
from trainplan.agent import prompt_text
from trainplan.agent.registry import TOOLS


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args)


def test_system_prompt_names_every_tool_and_teaches_the_method():
    text = prompt_text.system_prompt()
    for tool in TOOLS:
        assert f"`{tool.name}`" in text
    for phrase in ("Memory first", "Then the layout", "Then time", "Then cost", "Call a tool for every number",
                   "State your assumptions", "1 GiB = 2^30 bytes", "HFU", "Goodput"):
        assert phrase in text, phrase


def test_tool_guide_is_rendered_from_the_registry():
    guide = prompt_text.tool_guide()
    for tool in TOOLS:
        assert f"### `{tool.name}`" in guide
        assert tool.description in guide
        for name, field in tool.args.model_fields.items():
            assert f"| `{name}` |" in guide
            assert field.description.replace("|", "\\|") in guide


def test_shipped_prompt_names_every_tool_and_the_wiring():
    text = prompt_text.shipped_prompt()
    for tool in TOOLS:
        assert tool.name in text
    assert "trainplan tools call NAME --args" in text and "trainplan tools schema" in text
    assert prompt_text.system_prompt().strip() in text


def test_missing_variable_fails_loudly():
    with pytest.raises(jinja2.UndefinedError):
        prompts.render("system.md.j2", tools=[])
    with pytest.raises(jinja2.UndefinedError):
        prompts.render("report.md.j2")


def test_shipped_file_is_in_step():
    """What CI runs: `trainplan prompt --check` fails when outputs/ is out of step with prompts/."""
    result = run_cli("prompt", "--check")
    assert result.returncode == 0, result.stderr
    assert prompts.SHIPPED_PATH.read_text() == prompt_text.shipped_prompt()


def test_check_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "prompt.md"
    stale.write_text(prompt_text.shipped_prompt().replace("search_configs", "search_layouts"))
    result = run_cli("prompt", "--check", "--out", str(stale))
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and "out of step" in result.stderr
    assert run_cli("prompt", "--out", str(stale)).returncode == 0
    assert run_cli("prompt", "--check", "--out", str(stale)).returncode == 0


def test_report_filters_never_show_negative_zero_or_exponents():
    from trainplan.prompts import _gib, _num, _pct, _tokens, usd as _usd

    assert _pct(-0.00001) == "0.0%" and _pct(-0.02) == "-2.0%"
    assert _num(-0.1) == "0" and _gib(-0.001) == "0.00"
    assert _usd(-0.001) == "$0.00" and _usd(-5) == "-$5.00" and _usd(1234567) == "$1,234,567"
    assert _tokens(1e18) == "1,000,000T" and _tokens(15e12) == "15T" and _tokens(2.5e11) == "250B"
    assert "e+" not in _tokens(3.3e21)


def test_short_jobs_show_hours_and_cents_not_zeros():
    """A one-hour fine-tune read '0.04119 days, 1 GPU-hours, $1': under a day in hours, cents under $100, GPU-hours
    to three digits under 100; longer jobs as before."""
    from trainplan.prompts import days_cell as _days_cell, duration as _duration, gpu_hours as _gpu_hours, usd as _usd

    assert (_duration(0.04119), _gpu_hours(0.9885), _usd(1.482), _days_cell(0.04119)) == (
        "0.989 hours", "0.989", "$1.48", "0.041")
    assert (_duration(397.26), _gpu_hours(4881455.3), _usd(12154823.6), _days_cell(397.26)) == (
        "397.3 days", "4,881,455", "$12,154,824", "397.3")


def test_every_figure_the_prompt_asks_for_is_a_tool_output_field(monkeypatch):
    assert prompt_text.missing_figures() == []
    system = prompt_text.system_prompt()
    from trainplan.agent.registry import TOOLS_BY_NAME

    for section, tool, field in prompt_text.PLAN_FIGURES:
        line = next(line for line in system.splitlines() if line.startswith(f"- {section}: `{tool}` "))
        assert field in line.split("` ", 1)[1].split(", ") and tool in TOOLS_BY_NAME
    # The check can fail: a figure whose field no tool returns is named.
    monkeypatch.setattr(prompt_text, "PLAN_FIGURES", (*prompt_text.PLAN_FIGURES, ("Cost", "estimate_cost", "training.rent")))
    assert prompt_text.missing_figures() == ["Cost: estimate_cost returns no training.rent"]


def test_tool_descriptions_agree_with_the_method():
    from trainplan.agent.registry import TOOLS_BY_NAME

    system = prompt_text.system_prompt()
    assert system.index("`search_configs`") < system.index("`calculate_memory`")
    assert "call this first" not in TOOLS_BY_NAME["calculate_memory"].description.lower()
    assert "call this first" in TOOLS_BY_NAME["search_configs"].description.lower()
