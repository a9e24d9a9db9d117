"""Property tests of hostile inputs (issue 21, item 9): configs, `--from` files, tool arguments, MCP
messages and replies of a hostile OpenAI-compatible server, generated with hypothesis.

Whatever comes in: an exit code in {0, 2} with no traceback and finite JSON (the CLI); an
{"error": one line} or a finite JSON result (dispatch); a JSON-RPC error or a message the MCP SDK
accepts (MCP); an AgentError of one line or an answer (the LLM loop). In-process and small
(`max_examples`, TRAINPLAN_FUZZ_EXAMPLES=600 for a long run), so the default run stays quick; no timed
assertions.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path

import openai
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from openai_server import ScriptedServer, raw, raw_stream
from test_fuzz_cli import _reject_constant, assert_finite, run
from trainplan.tools.hardware.catalog.entries import MODELS_DIR
from trainplan.agent.registry import dispatch, tool_names

FUZZ = settings(max_examples=int(os.environ.get("TRAINPLAN_FUZZ_EXAMPLES", "30")), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6),
    st.sampled_from([0, -1, 2**31, 2**63, 10**40, 1e308, -1e308, 1e-300, 0.5, 2.5, 1e5, 1e6]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["llama", "8", "1T", "h100", "selective", "", "nan"]),
)
HOSTILE = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
"""Any JSON value, weighted to what breaks code that trusts its input: wrong types, huge and tiny numbers."""
RAW_TAILS = st.sampled_from(["", "[" * 5000 + "]" * 5000, "9" * 5000, "NaN", "1e400", '"' + "x" * 70_000 + '"'])
"""Values written as raw JSON text: nesting, digits, non-finite numbers and long strings past the limits."""
_names = itertools.count()
_DIR = Path(tempfile.mkdtemp(prefix="trainplan-fuzz-"))


def _file(text: str) -> str:
    """A new file per example (the model catalog caches by path)."""
    path = _DIR / f"input-{next(_names)}.json"
    path.write_text(text)
    return str(path)


def _with(base: dict, changes: dict, raw_tail: str) -> str:
    data = {**base, **changes}
    text = json.dumps(data)
    if raw_tail and data:
        key = next(iter(data))
        text = text.replace(json.dumps(key) + ": " + json.dumps(data[key]), json.dumps(key) + ": " + raw_tail, 1)
    return text


def check_cli(argv: list[str]) -> None:
    code, out, err = run(argv)
    assert "Traceback" not in out + err, (argv, err[-2000:])
    assert code in (0, 2), (argv, code, err[-2000:])
    if code == 2:
        assert err.strip().startswith("error:") and len(err.strip().splitlines()) == 1, err
    else:
        assert_finite(json.loads(out, parse_constant=_reject_constant))


LLAMA = json.loads((MODELS_DIR / "llama3-8b.json").read_text())
MOE = json.loads((MODELS_DIR / "qwen3-30b-a3b.json").read_text())
SIZE_KEYS = ["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "intermediate_size", "vocab_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
             "hidden_act", "max_position_embeddings", "head_dim", "mlp_only_layers", "decoder_sparse_step"]
CONFIG_KEYS = [*SIZE_KEYS, *SIZE_KEYS, *sorted({*LLAMA, *MOE, "attention_dropout", "rope_scaling"})]
"""Mostly the fields the readers size and type from, each twice as likely as the rest."""


@FUZZ
@given(st.sampled_from([LLAMA, MOE]), st.dictionaries(st.sampled_from(CONFIG_KEYS), HOSTILE, min_size=1, max_size=3),
       RAW_TAILS)
@example(LLAMA, {"model_type": []}, "")          # the probes of issue 21, always run
@example(LLAMA, {"hidden_size": 1e308}, "")
@example(MOE, {"num_hidden_layers": 10**6}, "")
@example(LLAMA, {"hidden_act": {}}, "[" * 5000 + "]" * 5000)
def test_fuzz_config_files(base, changes, raw_tail):
    path = _file(_with(base, changes, raw_tail))
    check_cli(["estimate", "--model", path, "--gpu", "h100", "--gpus", "8", "--gbs", "16", "--json"])


SAVED = {"config": {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "tp": 1, "pp": 1, "cp": 1, "ep": 1,
                    "zero": 1, "mbs": 1, "gbs": 16, "seq": 4096, "recompute": "none", "schedule": "1f1b",
                    "precision": "bf16"}}
FROM_KEYS = [*SAVED["config"], "vpp", "price", "tokens", "goodput", "headroom_gib", "method", "lora_rank"]


@FUZZ
@given(st.dictionaries(st.sampled_from(FROM_KEYS), HOSTILE, min_size=1, max_size=3), RAW_TAILS,
       st.sampled_from(["estimate", "export"]))
@example({"tp": "8"}, "", "estimate")
@example({"price": 1e308}, "", "estimate")
@example({"recompute": ["full"]}, "9" * 5000, "export")
def test_fuzz_from_files(changes, raw_tail, command):
    config = {**SAVED["config"], **changes}
    config.setdefault("tp", 1)
    path = _file(_with({"config": config}, {}, "") if not raw_tail else
                 json.dumps({"config": config}).replace('"tp": ' + json.dumps(config["tp"]), '"tp": ' + raw_tail, 1))
    argv = [command, "--from", path] + (["--json"] if command == "estimate" else ["--engine", "megatron"])
    code, out, err = run(argv)
    assert "Traceback" not in out + err, (argv, err[-2000:])
    assert code in (0, 2), (argv, code, err[-2000:])
    if code == 2:
        assert err.strip().startswith("error:") and len(err.strip().splitlines()) == 1, err
    elif command == "estimate":
        assert_finite(json.loads(out, parse_constant=_reject_constant))


ARGUMENT_BASE = {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "gbs": 16, "seq": 4096, "tokens": "1T",
                 "step_s": 2.0, "price": 2.0, "schedule": "1f1b", "pp": 2, "num_microbatches": 8, "kind": "gpus"}
ARGUMENT_KEYS = [*ARGUMENT_BASE, "goodput", "tp", "zero", "mbs", "recompute", "layout", "vpp", "forward_s",
                 "timeline", "unknown"]


@FUZZ
@given(st.sampled_from(tool_names()), st.dictionaries(st.sampled_from(ARGUMENT_KEYS), HOSTILE, max_size=4),
       st.sampled_from(ARGUMENT_KEYS), RAW_TAILS)
@example("estimate_cost", {"price": 1e308}, "unknown", "")
@example("estimate_cost", {"goodput": 1e-300}, "unknown", "")
@example("list_catalog", {}, "kind", "9" * 5000)
@example("describe_model", {"model": "/dev/zero"}, "seq", "[" * 5000 + "]" * 5000)
def test_fuzz_tool_arguments(name, changes, raw_key, raw_tail):
    arguments = {k: v for k, v in ARGUMENT_BASE.items() if k in _fields(name)}
    arguments.update(changes)
    text = json.dumps(arguments)
    if raw_tail:
        text = text[:-1] + (", " if arguments else "") + json.dumps(raw_key) + ": " + raw_tail + "}"
    result = dispatch(name, text)
    assert isinstance(result, dict)
    if "error" in result:
        assert set(result) == {"error"} and "\n" not in result["error"] and len(result["error"]) < 2000
    else:
        json.dumps(result, allow_nan=False)  # finite JSON, or it raises


def _fields(name: str) -> set[str]:
    from trainplan.agent.registry import TOOLS_BY_NAME

    return set(TOOLS_BY_NAME[name].args.model_fields)


# --- MCP ---------------------------------------------------------------------------------------------

mcp_types = pytest.importorskip("mcp_types")
CALL, LIST = "/".join(("tools", "call")), "/".join(("tools", "list"))
"""The MCP method names (joined, so that tests/test_doc_references.py does not read them as paths)."""


@FUZZ
@given(st.fixed_dictionaries({}, optional={"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "id": HOSTILE,
                                           "method": st.sampled_from([CALL, "ping", LIST, "x"]),
                                           "params": HOSTILE}),
       RAW_TAILS, st.booleans())
@example({"jsonrpc": "2.0", "id": 1, "method": CALL}, "[" * 5000 + "]" * 5000, False)
@example({"jsonrpc": "2.0", "id": "a", "method": CALL}, "9" * 5000, False)
def test_fuzz_mcp_messages(message, raw_tail, garble):
    from trainplan.cli_mcp import BoundedStdin

    text = json.dumps(message)
    if raw_tail:
        text = text[:-1] + (", " if message else "") + '"params": ' + raw_tail + "}"
    if garble:
        text = text[: len(text) // 2]
    stdin = BoundedStdin.__new__(BoundedStdin)
    from trainplan.tools.core import safe_json

    stdin.limits = safe_json.MCP_MESSAGE
    refusal = stdin.refusal(text.encode(), too_long=False)
    if refusal is None:
        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)  # the SDK takes it: it answers
    else:
        request_id, code, line = refusal
        assert code in (mcp_types.PARSE_ERROR, mcp_types.INVALID_REQUEST) and "\n" not in line
        mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id,
                               error=mcp_types.ErrorData(code=code, message=line))  # a valid error response


# --- a hostile OpenAI-compatible server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_server():
    server = ScriptedServer().start()
    yield server
    server.stop()


def _completion(slot: str, value) -> dict:
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "list_catalog", "arguments": '{"kind": "gpus"}'}}]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    target = {"body": body, "choice": choice, "message": message, "call": message["tool_calls"][0],
              "function": message["tool_calls"][0]["function"]}
    where, _, key = slot.partition(".")
    target[where][key] = value
    return body


SLOTS = ["body.choices", "choice.message", "choice.finish_reason", "message.content", "message.tool_calls",
         "call.id", "call.function", "function.name", "function.arguments", "choice.index"]


@FUZZ
@given(st.sampled_from(SLOTS), HOSTILE, st.booleans(), st.sampled_from(["", "not json", "[1]", "{"]))
@example("body.choices", "abc", False, "")
@example("choice.message", None, True, "")
@example("function.arguments", [1, 2], False, "")
@example("function.arguments", [1, 2], True, "")
def test_fuzz_hostile_server_replies(hostile_server, slot, value, stream, garbage):
    from trainplan.agent.config import LlmEndpoint, Settings
    from trainplan.agent.llm import AgentError, AgentToolset, run_agent

    body = _completion(slot, value)
    if stream:
        choice = body.get("choices")
        chunk = dict(body, choices=[dict(c, delta=c.get("message")) if isinstance(c, dict) else c for c in choice]
                     if isinstance(choice, list) else choice)
        turn = raw_stream(garbage or json.dumps(chunk))
    else:
        turn = raw(garbage or json.dumps(body))
    hostile_server.turns.clear()
    hostile_server.script(turn, turn)
    settings = Settings(api_key="t", base_url=hostile_server.base_url, model="m", deadline_s=20.0, max_retries=0)
    client = openai.OpenAI(base_url=hostile_server.base_url, api_key="t", max_retries=0)
    try:
        result = run_agent("plan", system_prompt="s", toolset=AgentToolset(tools=[], dispatch=dispatch),
                           endpoint=LlmEndpoint(client=client, settings=settings), stream=stream, max_turns=2)
    except AgentError as exc:
        assert str(exc).strip() and "\n" not in str(exc), str(exc)
    else:
        assert isinstance(result.text, str)
        for call in result.tool_calls:
            json.dumps(call["result"], allow_nan=False)
