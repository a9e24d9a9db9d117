"""The planner: offline and LLM-backed reports, their JSON and Markdown, and `trainplan plan`."""

from __future__ import annotations

import json
import os
import socket
import subprocess

from cli_inprocess import run_cli as in_process
import pytest

import trainplan
from openai_server import reply, tool_calls
from trainplan.agent import planner
from trainplan.agent.planner import plan
from trainplan.agent.report import PlanReport
from trainplan.agent.prompt_text import system_prompt
from trainplan.tools.core.errors import InputError
from trainplan.agent.toolset import agent_tools
from trainplan.agent.registry import dispatch, estimate_kwargs, tool_names

SMALL = "Llama 3 8B on 64 H100s for 100B tokens, seq 4096, global batch 256"


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TRAINPLAN_MODEL")}
    return in_process(*args, env={**base, **(env or {})})


def rerun(report: dict) -> dict:
    """trainplan.estimate on the recommended config with the request's tokens, price and goodput."""
    request = report["request"]
    return trainplan.estimate(**estimate_kwargs(report["recommended"]["config"]), tokens=request["tokens"],
                              price=request["price"], goodput=request["goodput"]).model_dump(mode="json")


@pytest.fixture(scope="module")
def small_report() -> PlanReport:
    return plan(SMALL, backend="offline")


def test_offline_json_has_the_request_and_the_estimate(small_report):
    data = json.loads(small_report.to_json())
    assert data["backend"] == "offline" and data["llm_model"] is None
    request = data["request"]
    assert {k: request[k] for k in ("model", "gpu", "gpus", "tokens", "seq", "gbs", "precision", "price")} == {
        "model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64, "tokens": 1e11, "seq": 4096, "gbs": 256,
        "precision": "bf16", "price": 2.49}
    recommended = data["recommended"]
    assert set(recommended) >= {"params", "memory_gib", "fits", "time", "training", "config"}
    assert recommended["fits"] is True
    config = recommended["config"]
    assert config["tp"] * config["pp"] * config["cp"] * config["dp"] == 64
    assert {"memory_table", "time_table", "timeline", "alternatives", "risks", "rationale", "assumptions",
            "search"} <= set(data)
    assert [row["component"] for row in data["memory_table"]] == [
        "weights", "gradients", "optimizer", "activations", "other", "total"]
    assert 2 <= len(data["alternatives"]) <= 3
    assert all(alt["why_not"] for alt in data["alternatives"])
    assert data["search"]["evaluated"] >= data["search"]["feasible"] > 0


def test_numbers_are_the_tools_numbers_to_the_digit(small_report):
    data = json.loads(small_report.to_json())
    assert data["recommended"] == rerun(data)
    for alternative in data["alternatives"]:
        assert alternative["result"] == rerun({"request": data["request"], "recommended": alternative["result"]})


def test_markdown_has_memory_table_timeline_and_sections(small_report):
    md = small_report.to_markdown()
    total = small_report.recommended["memory_gib"]["total"]
    assert "| component | GiB | share of capacity |" in md
    assert f"| **total** | **{total:,.2f}** |" in md
    assert "```mermaid\ngantt" in md and "```text\nrank 0 |" in md
    for heading in ("## Request as understood", "## Recommended layout", "## Memory per GPU",
                    "## Step time and throughput", "## Pipeline timeline", "## Cost", "## Alternatives",
                    "## Risks", "## Rationale", "## Assumptions"):
        assert heading in md, heading
    assert "offline planner" in md
    assert f"{small_report.recommended['training']['cost_usd']:,.0f}" in md


def test_defaults_are_stated_as_assumptions():
    report = plan("llama3-8b on 64 H100", backend="offline")
    text = "\n".join(report.assumptions)
    assert report.request["seq"] == 8192 and report.request["gbs"] == 512
    for fragment in ("seq not given", "gbs not given: 512 sequences", "tokens not given", "20 per parameter",
                     "price not given: $2.49", "precision not given: bf16", "goodput 90%"):
        assert fragment in text, fragment


def test_fields_like_the_evals_pass_them():
    report = plan(model="llama3-8b", gpu="h100-sxm-80gb", gpus=64, seq=4096, gbs=256, tokens="100B",
                  backend="offline")
    assert report.request["tokens"] == 1e11 and report.request["gbs"] == 256
    with pytest.raises(InputError, match="unknown request field"):
        plan(model="llama3-8b", gpu="h100", gpus=64, layers=3, backend="offline")


def test_missing_hardware_is_an_input_error():
    with pytest.raises(InputError, match=r"needs the hardware.*e\.g\. \"Llama 3 70B on 512 H100s"):
        plan("Llama 3 70B for 15T tokens", backend="offline")


def test_no_layout_fits_is_a_report(monkeypatch):
    import time

    from trainplan.tools.search import driver
    from trainplan.tools.search.request import SearchRequest

    def nothing_fits(model, gpu, gpus, **kwargs):
        """The search's own result for a request (prepared and checked as the search does) in which nothing fits;
        no layout is evaluated, so the planner's walk over every rung and engine stays cheap."""
        request = SearchRequest.of(model, gpu, gpus, **kwargs)
        job, objective, counts = driver.prepare(request)
        out = {"job": driver._job_summary(job, gpus, request.max_gpus, counts, request.top_k),
               "objective": objective.value, "candidates": [], "evaluated": 40, "feasible": 0,
               "rejected": {"does not fit in memory": 40}}
        return driver._finish(job, objective, out, [], request.top_k, request.pareto, time.perf_counter())

    monkeypatch.setattr("trainplan.tools.search.driver.search", nothing_fits)
    report = plan("llama3-405b on 8 A100 40GB for 1T tokens", backend="offline")
    assert report.recommended is None and report.layout is None
    assert "no layout fits" in report.risks[-1] and "does not fit in memory: 40" in report.risks[-1]
    md = report.to_markdown()
    assert "## No layout fits" in md and "| does not fit in memory | 40 |" in md


def test_a_deadline_no_layout_meets_is_a_risk(monkeypatch):
    report = plan("llama3-8b on 64 H100 for 15T tokens, seq 4096, gbs 256, within 1 day", backend="offline")
    assert report.recommended is not None
    assert any("1-day deadline" in risk for risk in report.risks)


def test_cli_plan_writes_the_report(tmp_path):
    out = tmp_path / "plan.md"
    result = run_cli("plan", SMALL, "--out", str(out))
    assert result.returncode == 0, result.stderr
    full = out.read_text()
    assert "```mermaid" in full and "backend: offline planner" in result.stderr
    # stdout: the summary (layout, memory, step, training, launch), a fraction of the whole report
    assert "```mermaid" not in result.stdout and "--full" in result.stdout
    layout_line = next(line for line in full.splitlines() if line.startswith("**TP"))
    assert layout_line in result.stdout and len(result.stdout) < len(full) / 3
    assert run_cli("plan", SMALL, "--full").stdout == full
    # off a terminal, one progress line per planning step on stderr
    steps = [line for line in result.stderr.splitlines() if line.startswith("trainplan: ")]
    assert [s.split(":")[1].split()[0] for s in steps] == ["understood", "searching", "searched", "recommended"]
    as_json = run_cli("plan", SMALL, "--backend", "offline", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["recommended"]["config"]["gpus"] == 64


def test_cli_missing_model_is_one_line_exit_2():
    result = run_cli("plan", "something on 512 H100s")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the request needs a model")
    assert 'e.g. "Llama 3 70B on 512 H100s for 15T tokens"' in lines[0]


def test_cli_llm_server_down_is_one_line():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_cli("plan", SMALL, "--backend", "openai", env={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"})
    assert result.returncode == 1
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    # Not a terminal: one progress line per step, then the one error line.
    assert lines[0] == "trainplan: asking the LLM (turn 1, 300 s left before the deadline)"
    assert all(line.startswith("trainplan: ") for line in lines[:-1])
    assert any(line.startswith("trainplan: retrying the LLM server in ") for line in lines)
    assert lines[-1].startswith(f"error: cannot reach the LLM server at http://127.0.0.1:{port}/v1")
    assert "Traceback" not in result.stderr


def test_cli_openai_without_configuration_says_so():
    result = run_cli("plan", SMALL, "--backend", "openai")
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: no LLM configured: set OPENAI_API_KEY or OPENAI_BASE_URL, "
                                     "or use --backend offline")


# --- the LLM backend, against a scripted OpenAI-compatible server -----------------------------------


def test_llm_plan_is_built_from_the_tool_results(openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("TRAINPLAN_MODEL", "scripted-model")
    job = {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64}
    search_args = {**job, "gbs": 256, "seq": 4096, "tokens": "100B", "top_k": 3}
    search = dispatch("search_configs", json.dumps(search_args))
    best, runner_up = search["candidates"][0]["config"], search["candidates"][1]["config"]
    knobs = {k: best[k] for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "recompute",
                                  "schedule", "precision")}
    step = dispatch("estimate_step_time", json.dumps({**job, **knobs}))
    cost_args = {"tokens": "100B", "step_s": step["time"]["step_s"], "gbs": 256, "seq": 4096, "gpus": 64,
                 "gpu": "h100-sxm-80gb"}
    cost = dispatch("estimate_cost", json.dumps(cost_args))["training"]
    memory, time = step["memory_gib"], step["time"]
    answer = (f"## Recommended layout\nTP{best['tp']} PP{best['pp']} DP{best['dp']} with ZeRO-{best['zero']}.\n\n"
              f"Memory: {memory['total']:.1f} GiB of {memory['capacity']:.1f} GiB per GPU.\n"
              f"Step: {time['step_s']:.2f} s, MFU {time['mfu']:.1%}.\n"
              f"Cost: {cost['days']:.1f} days, {cost['gpu_hours']:,.0f} GPU-hours, ${cost['cost_usd']:,.0f}.\n")
    openai_server.script(
        tool_calls(("search_configs", search_args)),
        tool_calls(("estimate_step_time", {**job, **knobs}), ("estimate_cost", cost_args)),
        tool_calls(("submit_plan", {"layout": {**job, **knobs}, "tokens": None, "price": None})),
        reply(answer),
    )
    events = []
    report = plan("Llama 3 8B on 64 H100s for 100B tokens, seq 4096, gbs 256",
                  on_event=lambda kind, data: events.append(kind))
    assert report.backend == "openai" and report.llm_model == "scripted-model" and report.llm_status == "submitted"
    assert report.grounding is not None and report.grounding.ok and report.grounding.share_grounded == 1.0
    # The LLM's prose, its heading demoted so that only the report has sections (agent/prose.py).
    assert report.rationale == answer.replace("## Recommended layout", "**Recommended layout**")
    assert report.recommended["config"] == best
    data = json.loads(report.to_json())
    assert data["recommended"] == rerun(data)
    assert data["request"]["tokens"] == 1e11 and data["request"]["gbs"] == 256
    assert [c["name"] for c in report.tool_calls] == ["search_configs", "estimate_step_time", "estimate_cost",
                                                      "submit_plan"]
    assert report.alternatives and report.alternatives[0].result["config"] == runner_up
    md = report.to_markdown()
    assert "LLM agent (`scripted-model`)" in md and "## Grounding" in md and "```mermaid" in md
    first = openai_server.requests[0]
    assert first["messages"][0] == {"role": "system", "content": system_prompt()}
    assert first["tools"] == agent_tools(strict=True)
    assert [t["function"]["name"] for t in first["tools"]] == tool_names() and "submit_plan" in tool_names()
    assert events.count("tool_call") == 4
    sent = json.loads(openai_server.requests[1]["messages"][-1]["content"])
    # the real registry answered the model (floats at 6 significant digits)
    assert [c["config"] for c in sent["candidates"]] == [c["config"] for c in search["candidates"]]
    assert sent["candidates"][0]["time"]["step_s"] == pytest.approx(search["candidates"][0]["time"]["step_s"], rel=1e-5)


def test_auto_backend_follows_the_configuration(monkeypatch):
    assert planner.resolve_backend("auto") == "offline"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert planner.resolve_backend("auto") == "openai"
    with pytest.raises(InputError, match="backend='gpt'"):
        planner.resolve_backend("gpt")


def test_report_carries_launch_settings_for_the_chosen_engine():
    from trainplan.agent.planner import plan

    report = plan("Llama 3 8B on 64 H100s for 1T tokens", backend="offline", engine="torchtitan")
    assert report.launch is not None and report.launch.engine == "torchtitan"
    config = report.recommended["config"]
    if report.launch.error is None:
        assert f"seq_len = {config['seq']}" in report.launch.content
    markdown = report.to_markdown()
    assert "## Launch" in markdown and "torchtitan" in markdown


def test_launch_section_says_why_an_engine_cannot_run_the_layout():
    from trainplan.agent.report import launch_settings

    config = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=64, pp=4, schedule="dualpipe", gbs=256,
                                seq=4096).model_dump(mode="json")["config"]
    launch = launch_settings("llama3-8b", config, "megatron")
    assert launch.content is None and "dualpipe" in launch.error.lower()
    assert "\n" not in launch.error


def test_a_plan_naming_no_engine_launches_with_an_engine_that_runs_its_layout():
    """Megatron-LM first; a layout it refuses (ZeRO-2 with pipeline parallelism) goes to torchtitan."""
    from trainplan.agent.planner import DEFAULT_ENGINE, launch_engine

    job = dict(model="llama3-70b", gpu="h100-sxm-80gb", gpus=512, gbs=512, seq=8192, tp=2, pp=4, cp=2, vpp=20,
               schedule="interleaved", mbs=1)
    megatron_style = trainplan.estimate(**job, zero=1).model_dump(mode="json")["config"]
    fsdp_with_pp = trainplan.estimate(**job, zero=2).model_dump(mode="json")["config"]
    assert launch_engine("llama3-70b", megatron_style) == DEFAULT_ENGINE == "megatron"
    assert launch_engine("llama3-70b", fsdp_with_pp) == "torchtitan"


def test_an_adapter_layout_naming_no_engine_launches_with_an_adapter_engine_that_runs_it():
    """LoRA/QLoRA: axolotl for data-parallel layouts (as PEFT fine-tunes run); a hybrid-sharded one goes to the
    first ADAPTER_FALLBACK engine whose refusals admit it (accelerate's FSDP2), never to Megatron-LM (no adapters)
    nor to axolotl or DeepSpeed (their ZeRO shards over every rank). A tensor-parallel one (as an LLM may choose)
    no engine runs with PEFT's adapters: it keeps axolotl, whose refusal the report states."""
    from trainplan.agent.planner import launch_engine
    from trainplan.tools.engines import export
    from trainplan.tools.engines.common import ExportError

    job = dict(model="llama3-8b", gpu="h100-sxm-80gb", gpus=8, gbs=16, seq=2048, mbs=1, method="lora")
    data_parallel = trainplan.estimate(**job, zero=3).model_dump(mode="json")["config"]
    hybrid = trainplan.estimate(**job, zero=3, dp_shard=4).model_dump(mode="json")["config"]
    tensor_parallel = trainplan.estimate(**job, tp=2).model_dump(mode="json")["config"]
    assert launch_engine("llama3-8b", data_parallel, adapters=True) == "axolotl"
    assert launch_engine("llama3-8b", hybrid, adapters=True) == "accelerate"
    assert launch_engine("llama3-8b", tensor_parallel, adapters=True) == "axolotl"
    from trainplan.tools.config.layout import resolve_config
    from trainplan.tools.hardware.catalog import load_model

    model = load_model("llama3-8b")
    with pytest.raises(ExportError, match="tp=2 pp=1 with LoRA/QLoRA adapters"):
        export("deepspeed", model, resolve_config(model, 8, tp=2, gbs=16, method="lora"), model_ref="llama3-8b")
    full = trainplan.estimate(**{**job, "method": "full"}, tp=2).model_dump(mode="json")["config"]
    assert launch_engine("llama3-8b", full) == "megatron"


def test_report_text_says_the_tables_bubble_and_names_the_palm_count():
    """The text once called the schedule's rank-averaged idle share 'pipeline bubble' (5.4%) beside a
    table whose bubble row was 1.4% of the step, wrote 'none recompute', and showed HFU below MFU
    under 'with recompute': MFU counted the masked half of causal attention. MFU is now the causal
    count, never above HFU, and the PaLM count is written under its own name."""
    report = plan("Llama 3 8B on 16 H100s for 10B tokens, seq 8192, gbs 64, pp 4, tp 1, no recompute",
                  backend="offline")
    text, t = report.to_markdown(), report.recommended["time"]
    assert t["bubble_fraction"] > 0
    row = next(line for line in text.splitlines() if line.startswith("| bubble |"))
    table_share = row.split("|")[3].strip()
    assert f"pipeline bubble {table_share} of the step" in text
    assert "none recompute" not in text and "no recompute" in text
    assert t["mfu"] <= t["hfu"] < t["mfu_full_attention"]
    assert f"attention without the causal discount), MFU is {t['mfu_full_attention']:.1%}" in text


def test_a_plan_naming_no_engine_is_scored_and_launched_by_the_engine_whose_best_layout_wins():
    from trainplan.agent.offline_plan import PLAN_ENGINES, plan_offline
    from trainplan.agent.request import parse_partial
    from trainplan.tools.config.engines import ENGINE_ATTENTION

    report = plan(SMALL, backend="offline")
    assert report.engine in PLAN_ENGINES and report.launch.engine == report.engine and report.launch.error is None
    assert report.recommended["config"]["attention"] == ENGINE_ATTENTION[report.engine]
    note = next(a for a in report.assumptions if a.startswith("no engine named"))
    assert all(engine in note for engine in PLAN_ENGINES)
    each = {e: plan_offline(parse_partial(SMALL), SMALL, engine=e).recommended["time"]["tokens_per_s"]
            for e in PLAN_ENGINES}
    assert report.recommended["time"]["tokens_per_s"] == max(each.values())
    named = plan(SMALL + " with torchtitan", backend="offline")
    assert named.engine == "torchtitan" and not any(a.startswith("no engine named") for a in named.assumptions)
