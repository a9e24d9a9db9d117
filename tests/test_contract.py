"""The typed contract (tools/config/contract.py): every knob is defined once and reaches the API, the CLI, the
tools and the exports; the result is typed and round-trips through JSON."""

from __future__ import annotations

import inspect
import json
import subprocess

from cli_inprocess import run_cli as in_process
import pytest

import trainplan
from trainplan.cli import load_command
from trainplan.cli_export import export_from_options
from trainplan.tools.core.enums import LoraTargets, Method
from trainplan.tools.core.enums import LoraDropoutPosition, LossKernel
from trainplan.agent import registry, tool_args
from trainplan.tools.config.contract import DEFAULT_SEQ_CAP, SEARCHED_KNOBS, Job, Layout, ParallelConfig, SearchOptions, search_fields
from trainplan.tools.config.results import Estimate
from trainplan.tools.core.enums import Attention, Dispatcher, GroupedGemm, Launch, Precision, Recompute, RecomputeModule, Schedule
from trainplan.tools.search.driver import Pins

LAYOUT_DEFAULTS = {name: info.default for name, info in Layout.model_fields.items()}


def _cli_options(command: str) -> dict[str, object]:
    """name -> click parameter of one `trainplan` command."""
    return {param.name: param for param in load_command(command).params}


def test_api_signatures_list_every_field_with_its_default():
    estimate = inspect.signature(trainplan.estimate).parameters
    for name, info in {**Job.model_fields, **Layout.model_fields}.items():
        assert name in estimate, f"trainplan.estimate lacks {name}: add it (tools/config/contract.py says how)"
        if not info.is_required():
            default = getattr(info.default, "value", info.default)
            assert estimate[name].default == default, name
    search = inspect.signature(trainplan.search).parameters
    assert set(search_fields()) <= set(search), set(search_fields()) - set(search)


def test_cli_options_and_tool_arguments_derive_from_the_fields():
    estimate = _cli_options("estimate")
    assert set(Job.model_fields) | set(Layout.model_fields) <= set(estimate)
    assert set(_cli_options("search")) >= set(search_fields())
    export = _cli_options("export")
    assert set(Layout.model_fields) <= set(export) and {"model", "gpu", "gpus", "gpus_per_node"} <= set(export)
    assert set(Layout.model_fields) <= set(tool_args.LayoutArgs.model_fields)
    for name, info in Layout.model_fields.items():      # one description, everywhere
        assert tool_args.LayoutArgs.model_fields[name].description.startswith(info.description)
        assert estimate[name].help.startswith(info.description.split("; null:")[0])
    assert set(SearchOptions.model_fields) - {"pareto"} <= set(tool_args.SearchArgs.model_fields)


def test_searched_knobs_are_the_search_pins():
    assert tuple(Pins.__dataclass_fields__) == SEARCHED_KNOBS


def test_parallel_config_is_a_resolved_layout():
    assert set(Layout.model_fields) < set(ParallelConfig.model_fields)
    assert ParallelConfig.model_fields["seq"].description == Layout.model_fields["seq"].description


def _plain(value, allowed=(int, float, str, bool, type(None))) -> bool:
    """Only `allowed` types (never a numpy scalar) anywhere in a dump."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, allowed) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v, allowed) for v in value)
    return type(value) in allowed


def test_estimate_is_typed_and_its_dump_is_plain():
    result = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=16, tp=2, pp=2, gbs=64, tokens="1T")
    assert isinstance(result, Estimate)
    assert result.time.step_s > 0 and result.training.days > 0 and result.config.dp == 4
    assert _plain(result.model_dump(mode="json"))
    assert _plain(result.model_dump(), (int, float, str, bool, type(None), tuple, Recompute, RecomputeModule, Schedule,
                                        Precision, Attention, Method, LoraTargets, Dispatcher, GroupedGemm, Launch,
                                        LossKernel, LoraDropoutPosition))
    # Derived figures a plan states: the shares and the headroom come with the result.
    assert result.time.comm_share == pytest.approx(
        sum(s for k, s in result.time.breakdown.items() if k.startswith("comm/")) / result.time.step_s)
    assert sum(result.time.shares.values()) == pytest.approx(1.0)
    memory = result.memory_gib
    assert memory.headroom == pytest.approx(memory.capacity - memory.total)
    assert memory.headroom_share == pytest.approx(memory.headroom / memory.capacity)


KNOBS = ["--model", "llama3-70b", "--gpu", "h100", "--gpus", "64", "--tp", "8", "--pp", "2", "--gbs", "64",
         "--recompute", "full", "--zero", "2", "--tp-comm-overlap", "--bf16-grads", "--optimizer-offload",
         "--no-sequence-parallel", "--intra-node-bw", "400", "--seq", "4096"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args)


def test_estimate_json_round_trips_through_from(tmp_path):
    saved = tmp_path / "est.json"
    first = _cli("estimate", *KNOBS, "--json")
    assert first.returncode == 0, first.stderr
    saved.write_text(first.stdout)
    config = json.loads(first.stdout)["config"]
    assert config["tp_comm_overlap"] and config["bf16_grads"] and config["optimizer_offload"]
    assert not config["sequence_parallel"] and config["intra_node_bw"] == 400 and config["zero"] == 2
    again = _cli("estimate", "--from", str(saved), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    # A flag overrides the saved value; the rest is kept.
    changed = json.loads(_cli("estimate", "--from", str(saved), "--zero", "1", "--json").stdout)["config"]
    assert changed == {**config, "zero": 1}


def test_export_from_a_saved_estimate_keeps_every_layout_field(tmp_path, monkeypatch):
    saved = tmp_path / "est.json"
    saved.write_text(trainplan.estimate(model="llama3-70b", gpu="h100", gpus=64, tp=8, pp=2, gbs=64,
                                        tp_comm_overlap=True, bf16_grads=True, recompute="full",
                                        sequence_parallel=False).model_dump_json())
    seen = {}
    import trainplan.cli_export as cli_export

    real = cli_export.export

    def spy(engine, model, cfg, **kwargs):
        seen["cfg"] = cfg
        return real(engine, model, cfg, **kwargs)

    monkeypatch.setattr(cli_export, "export", spy)
    result = export_from_options("megatron", {}, saved)
    config = json.loads(saved.read_text())["config"]
    assert {k: getattr(seen["cfg"], k) for k in Layout.model_fields} == {
        k: ParallelConfig.model_validate(config).model_dump()[k] for k in Layout.model_fields}
    assert "--tp-comm-overlap" in result.content and "--sequence-parallel" not in result.content


def test_null_means_the_same_default_in_every_tool():
    job = {"model": "qwen2.5-7b", "gpu": "h100", "gpus": 64, "tp": 2, "pp": 2}
    memory = registry.dispatch("calculate_memory", job)
    step = registry.dispatch("estimate_step_time", job)
    assert memory["config"]["gbs"] == step["config"]["gbs"] and memory["memory_gib"] == step["memory_gib"]
    # seq: the model's 131,072 capped at DEFAULT_SEQ_CAP, in estimate, search and the tools alike.
    assert memory["config"]["seq"] == DEFAULT_SEQ_CAP == trainplan.estimate(**job).config.seq
    searched = registry.dispatch("search_configs", {"model": "qwen2.5-7b", "gpu": "h100", "gpus": 64, "top_k": 1})
    assert searched["job"]["seq"] == DEFAULT_SEQ_CAP and searched["job"]["gbs"] == step["config"]["gbs"]


def test_version_flag():
    result = _cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"trainplan {trainplan.__version__}"


def test_plan_signature_lists_every_request_field():
    from trainplan.agent.request import PlanRequest

    parameters = inspect.signature(trainplan.plan).parameters
    missing = set(PlanRequest.model_fields) - {"unparsed"} - set(parameters)
    assert not missing, f"trainplan.plan lacks {sorted(missing)}: add them as keyword parameters"


def test_plan_takes_fields_as_keywords():
    report = trainplan.plan(model="llama3-8b", gpu="h100", gpus=8, tokens="1T", tp=1, backend="offline")
    assert report.recommended["config"]["tp"] == 1 and report.request["gpus"] == 8
