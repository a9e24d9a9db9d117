"""`plan` with the LLM backend against the scripted server: the layout comes from submit_plan, and
every way the LLM can fail or misbehave still gives an honest report (issue 12 item 2, issue 13)."""

from __future__ import annotations

import json
import os
import subprocess

import openai
from cli_inprocess import run_cli as in_process
import pytest

from openai_server import CONTEXT_ERROR, PARSE_ERROR, hang, http_error, reply, tool_calls
from trainplan.agent.config import LlmEndpoint
from trainplan.agent.planner import plan
from trainplan.tools.core.errors import InputError

SMALL = "Llama 3 8B on 64 H100s for 100B tokens, seq 4096, global batch 256"
JOB = {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64, "seq": 4096, "gbs": 256}


@pytest.fixture(scope="module")
def offline():
    """The offline plan of SMALL, planned once per module (the tests compare with it and never change it)."""
    return plan(SMALL, backend="offline")


def llm_plan(server, text: str = SMALL, **kwargs):
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    return plan(text, backend="openai", endpoint=LlmEndpoint(client=client, model="scripted-model"), **kwargs)


def test_the_layout_is_the_submitted_one_whatever_the_prose_names(openai_server):
    chosen = {**JOB, "tp": 2, "pp": 1, "zero": 1}
    runner_up = {**JOB, "tp": 1, "pp": 1, "zero": 1}
    openai_server.script(
        tool_calls(("estimate_step_time", runner_up), ("estimate_step_time", chosen)),
        tool_calls(("submit_plan", {"layout": chosen})),
        reply("I recommend TP2. The runner-up was TP1 with ZeRO-1."),  # the runner-up is named last
    )
    report = llm_plan(openai_server)
    assert report.llm_status == "submitted" and report.backend == "openai"
    config = report.recommended["config"]
    assert (config["tp"], config["pp"], config["gpus"], config["seq"], config["gbs"]) == (2, 1, 64, 4096, 256)
    assert [alt.result["config"]["tp"] for alt in report.alternatives] == [1]
    assert "The LLM did not" not in report.to_markdown()


def test_a_layout_that_does_not_fit_is_refused_and_the_next_one_taken(openai_server):
    too_big = {**JOB, "model": "llama3-70b", "gpus": 8, "tp": 1, "pp": 1}
    openai_server.script(
        tool_calls(("submit_plan", {"layout": too_big})),
        tool_calls(("submit_plan", {"layout": {**JOB, "tp": 1}})),
        reply("Done."),
    )
    report = llm_plan(openai_server)
    refusal = json.loads(openai_server.requests[1]["messages"][-1]["content"])
    assert refusal["error"].startswith("submit_plan: the layout does not fit: needs ")
    assert report.llm_status == "submitted" and report.recommended["config"]["model"] == "llama3-8b"


def test_a_model_that_never_calls_a_tool_gets_an_honest_report(openai_server, offline):
    prose = "Use TP8 x PP4 for about 10 days at 45% MFU."
    openai_server.script(reply(prose), reply(prose))  # re-asked once, still no tool
    report = llm_plan(openai_server)
    assert openai_server.requests[1]["messages"][-1]["content"].startswith("You answered without calling any tool")
    assert report.backend == "openai" and report.llm_status == "no_tool_calls"
    assert report.recommended == offline.recommended and report.rationale == offline.rationale
    data = json.loads(report.to_json())
    assert data["grounding"]["ok"] is False and data["grounding"]["status"] == "no_tool_calls"
    assert data["grounding"]["share_grounded"] == 0.0
    assert data["llm_answer"] == ("Use TP8 [ungrounded] x PP4 [ungrounded] for about 10 [ungrounded] days at "
                                  "45% [ungrounded] MFU.")
    md = report.to_markdown()
    header = md.split("## Request as understood")[0]
    assert "The LLM called no tool, so it gave no grounded plan" in header
    assert "every number below come from the offline planner" in header
    assert "Not grounded: the LLM called no tool" in md
    assert data["llm_answer"] in md.split("## The LLM's answer")[1]
    assert any("the LLM called no tool" in line for line in report.assumptions)


def test_a_model_that_calls_tools_but_never_submits_gets_the_offline_layout_said_plainly(openai_server, offline):
    openai_server.script(tool_calls(("estimate_step_time", {**JOB, "tp": 8})), reply("Use TP8."),
                         reply("Use TP8, really."))
    report = llm_plan(openai_server)
    assert report.llm_status == "no_submission" and report.recommended == offline.recommended
    assert "did not hand over a layout (submit_plan)" in report.to_markdown().split("## Request as understood")[0]
    assert report.llm_answer == "Use TP8, really." and report.grounding.ok  # TP8 was evaluated: grounded


def test_an_empty_answer_is_not_called_grounded(openai_server):
    openai_server.script(tool_calls(("submit_plan", {"layout": {**JOB, "tp": 1}})), reply(""))
    report = llm_plan(openai_server)
    assert report.grounding.ok is False and report.grounding.status == "empty_answer"
    assert report.grounding.share_grounded is None
    md = report.to_markdown()
    assert "Not grounded: the LLM's final answer was empty." in md and "(100.0%)" not in md


@pytest.mark.parametrize("failures", [
    [http_error(400, CONTEXT_ERROR)] * 2,  # the loop retries once with the lean tools; still too long
    [http_error(500, PARSE_ERROR)],  # repeats deterministically: not retried
])
def test_a_server_error_after_the_model_started_falls_back_to_the_labelled_offline_plan(openai_server, offline,
                                                                                       failures):
    failure = failures[0]
    openai_server.script(tool_calls(("estimate_step_time", {**JOB, "tp": 8})), *failures)
    events = []
    report = llm_plan(openai_server, on_event=lambda kind, data: events.append(kind))
    assert report.backend == "offline" and report.llm_status == "failed" and report.llm_model == "scripted-model"
    assert failure["message"] in report.llm_error
    assert report.recommended == offline.recommended and "fallback" in events
    header = report.to_markdown().split("## Request as understood")[0]
    assert "The LLM agent (`scripted-model`) failed: " in header and "This plan was made without it." in header
    assert json.loads(report.to_json())["llm_error"] == report.llm_error


def test_a_server_that_never_answers_falls_back_at_the_deadline(openai_server, monkeypatch, offline):
    monkeypatch.setenv("TRAINPLAN_LLM_DEADLINE_S", "0.2")
    openai_server.script(hang())
    report = llm_plan(openai_server)
    assert report.llm_status == "failed" and "0.2 s deadline" in report.llm_error
    assert report.recommended == offline.recommended


def test_a_request_without_its_essentials_fails_before_the_llm_is_asked(openai_server):
    with pytest.raises(InputError, match="^the request needs a model"):
        llm_plan(openai_server, "plan something big for me")
    assert openai_server.requests == []


def run_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TRAINPLAN_"))}
    return in_process(*args, env={**base, **env})


def test_cli_falls_back_with_a_progress_line_per_step(openai_server):
    openai_server.script(tool_calls(("estimate_step_time", {**JOB, "tp": 8})), hang())
    result = run_cli("plan", SMALL, "--json", env={"OPENAI_BASE_URL": openai_server.base_url,
                                                   "TRAINPLAN_LLM_DEADLINE_S": "1"})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("trainplan: asking the LLM (turn 1, ")
    assert "trainplan: the LLM is calling estimate_step_time" in lines
    assert any(line.startswith("trainplan: the LLM failed (the LLM gave no final answer within the 1 s deadline")
               for line in lines)
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert data["llm_status"] == "failed" and data["recommended"]["fits"] is True


# --- an 8K context ----------------------------------------------------------------------------------

CONTEXT_8K = 8192


def estimated_tokens(prose: str = "", data: str = "") -> int:
    """A conservative token count: 4 characters per token of English, 3 of JSON (small-vocabulary
    tokenizers such as SmolLM2's split JSON punctuation finely)."""
    return len(prose) // 4 + len(data) // 3


def test_the_lean_prompt_and_a_first_round_of_results_fit_an_8k_context():
    from trainplan.agent.llm import _tool_content
    from trainplan.agent.toolset import agent_tools, lean_agent_tools, lean_result
    from trainplan.agent.prompt_text import system_prompt
    from trainplan.agent.registry import dispatch

    job = {"model": "llama3-70b", "gpu": "h100-sxm-80gb", "gpus": 512, "seq": 8192}
    search = _tool_content(lean_result(dispatch("search_configs", {**job, "tokens": "15T", "top_k": 3})))
    step = _tool_content(lean_result(dispatch("estimate_step_time", {**job, "tp": 8, "pp": 4})))
    lean = estimated_tokens(system_prompt(), json.dumps(lean_agent_tools()))
    reply_room = 1000  # a plan's Markdown
    assert lean + estimated_tokens(data=search + step) + reply_room <= CONTEXT_8K
    # The full tool set is what a large context gets; it alone would take most of an 8K context.
    assert estimated_tokens(system_prompt(), json.dumps(agent_tools())) > CONTEXT_8K / 2 > lean
    names = [t["function"]["name"] for t in lean_agent_tools()]
    assert "submit_plan" in names and "search_configs" in names and "estimate_step_time" in names


def test_a_first_request_over_the_context_is_retried_with_the_lean_tools(openai_server, offline):
    from trainplan.agent.llm import _tool_content
    from trainplan.agent.toolset import agent_tools, lean_agent_tools, lean_result
    from trainplan.agent.registry import dispatch

    openai_server.context_tokens = len(json.dumps(agent_tools())) // 4  # the full tools alone overflow
    openai_server.script(tool_calls(("submit_plan", {"layout": {**JOB, "tp": 1}})), reply("Submitted."))
    report = llm_plan(openai_server)
    assert openai_server.refused == ["context"] and report.llm_status == "submitted"
    assert openai_server.requests[1]["tools"] == lean_agent_tools()
    assert openai_server.requests[-1]["tools"] == lean_agent_tools()  # kept for the rest of the run
    accepted = json.loads(openai_server.requests[-1]["messages"][-1]["content"])
    full = dispatch("submit_plan", {"layout": {**JOB, "tp": 1}})
    assert accepted == json.loads(_tool_content(lean_result(full)))  # the lean view from then on


def test_the_lean_tools_keep_the_fine_tuning_knobs_the_contract_defines():
    from trainplan.agent.toolset import LEAN_DROPPED_KNOBS, lean_agent_tools
    from trainplan.tools.config.contract import FINE_TUNING_KNOBS, Layout
    from trainplan.tools.core.enums import LoraTargets, Method

    assert set(FINE_TUNING_KNOBS) <= set(Layout.model_fields) and not set(FINE_TUNING_KNOBS) & set(LEAN_DROPPED_KNOBS)
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in lean_agent_tools()}
    for parameters in (tools["estimate_step_time"], tools["search_configs"], tools["submit_plan"]["properties"]["layout"]):
        knobs = parameters["properties"]
        assert set(FINE_TUNING_KNOBS) <= set(knobs) <= set(parameters["required"])
        assert knobs["method"]["enum"] == [*(m.value for m in Method), None]
        assert knobs["lora_targets"]["enum"] == [*(t.value for t in LoraTargets), None]
        assert knobs["lora_rank"]["type"] == ["integer", "null"]
        assert not any("title" in knob or "description" in knob for knob in knobs.values())


def test_a_small_context_model_plans_qlora_through_the_lean_tools(openai_server):
    from trainplan.agent.toolset import agent_tools, lean_agent_tools

    openai_server.context_tokens = len(json.dumps(agent_tools())) // 4  # the full tools alone overflow
    lean = {t["function"]["name"]: t["function"]["parameters"] for t in lean_agent_tools()}
    layout_schema = lean["submit_plan"]["properties"]["layout"]
    layout = {name: None for name in layout_schema["properties"]}
    layout.update(model="llama3-70b", gpu="rtx-4090", gpus=2, zero=3, recompute="full", seq=512, gbs=16,
                  method="qlora", lora_rank=64, lora_targets="attention")
    openai_server.script(tool_calls(("submit_plan", {"layout": layout, "tokens": None, "price": None})),
                         reply("QLoRA, rank 64, on the attention projections."))
    report = llm_plan(openai_server, "fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s")
    assert openai_server.requests[-1]["tools"] == lean_agent_tools() and report.llm_status == "submitted"
    config = report.recommended["config"]
    assert (config["method"], config["lora_rank"], config["lora_targets"]) == ("qlora", 64, "attention")
    assert report.recommended["fits"] is True


def test_an_llm_that_submits_nothing_gets_the_offline_plan_of_the_named_engine(openai_server):
    prose = "Use TP8 x PP4."
    openai_server.script(reply(prose), reply(prose))
    report = llm_plan(openai_server, engine="torchtitan")
    assert report.llm_status == "no_tool_calls" and report.engine == "torchtitan"
    assert report.launch.engine == "torchtitan"
    assert report.recommended["config"]["attention"] == "flash2"     # scored with torchtitan's kernel
