"""The agent loop against a local scripted OpenAI-compatible server, through the real openai client."""

from __future__ import annotations

import json
import socket

import openai
import pytest

from openai_server import (
    ScriptedServer,
    disconnect,
    http_error,
    reply,
    tool_calls,
)
from trainplan.agent.config import DEFAULT_MODEL, llm_configured, load_settings
from trainplan.agent.llm import (
    REASK_PREFIX,
    AgentError,
    MaxTurnsExceeded,
    RetryPolicy,
    make_client,
    run_agent,
)

FAST = RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.01)
MEMORY = {"memory_gib": {"weights": 16.44, "total": 74.53, "capacity": 79.65}, "fits": True,
          "config": {"tp": 8, "pp": 4, "dp": 2, "zero": 1}}
COST = {"training": {"tokens": 15.6e12, "gpu_hours": 1234567.8, "days": 41.2, "cost_usd": 2469135.6}}
TOOLS = [
    {"type": "function", "function": {
        "name": "calculate_memory", "description": "Per-GPU memory of a layout.",
        "parameters": {"type": "object", "required": ["model", "gpus"],
                       "properties": {"model": {"type": "string"}, "gpus": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "estimate_cost", "description": "Days, GPU-hours and dollars.",
        "parameters": {"type": "object", "required": ["tokens"],
                       "properties": {"tokens": {"type": "number"}}}}},
]


def dispatch(name: str, arguments: str) -> dict:
    """A tiny registry with the real dispatch contract: never raises, errors come back as {'error'}."""
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return {"error": f"arguments are not valid JSON: {exc}"}
    if name == "calculate_memory":
        if not isinstance(args.get("gpus"), int):
            return {"error": f"gpus: expected an integer, got {args.get('gpus')!r}"}
        return MEMORY
    if name == "estimate_cost":
        return COST
    return {"error": f"unknown tool '{name}'"}


def agent(server: ScriptedServer, request: str = "Plan llama3-70b on 64 H100s.", **kwargs):
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    kwargs.setdefault("retry", FAST)
    return run_agent(request, system_prompt="You plan training runs.", tools=TOOLS, dispatch=dispatch,
                     client=client, model="scripted-model", **kwargs)


def tool_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def test_tool_call_then_grounded_answer(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64})),
        reply("TP8 x PP4 x DP2 with ZeRO-1 needs 74.5 GiB per GPU (80 GB cards, 79.65 GiB usable)."),
    )
    result = agent(openai_server)
    assert result.grounding.ok and not result.reasked
    assert result.text.endswith("79.65 GiB usable).")
    assert result.tool_calls == [{"id": "call_1_0", "name": "calculate_memory",
                                  "arguments": '{"model": "llama3-70b", "gpus": 64}', "result": MEMORY}]
    first, second = openai_server.requests
    assert first["model"] == "scripted-model" and first["tools"] == TOOLS
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert openai_server.headers[0]["authorization"] == "Bearer test"
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1_0"
    assert tool_messages(second) == [
        {"role": "tool", "tool_call_id": "call_1_0", "content": json.dumps(MEMORY)}]
    assert result.messages[-1] == {"role": "assistant", "content": result.text}
    assert result.turns == 2


def test_parallel_tool_calls_each_get_their_own_reply(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64}),
                   ("estimate_cost", {"tokens": 15.6e12})),
        reply("74.5 GiB per GPU; 15.6T tokens take 41.2 days, 1.23M GPU-hours and $2.47M."),
    )
    events = []
    result = agent(openai_server, on_event=lambda kind, data: events.append((kind, data["name"])))
    assert result.grounding.ok
    assert [c["name"] for c in result.tool_calls] == ["calculate_memory", "estimate_cost"]
    replies = tool_messages(openai_server.requests[1])
    assert [m["tool_call_id"] for m in replies] == ["call_1_0", "call_1_1"]
    assert [json.loads(m["content"]) for m in replies] == [MEMORY, COST]
    assert events == [("tool_call", "calculate_memory"), ("tool_result", "calculate_memory"),
                      ("tool_call", "estimate_cost"), ("tool_result", "estimate_cost")]


def test_invented_number_is_reasked_and_corrected(openai_server):
    openai_server.script(
        tool_calls(("estimate_cost", {"tokens": 15.6e12})),
        reply("The run takes 41.2 days and costs $3.1M at 45% MFU."),
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64})),
        reply("The run takes 41.2 days and costs $2.47M; each GPU holds 74.5 GiB."),
    )
    events = []
    result = agent(openai_server, on_event=lambda kind, data: events.append((kind, data)))
    assert result.reasked and result.grounding.ok
    assert "[ungrounded]" not in result.text
    reask = openai_server.requests[2]["messages"][-1]
    assert reask["role"] == "user"
    assert reask["content"] == f"{REASK_PREFIX} $3.1M, 45%. Call a tool for them or remove them."
    assert ("reask", {"numbers": ["$3.1M", "45%"]}) in events
    assert len(openai_server.requests) == 4


def test_number_still_ungrounded_after_reask_is_marked(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64})),
        reply("Peak memory is 74.5 GiB; MFU will be 52%."),
        reply("Peak memory is 74.5 GiB; MFU will be about 52%."),
    )
    result = agent(openai_server)
    assert result.reasked and not result.grounding.ok
    assert [m.text for m in result.grounding.ungrounded] == ["52%"]
    assert result.text == "Peak memory is 74.5 GiB; MFU will be about 52% [ungrounded]."
    assert result.grounding.share_grounded == 0.5
    # The re-ask is sent once, and a second reply ends the run.
    assert [m["role"] for m in result.messages].count("user") == 2


def test_reask_message_does_not_ground_its_own_numbers_in_a_follow_up(openai_server):
    openai_server.script(reply("It costs $9M."), reply("It costs $9M."),
                         reply("Still $9M?"), reply("Still $9M."))
    first = agent(openai_server)
    second = agent(openai_server, "And the cost?", history=first.messages)
    assert [m.text for m in second.grounding.ungrounded] == ["$9M"]
    assert second.text == "Still $9M [ungrounded]."


def test_bad_tool_arguments_go_back_to_the_model_as_tool_errors(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", '{"model": "llama3-70b", "gpus": "many"}'),
                   ("calculate_memory", '{"model": '),
                   ("no_such_tool", "{}")),
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64})),
        reply("74.5 GiB per GPU."),
    )
    result = agent(openai_server)
    assert result.grounding.ok
    errors = [json.loads(m["content"]) for m in tool_messages(openai_server.requests[1])]
    assert errors[0] == {"error": "gpus: expected an integer, got 'many'"}
    assert errors[1]["error"].startswith("arguments are not valid JSON")
    assert errors[2] == {"error": "unknown tool 'no_such_tool'"}
    assert [c["result"] for c in result.tool_calls][:3] == errors


def test_http_500_is_retried(openai_server):
    openai_server.script(http_error(500, "overloaded"), disconnect(), reply("No numbers needed."))
    events = []
    result = agent(openai_server, on_event=lambda kind, data: events.append((kind, data)))
    assert result.text == "No numbers needed."
    assert len(openai_server.requests) == 3
    assert [(k, d["attempt"]) for k, d in events] == [("retry", 1), ("retry", 2)]
    assert events[0][1]["delay_s"] == pytest.approx(0.001)


def test_rate_limit_is_retried(openai_server):
    openai_server.script(http_error(429, "slow down"), reply("Done."))
    assert agent(openai_server).text == "Done."


def test_persistent_500_becomes_one_line_agent_error(openai_server):
    openai_server.script(*[http_error(503, "model is\nloading")] * 3)
    with pytest.raises(AgentError) as caught:
        agent(openai_server)
    message = str(caught.value)
    assert "\n" not in message
    assert message == (f"the LLM server at {openai_server.base_url} failed with HTTP 503 after 3 tries: "
                       "model is loading")


@pytest.mark.parametrize(("status", "hint"), [(401, "check OPENAI_API_KEY"),
                                              (404, "check TRAINPLAN_MODEL (now 'scripted-model')"),
                                              (400, "rejected the request with HTTP 400: bad tools")])
def test_non_transient_errors_are_not_retried(openai_server, status, hint):
    openai_server.script(http_error(status, "bad tools"))
    with pytest.raises(AgentError, match=None) as caught:
        agent(openai_server)
    assert hint in str(caught.value) and "\n" not in str(caught.value)
    assert len(openai_server.requests) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_server_down_is_one_clear_line():
    port = _closed_port()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="test", max_retries=0)
    with pytest.raises(AgentError) as caught:
        run_agent("hi", system_prompt="s", tools=TOOLS, dispatch=dispatch, client=client, retry=FAST)
    message = str(caught.value)
    assert message.startswith(f"cannot reach the LLM server at http://127.0.0.1:{port}/v1: ")
    assert message.endswith(" (3 tries); check OPENAI_BASE_URL or use --backend offline")
    assert "\n" not in message


def test_streaming_assembles_text_and_tool_call_deltas(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64}),
                   ("estimate_cost", {"tokens": 15.6e12}),
                   content="Checking memory and cost."),
        reply("Use TP8 x PP4: 74.5 GiB per GPU, $2.47M in total."),
    )
    tokens, calls = [], []

    def on_event(kind: str, data: dict) -> None:
        if kind == "token":
            tokens.append(data["text"])
        elif kind == "tool_call":
            calls.append((data["id"], data["name"], json.loads(data["arguments"])))

    result = agent(openai_server, stream=True, on_event=on_event)
    assert all(body["stream"] is True for body in openai_server.requests)
    assert calls == [("call_1_0", "calculate_memory", {"model": "llama3-70b", "gpus": 64}),
                     ("call_1_1", "estimate_cost", {"tokens": 15.6e12})]
    assert "".join(tokens) == "Checking memory and cost." + result.text
    assert len(tokens) > 5
    assistant = openai_server.requests[1]["messages"][2]
    assert assistant["content"] == "Checking memory and cost."
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [
        '{"model": "llama3-70b", "gpus": 64}', '{"tokens": 15600000000000.0}']
    assert result.grounding.ok


def test_streaming_retries_a_500(openai_server):
    openai_server.script(http_error(502), reply("Done."))
    assert agent(openai_server, stream=True).text == "Done."


def test_turn_cap_raises_max_turns_exceeded(openai_server):
    openai_server.script(*[tool_calls(("estimate_cost", {"tokens": 1}))] * 3)
    with pytest.raises(MaxTurnsExceeded, match="after 3 turns"):
        agent(openai_server, max_turns=3)


def test_reask_is_skipped_when_the_turn_cap_is_reached(openai_server):
    openai_server.script(tool_calls(("estimate_cost", {"tokens": 1})), reply("It costs $5M."))
    result = agent(openai_server, max_turns=2)
    assert not result.reasked and result.text == "It costs $5M [ungrounded]."


def test_history_continues_the_conversation(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64})),
        reply("74.5 GiB per GPU."),
        reply("Weights take 16.44 GiB of the 74.53 GiB."),
    )
    first = agent(openai_server)
    second = agent(openai_server, "How much are the weights?", history=first.messages)
    assert second.grounding.ok and second.tool_calls == []
    sent = openai_server.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[-1]["content"] == "How much are the weights?"


def test_settings_and_client_from_environment(monkeypatch):
    assert not llm_configured()
    assert load_settings().model == DEFAULT_MODEL
    with pytest.raises(AgentError, match="no LLM configured"):
        run_agent("hi", system_prompt="s", tools=[], dispatch=dispatch)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TRAINPLAN_MODEL", "qwen2.5-7b-instruct")
    assert llm_configured()
    settings = load_settings()
    assert settings.model == "qwen2.5-7b-instruct" and settings.api_key is None
    client = make_client(settings)
    assert str(client.base_url) == "http://127.0.0.1:9/v1/" and client.max_retries == 0


def test_default_endpoint_is_unreachable_in_tests(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert llm_configured()
    pattern = r"^cannot reach the LLM server at https://api\.openai\.com/v1: .*blocked"
    with pytest.raises(AgentError, match=pattern):
        run_agent("hi", system_prompt="s", tools=[], dispatch=dispatch, retry=RetryPolicy(max_retries=0))


def test_real_network_is_blocked():
    with pytest.raises(ConnectionRefusedError, match="blocked"):
        socket.create_connection(("192.0.2.1", 80), timeout=1)
    with pytest.raises(ConnectionRefusedError, match="blocked"):
        socket.getaddrinfo("example.com", 443)
