"""The LLM path never loses a plan: once the request is understood, a layout the tools refuse on
re-evaluation, a tool that fails on the LLM's plan, or its launch settings failing gives the labelled offline
plan (issue 21 item 7), in `plan` and in the chat's report."""

from __future__ import annotations

import json

import openai
import pytest

from openai_server import reply, tool_calls
from trainplan.agent import llm_backend, planner
from trainplan.agent.config import LlmEndpoint
from trainplan.agent.llm_backend import report_from_conversation
from trainplan.agent.planner import plan
from trainplan.agent.request import parse_partial
from trainplan.tools.core.errors import InputError

SMALL = "Llama 3 8B on 64 H100s for 100B tokens, seq 4096, global batch 256"
JOB = {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64, "seq": 4096, "gbs": 256}
LLAMA3_8B_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192,
                    "rope_theta": 500000.0, "tie_word_embeddings": False}


@pytest.fixture(scope="module")
def offline():
    """The offline plan of SMALL, planned once per module (the tests compare with it and never change it)."""
    return plan(SMALL, backend="offline")


def llm_plan(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    return plan(SMALL, backend="openai", endpoint=LlmEndpoint(client=client, model="scripted-model"))


def assert_labelled_offline(report, offline, says: str) -> None:
    assert report.backend == "offline" and report.llm_status == "failed" and report.llm_model == "scripted-model"
    assert says in report.llm_error
    assert report.recommended == offline.recommended and report.launch is not None and report.launch.content
    header = report.to_markdown().split("## Request as understood")[0]
    assert "The LLM agent (`scripted-model`) failed: " in header and "This plan was made without it." in header
    assert json.loads(report.to_json())["llm_error"] == report.llm_error


def test_a_submitted_model_the_tools_refuse_on_re_evaluation_falls_back(openai_server, offline, tmp_path,
                                                                         monkeypatch):
    """The LLM submits a model config file: submit_plan accepts it, but the report's re-evaluation once looked
    the model up by the name inside the file ('my-model'), which is no catalog name: the plan was lost."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model.json").write_text(json.dumps(LLAMA3_8B_CONFIG))
    openai_server.script(tool_calls(("submit_plan", {"layout": {**JOB, "model": "my-model.json", "tp": 1}})),
                         reply("Done: TP1."))
    report = llm_plan(openai_server)
    assert_labelled_offline(report, offline, "the tools refused the layout it submitted: unknown model 'my-model'")
    assert [call["name"] for call in report.tool_calls] == ["submit_plan"]


@pytest.mark.parametrize("failure, says", [
    (InputError("tp=3 does not divide the 32 attention heads"), "refused the layout it submitted: tp=3"),
    (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
])
def test_a_tool_failing_on_the_submitted_layout_falls_back(openai_server, offline, monkeypatch, failure, says):
    openai_server.script(tool_calls(("submit_plan", {"layout": {**JOB, "tp": 2}})), reply("Done: TP2."))
    real, failed = llm_backend.evaluate_for_job, []

    def evaluate(config, job, timeline=False):
        if timeline and not failed:   # the submitted layout's re-evaluation, the first with a timeline
            failed.append(config["tp"])
            raise failure
        return real(config, job, timeline)
    monkeypatch.setattr(llm_backend, "evaluate_for_job", evaluate)
    report = llm_plan(openai_server)
    assert failed == [2], "the LLM's layout was re-evaluated first"
    assert_labelled_offline(report, offline, says)


def test_launch_settings_failing_on_the_llm_plan_fall_back(openai_server, offline, monkeypatch):
    openai_server.script(tool_calls(("submit_plan", {"layout": {**JOB, "tp": 2}})), reply("Done: TP2."))
    real, calls = planner.launch_settings, []

    def launch_settings(model, config, engine):
        calls.append(config["tp"])
        if len(calls) == 1:
            raise KeyError("tensor_parallel")
        return real(model, config, engine)
    monkeypatch.setattr(planner, "launch_settings", launch_settings)
    report = llm_plan(openai_server)
    assert calls[0] == 2, "the LLM's layout was tried first"
    assert_labelled_offline(report, offline, "the tools failed on its plan: KeyError")


def test_the_chat_report_of_a_refused_submission_is_the_offline_plan(offline):
    bad = {**JOB, "model": "no-such-model", "tp": 1, "pp": 1, "precision": "bf16"}
    calls = [{"name": "submit_plan", "arguments": {"layout": bad}, "result": {"accepted": True, "config": bad}}]
    report = report_from_conversation(SMALL, parse_partial(SMALL), text="TP1.", calls=calls, grounding=None,
                                      llm_model="scripted-model")
    assert report.llm_status == "failed" and "unknown model 'no-such-model'" in report.llm_error
    assert report.recommended == offline.recommended


def test_an_incomplete_request_still_gets_the_refusal_not_a_traceback():
    bad = {**JOB, "model": "no-such-model", "tp": 1, "pp": 1, "precision": "bf16"}
    calls = [{"name": "submit_plan", "arguments": {"layout": bad}, "result": {"accepted": True, "config": bad}}]
    with pytest.raises(InputError, match="unknown model 'no-such-model'"):
        report_from_conversation("plan it", parse_partial("plan it"), text="", calls=calls, grounding=None,
                                 llm_model="scripted-model")
