"""The function-calling API: generated schemas, dispatch results and error objects, the CLI."""

from __future__ import annotations

import json
import subprocess

import openai
from cli_inprocess import run_cli as in_process
import pytest
from pydantic import Field

import trainplan
from trainplan.agent import registry, tool_args
from trainplan.tools.hardware.catalog import load_model
from trainplan.tools.hardware.counting import count_params
from trainplan.agent.registry import TOOLS, Tool, default_gbs, dispatch, openai_tools
from trainplan.agent.tool_args import ToolArgs

NAMES = ["list_catalog", "describe_model", "calculate_memory", "find_limit", "estimate_step_time", "simulate_pipeline",
         "estimate_cost", "search_configs", "submit_plan"]
JOB = {"model": "llama3-8b", "gpu": "h100", "gpus": 64}


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return in_process(*args, stdin=stdin)


def _walk(schema: dict):
    yield schema
    for value in schema.get("properties", {}).values():
        yield from _walk(value)
    for value in schema.get("anyOf", []):
        yield from _walk(value)


def test_one_explicit_tuple_of_the_design_tools():
    assert isinstance(TOOLS, tuple)
    assert [tool.name for tool in TOOLS] == NAMES
    assert all(isinstance(tool, Tool) and tool.description for tool in TOOLS)


def test_every_field_is_described():
    for tool in TOOLS:
        for name, info in tool.args.model_fields.items():
            assert info.description and info.description.strip(), f"{tool.name}.{name}"
        for name, prop in tool.schema(strict=False)["function"]["parameters"]["properties"].items():
            assert prop["description"], f"{tool.name}.{name}"


def test_a_field_without_description_fails_at_definition():
    class Bad(ToolArgs):
        model: str = Field(description="a model")
        gpus: int

    with pytest.raises(TypeError, match="gpus"):
        Tool("bad", "A tool.", Bad, lambda args: {})


@pytest.mark.parametrize("tool", TOOLS, ids=NAMES)
def test_strict_schema_is_what_openai_generates(tool):
    """Strict mode: every property required, no extra keys, optional knobs nullable, no null defaults;
    the same parameters as the openai SDK's own pydantic_function_tool."""
    schema = tool.schema(strict=True)
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == tool.name and function["strict"] is True
    params = function["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == list(params["properties"])
    for name, field in tool.args.model_fields.items():
        prop = params["properties"][name]
        if not field.is_required():
            assert {"type": "null"} in prop["anyOf"], name
        assert "default" not in prop
    assert not any("$ref" in node for node in _walk(params))
    reference = openai.pydantic_function_tool(tool.args, name=tool.name, description=tool.description)

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "title"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    assert strip(registry.inline_refs(reference["function"]["parameters"])) == strip(params)
    json.dumps(schema)


def test_non_strict_schema_keeps_required_only_for_required():
    memory = next(t for t in openai_tools(strict=False) if t["function"]["name"] == "calculate_memory")
    params = memory["function"]["parameters"]
    assert params["required"] == ["model", "gpu", "gpus"]
    assert "strict" not in memory["function"]


def test_vocabulary_names():
    fields = set(tool_args.MemoryArgs.model_fields) | set(tool_args.SearchArgs.model_fields) | set(
        tool_args.CostArgs.model_fields)
    assert {"model", "gpu", "gpus", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "recompute",
            "schedule", "precision", "tokens", "price"} <= fields


def test_calculate_memory_matches_estimate():
    result = dispatch("calculate_memory", json.dumps({**JOB, "tp": 2, "gbs": 128, "seq": 8192}))
    reference = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=64, tp=2, gbs=128, seq=8192).model_dump(
        mode="json")
    assert result["memory_gib"] == reference["memory_gib"]
    assert result["fits"] is True and result["config"] == reference["config"]
    assert len(result["per_stage"]) == 1 and result["per_stage"][0]["total"] == pytest.approx(
        result["memory_gib"]["total"])


def test_strict_nulls_resolve_to_defaults():
    nulls = {name: None for name in tool_args.StepArgs.model_fields if name not in JOB}
    result = dispatch("estimate_step_time", json.dumps({**JOB, **nulls, "seq": 8192}))
    reference = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=64, seq=8192,
                                   gbs=default_gbs(8192, 64, count_params(load_model("llama3-8b")).total)).model_dump(mode="json")
    assert result["time"] == reference["time"]
    assert result["config"]["gbs"] == 512 and "published runs" in result["notes"][0]


def test_estimate_cost_from_step_time():
    result = dispatch("estimate_cost", {"tokens": "1T", "step_s": 2.0, "gbs": 512, "seq": 8192, "gpus": 64,
                                        "gpu": "h100"})
    training = result["training"]
    assert training["steps"] == 238419  # ceil(1e12 / (512 * 8192))
    assert training["cost_usd"] == pytest.approx(training["gpu_hours"] * 2.49)
    assert training["goodput"] == 0.9


def test_simulate_pipeline_with_timeline():
    result = dispatch("simulate_pipeline", {"schedule": "1f1b", "pp": 4, "num_microbatches": 8, "timeline": True})
    assert result["bubble_fraction"] == pytest.approx(3 / 11)
    assert result["ascii"].startswith("rank 0 |")


def test_describe_model_and_list_catalog():
    described = dispatch("describe_model", {"model": "llama3-8b", "seq": None})
    assert described["params"]["total"] == 8030261248
    assert described["flops_per_token"]["training"] == pytest.approx(3 * described["flops_per_token"]["forward"])
    listing = dispatch("list_catalog", {"kind": None})
    assert "llama3-70b" in {m["name"] for m in listing["models"]}
    assert "h100-sxm-80gb" in {g["name"] for g in listing["gpus"]}


def test_search_configs_returns_candidates():
    result = dispatch("search_configs", {**JOB, "gbs": 256, "seq": 4096, "tokens": "100B", "top_k": 2})
    assert 1 <= len(result["candidates"]) <= 2
    best = result["candidates"][0]
    assert best["fits"] and {"memory_gib", "time", "training", "config"} <= set(best)
    assert result["evaluated"] >= result["feasible"] >= 1


@pytest.mark.parametrize(("name", "arguments", "fragment"), [
    ("no_such_tool", "{}", "unknown tool 'no_such_tool': use one of list_catalog"),
    ("calculate_memory", '{"model": ', "arguments are not valid JSON"),
    ("calculate_memory", "[1, 2]", "must be a JSON object"),
    ("calculate_memory", json.dumps({**JOB, "gpus": "many"}), "gpus: Input should be a valid integer"),
    ("calculate_memory", json.dumps({"model": "llama3-8b"}), "gpu: required"),
    ("calculate_memory", json.dumps({**JOB, "dp": 4}), "unknown argument 'dp'"),
    ("calculate_memory", json.dumps({**JOB, "recompute": "sometimes"}), "recompute"),
    ("calculate_memory", json.dumps({**JOB, "model": "llama-99b"}), "unknown model 'llama-99b'"),
    ("calculate_memory", json.dumps({**JOB, "tp": 3}), "tp*pp*cp=3*1*1=3 does not divide gpus=64"),
    ("estimate_cost", json.dumps({"tokens": "lots", "step_s": 1, "gbs": 8, "seq": 8, "gpus": 8, "price": 2}),
     "tokens='lots' is not a number"),
    ("estimate_cost", json.dumps({"tokens": "1T", "step_s": 1, "gbs": 8, "seq": 8, "gpus": 8}), "give price"),
])
def test_invalid_calls_are_one_line_error_objects(name, arguments, fragment):
    result = dispatch(name, arguments)
    assert set(result) == {"error"}
    assert fragment in result["error"]
    assert "\n" not in result["error"]


def test_dispatch_never_raises_on_a_tool_bug(monkeypatch):
    def broken(args):
        raise ZeroDivisionError("division by zero")

    tool = registry.TOOLS_BY_NAME["list_catalog"]
    monkeypatch.setitem(registry.TOOLS_BY_NAME, "list_catalog", Tool(tool.name, tool.description, tool.args, broken))
    assert dispatch("list_catalog", "{}") == {"error": "list_catalog failed: ZeroDivisionError: division by zero"}


def test_cli_schema_and_call():
    schema = run_cli("tools", "schema")
    assert schema.returncode == 0, schema.stderr
    assert [t["function"]["name"] for t in json.loads(schema.stdout)] == NAMES
    call = run_cli("tools", "call", "calculate_memory", "--args", json.dumps({**JOB, "tp": 2}))
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout)["memory_gib"]["total"] > 0
    piped = run_cli("tools", "call", "estimate_cost", "--args", "-",
                    stdin='{"tokens": "1T", "step_s": 2, "gbs": 512, "seq": 8192, "gpus": 64, "price": 2}')
    assert json.loads(piped.stdout)["training"]["steps"] == 238419


def test_cli_call_error_exits_2_with_one_line():
    result = run_cli("tools", "call", "calculate_memory", "--args", json.dumps({**JOB, "tp": 3}))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: calculate_memory: tp*pp*cp=3")


@pytest.mark.parametrize("tool", ["calculate_memory", "estimate_step_time", "search_configs"])
def test_module_lists_may_be_comma_separated_text_as_on_the_command_line(tool):
    """`--recompute-modules mlp,core_attn` works on the command line; the same text in a tool call was
    refused ('Input should be a valid tuple'), which small LLMs write."""
    from trainplan.agent.registry import dispatch

    job = {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "recompute": "selective"}
    as_text = dispatch(tool, {**job, "recompute_modules": "mlp, core_attn", "offload_modules": "core_attn"})
    as_list = dispatch(tool, {**job, "recompute_modules": ["core_attn", "mlp"], "offload_modules": ["core_attn"]})
    assert as_text == as_list or tool == "search_configs"
    config = (as_text["candidates"][0] if tool == "search_configs" else as_text)["config"]
    assert config["recompute_modules"] == ["core_attn", "mlp"] and config["offload_modules"] == ["core_attn"]
