"""The agent loop against a local scripted OpenAI-compatible server, through the real openai client."""

from __future__ import annotations

import json
import socket

import openai
import pytest

from openai_server import (
    PARSE_ERROR,
    ScriptedServer,
    disconnect,
    hang,
    http_error,
    reply,
    stall,
    tool_calls,
)
from trainplan.agent.config import DEFAULT_MODEL, LlmEndpoint, Settings, llm_configured, load_settings
from trainplan.agent.llm import (
    AgentToolset,
    NO_TOOLS_REASK,
    REASK_PREFIX,
    AgentError,
    DeadlineExceeded,
    MaxTurnsExceeded,
    make_client,
    run_agent,
)
from trainplan.tools.core.errors import InputError
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


def settings_for(server: ScriptedServer, **limits) -> Settings:
    return Settings(api_key="test", base_url=server.base_url, model="scripted-model", **limits)


def agent(server: ScriptedServer, request: str = "Plan llama3-70b on 64 H100s.", *, limits: dict | None = None,
          require_tool: str | None = None, **kwargs):
    """run_agent through the real openai client that make_client builds (SDK retries, the no-retry hook)."""
    settings = settings_for(server, **(limits or {}))
    return run_agent(request, system_prompt="You plan training runs.",
                     toolset=AgentToolset(tools=TOOLS, dispatch=dispatch, require_tool=require_tool),
                     endpoint=LlmEndpoint(client=make_client(settings), settings=settings), **kwargs)


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
        {"role": "tool", "tool_call_id": "call_1_0", "content": json.dumps(MEMORY, separators=(",", ":"))}]
    assert result.messages[-1] == {"role": "assistant", "content": result.text}
    assert result.turns == 2


def test_parallel_tool_calls_each_get_their_own_reply(openai_server):
    openai_server.script(
        tool_calls(("calculate_memory", {"model": "llama3-70b", "gpus": 64}),
                   ("estimate_cost", {"tokens": 15.6e12})),
        reply("74.5 GiB per GPU; 15.6T tokens take 41.2 days, 1.23M GPU-hours and $2.47M."),
    )
    events = []
    result = agent(openai_server, on_event=lambda kind, data: events.append((kind, data.get("name"))))
    assert result.grounding.ok
    assert [c["name"] for c in result.tool_calls] == ["calculate_memory", "estimate_cost"]
    replies = tool_messages(openai_server.requests[1])
    assert [m["tool_call_id"] for m in replies] == ["call_1_0", "call_1_1"]
    # The model gets floats at 6 significant digits; the record and the grounding keep the full values.
    rounded_cost = {"training": {**COST["training"], "gpu_hours": 1234570.0, "cost_usd": 2469140.0}}
    assert [json.loads(m["content"]) for m in replies] == [MEMORY, rounded_cost]
    assert [c["result"] for c in result.tool_calls] == [MEMORY, COST]
    assert events == [("request", None), ("tool_call", "calculate_memory"), ("tool_result", "calculate_memory"),
                      ("tool_call", "estimate_cost"), ("tool_result", "estimate_cost"), ("request", None)]


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
    assert errors[1]["error"].startswith("calculate_memory: the arguments are not valid JSON")
    assert errors[2] == {"error": "unknown tool 'no_such_tool'"}
    assert [c["result"] for c in result.tool_calls][:3] == errors
    # The broken arguments never go back to the server: the history holds {} in their place.
    sent = openai_server.requests[1]["messages"][2]["tool_calls"]
    assert [c["function"]["arguments"] for c in sent] == ['{"model": "llama3-70b", "gpus": "many"}', "{}", "{}"]
    assert result.tool_calls[1]["arguments"] == '{"model": '  # the record keeps what the model sent


def test_transient_errors_are_retried_by_the_sdk_with_retry_after(openai_server):
    openai_server.script(http_error(500, "overloaded", retry_after_s=0.01), http_error(429, "slow down",
                         retry_after_s=0.02), reply("No numbers needed."))
    events = []
    result = agent(openai_server, on_event=lambda kind, data: events.append((kind, data)))
    assert result.text == "No numbers needed." and result.turns == 1
    assert len(openai_server.requests) == 3
    retries = [data for kind, data in events if kind == "retry"]
    assert [(r["attempt"], r["delay_s"]) for r in retries] == [(1, 0.01), (2, 0.02)]  # the server's Retry-After
    assert "500" in retries[0]["error"] and "429" in retries[1]["error"]
    assert [h.get("x-stainless-retry-count") for h in openai_server.headers] == ["0", "1", "2"]


def test_a_dropped_connection_is_retried(openai_server):
    openai_server.script(disconnect(), reply("Done."))
    assert agent(openai_server).text == "Done."
    assert len(openai_server.requests) == 2


def test_persistent_500_becomes_one_line_agent_error(openai_server):
    openai_server.script(*[http_error(503, "model is\nloading", retry_after_s=0.001)] * 3)
    with pytest.raises(AgentError) as caught:
        agent(openai_server)
    message = str(caught.value)
    assert "\n" not in message and caught.value.kind == "server"
    assert message == f"the LLM server at {openai_server.base_url} failed with HTTP 503: model is loading"
    assert len(openai_server.requests) == 3  # the first try and the SDK's max_retries=2


def test_errors_that_repeat_deterministically_are_not_retried(openai_server):
    openai_server.script(http_error(500, PARSE_ERROR, retry_after_s=0.001))
    with pytest.raises(AgentError, match="HTTP 500: Failed to parse tool call arguments as JSON"):
        agent(openai_server)
    assert len(openai_server.requests) == 1


def test_a_history_with_broken_arguments_is_refused_like_llama_cpp(openai_server):
    """The scripted server itself: what the loop must never send (it sends {} instead)."""
    client = make_client(settings_for(openai_server))
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "estimate_cost", "arguments": '{"tok'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    with pytest.raises(openai.InternalServerError, match="Failed to parse tool call arguments"):
        client.chat.completions.create(model="m", messages=history)
    assert openai_server.refused == ["parse"] and len(openai_server.requests) == 1  # not retried


def test_cut_off_tool_arguments_are_answered_with_an_error_and_valid_json(openai_server):
    openai_server.script(
        tool_calls(("estimate_cost", '{"tokens": 15.6e1'), finish="length"),
        tool_calls(("estimate_cost", {"tokens": 15.6e12})),
        reply("41.2 days."),
    )
    result = agent(openai_server)
    assert result.grounding.ok and openai_server.refused == []  # the strict server accepted every history
    error = json.loads(tool_messages(openai_server.requests[1])[0]["content"])["error"]
    assert error.startswith("estimate_cost: the arguments are not valid JSON, cut off at the reply's token limit")
    assert "call estimate_cost again" in error
    assert openai_server.requests[2]["messages"][2]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_a_reply_cut_at_max_tokens_is_final_with_a_notice(openai_server):
    openai_server.script(tool_calls(("estimate_cost", {"tokens": 15.6e12})),
                         reply("The run takes 41.2 days and", finish="length"))
    result = agent(openai_server, limits={"max_tokens": 64})
    assert result.truncated and not result.reasked
    assert result.text == ("The run takes 41.2 days and\n\n[cut off: this reply reached the limit of 64 tokens "
                           "per reply (TRAINPLAN_LLM_MAX_TOKENS)]")
    assert [body["max_tokens"] for body in openai_server.requests] == [64, 64]


def test_a_server_that_never_answers_is_bounded_by_the_deadline(openai_server):
    openai_server.script(hang())
    with pytest.raises(DeadlineExceeded) as caught:
        agent(openai_server, limits={"deadline_s": 0.2})
    assert caught.value.kind == "deadline"
    assert str(caught.value) == ("the LLM gave no final answer within the 0.2 s deadline; raise "
                                 "TRAINPLAN_LLM_DEADLINE_S or use a faster model")
    assert len(openai_server.requests) == 1  # the abandoned request is not retried


def test_a_stalled_stream_is_cut_at_the_deadline_and_never_replayed(openai_server):
    openai_server.script(stall("Use TP8 for this run."))
    tokens = []
    with pytest.raises(DeadlineExceeded):
        agent(openai_server, stream=True, limits={"deadline_s": 0.3},
              on_event=lambda kind, data: tokens.append(data["text"]) if kind == "token" else None)
    assert tokens == ["Use "]  # shown once; nothing after the deadline, and no retry replays it
    assert len(openai_server.requests) == 1


def test_a_stream_that_breaks_off_is_not_retried(openai_server):
    openai_server.script(reply("Use TP8 here."))
    settings = settings_for(openai_server)
    client = make_client(settings)
    real = client.chat.completions.create

    def broken(**kwargs):
        stream = real(**kwargs)
        pieces = iter(stream)

        class Broken:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                stream.close()

            def __iter__(self):
                yield next(pieces)
                yield next(pieces)
                raise openai.APIConnectionError(request=stream.response.request)

            def close(self):
                stream.close()

        return Broken()

    client.chat.completions.create = broken
    tokens = []
    with pytest.raises(AgentError, match="stream broke off after 1 text pieces") as caught:
        run_agent("hi", system_prompt="s", toolset=AgentToolset(tools=TOOLS, dispatch=dispatch),
                  endpoint=LlmEndpoint(client=client, settings=settings), stream=True, on_event=lambda kind, data: tokens.append(data["text"]) if kind == "token" else None)
    assert caught.value.kind == "stream" and tokens == ["Use "]
    assert len(openai_server.requests) == 1


def test_a_context_overflow_is_retried_once_without_earlier_tool_results(openai_server):
    big = {**COST, "detail": "x" * 4000}  # a long tool result, as search_configs gives
    settings = settings_for(openai_server)

    def run(request: str, history=None, on_event=None):
        return run_agent(request, system_prompt="s", toolset=AgentToolset(tools=TOOLS, dispatch=lambda name, arguments: big),
                         endpoint=LlmEndpoint(client=make_client(settings), settings=settings), history=history,
                         on_event=on_event)

    openai_server.script(tool_calls(("estimate_cost", {"tokens": 15.6e12})), reply("41.2 days."),
                         reply("It costs $2.47M."))
    first = run("Plan it.")
    openai_server.context_tokens = ScriptedServer.tokens(openai_server.requests[-1]) + 10  # an 8K server, scaled
    events = []
    second = run("And the cost?", history=first.messages, on_event=lambda kind, data: events.append((kind, data)))
    assert second.text == "It costs $2.47M." and second.grounding.ok  # grounded by the full earlier result
    assert openai_server.refused == ["context"] and ("compact", {"omitted": 1}) in events
    sent = openai_server.requests[-1]["messages"]
    assert json.loads(sent[3]["content"])["omitted"].startswith("an earlier tool result")
    with pytest.raises(AgentError, match="exceeds the available context size") as caught:
        run("x" * 20_000)  # too long by itself: nothing to leave out, and a 400 is not retried
    assert caught.value.kind == "context" and openai_server.refused == ["context"] * 2


def test_a_model_that_answers_without_tools_is_reasked_once(openai_server):
    openai_server.script(reply("Use plenty of data parallelism."), reply("Still plenty of data parallelism."))
    events = []
    result = agent(openai_server, require_tool="submit_plan", on_event=lambda kind, data: events.append((kind, data)))
    assert result.tools_reasked and result.tool_calls == [] and result.text == "Still plenty of data parallelism."
    reask = openai_server.requests[1]["messages"][-1]
    assert reask == {"role": "user", "content": NO_TOOLS_REASK.format(tool="submit_plan")}
    assert [kind for kind, _ in events].count("reask_tools") == 1


def test_a_cut_off_answer_without_tools_is_reasked_too(openai_server):
    openai_server.script(reply("This is a variant of the original design", finish="length"),
                         reply("Still no", finish="length"))
    result = agent(openai_server, require_tool="submit_plan")
    assert result.tools_reasked and result.truncated and result.text.startswith("Still no\n\n[cut off: ")


def test_a_model_that_does_not_submit_is_asked_to(openai_server):
    openai_server.script(tool_calls(("estimate_cost", {"tokens": 1})), reply("Done."),
                         tool_calls(("submit_plan", {"tp": 8})), reply("Submitted."))
    result = agent(openai_server, require_tool="submit_plan")
    assert openai_server.requests[2]["messages"][-1]["content"].startswith("You did not call submit_plan.")
    assert result.tools_reasked and result.text == "Submitted."


def test_an_empty_answer_is_not_grounded(openai_server):
    openai_server.script(tool_calls(("estimate_cost", {"tokens": 1})), reply(""))
    result = agent(openai_server)
    assert not result.grounding.ok and result.grounding.empty and not result.reasked


def test_server_down_is_one_clear_line():
    port = _closed_port()
    settings = Settings(api_key="test", base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    with pytest.raises(AgentError) as caught:
        run_agent("hi", system_prompt="s", toolset=AgentToolset(tools=TOOLS, dispatch=dispatch),
                  endpoint=LlmEndpoint(client=make_client(settings), settings=settings))
    message = str(caught.value)
    assert message.startswith(f"cannot reach the LLM server at http://127.0.0.1:{port}/v1: ")
    assert message.endswith("; check OPENAI_BASE_URL or use --backend offline")
    assert "\n" not in message and caught.value.kind == "config"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def test_streaming_retries_a_500_before_the_stream_starts(openai_server):
    openai_server.script(http_error(502, retry_after_s=0.001), reply("Done."))
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
        run_agent("hi", system_prompt="s", toolset=AgentToolset(tools=[], dispatch=dispatch))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TRAINPLAN_MODEL", "qwen2.5-7b-instruct")
    assert llm_configured()
    settings = load_settings()
    assert settings.model == "qwen2.5-7b-instruct" and settings.api_key is None
    assert (settings.deadline_s, settings.max_tokens, settings.max_retries) == (300.0, 2048, 2)
    client = make_client(settings)
    assert str(client.base_url) == "http://127.0.0.1:9/v1/" and client.max_retries == 2
    monkeypatch.setenv("TRAINPLAN_LLM_DEADLINE_S", "20")
    monkeypatch.setenv("TRAINPLAN_LLM_MAX_TOKENS", "512")
    monkeypatch.setenv("TRAINPLAN_LLM_MAX_RETRIES", "0")
    assert (load_settings().deadline_s, load_settings().max_tokens, load_settings().max_retries) == (20.0, 512, 0)
    for name, value in (("TRAINPLAN_LLM_DEADLINE_S", "soon"), ("TRAINPLAN_LLM_DEADLINE_S", "nan"),
                        ("TRAINPLAN_LLM_MAX_TOKENS", "1.5"), ("TRAINPLAN_LLM_MAX_RETRIES", "-1")):
        monkeypatch.setenv(name, value)
        with pytest.raises(InputError, match=f"^{name}='{value}' must be"):
            load_settings()
        monkeypatch.delenv(name)


def test_default_endpoint_is_unreachable_in_tests(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert llm_configured()
    monkeypatch.setenv("TRAINPLAN_LLM_MAX_RETRIES", "0")
    pattern = r"^cannot reach the LLM server at https://api\.openai\.com/v1: .*blocked"
    with pytest.raises(AgentError, match=pattern):
        run_agent("hi", system_prompt="s", toolset=AgentToolset(tools=[], dispatch=dispatch))


def test_real_network_is_blocked():
    with pytest.raises(ConnectionRefusedError, match="blocked"):
        socket.create_connection(("192.0.2.1", 80), timeout=1)
    with pytest.raises(ConnectionRefusedError, match="blocked"):
        socket.getaddrinfo("example.com", 443)


def test_dispatch_logs_the_exception_it_turns_into_a_tool_error(monkeypatch, caplog):
    """A bug in a tool reaches the model as one line, and the log keeps its traceback."""
    import dataclasses
    import logging

    from trainplan.agent import registry

    def broken(args):
        raise ZeroDivisionError("division by zero")

    tool = dataclasses.replace(registry.TOOLS_BY_NAME["list_catalog"], function=broken)
    monkeypatch.setitem(registry.TOOLS_BY_NAME, "list_catalog", tool)
    with caplog.at_level(logging.ERROR, logger="trainplan.agent.registry"):
        result = registry.dispatch("list_catalog", "{}")
    assert result == {"error": "list_catalog failed: ZeroDivisionError: division by zero"}
    (record,) = caplog.records
    assert record.getMessage() == "tool list_catalog failed on arguments {}" and record.exc_info[0] is ZeroDivisionError
