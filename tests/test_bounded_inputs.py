"""Bounded work and typed refusals (issue 21, items 3 and 4): every hostile input is one `error:` line
and exit 2 (or a JSON-RPC error), never a traceback, a hang or a non-finite number. Each case is a probe
that failed before: the test says what it was."""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from pathlib import Path

import pytest

from test_fuzz_cli import run
from trainplan.tools.core import safe_json
from trainplan.tools.hardware.catalog import load_model
from trainplan.tools.hardware.catalog.entries import MODELS_DIR
from trainplan.tools.core.errors import InputError
from trainplan.agent.registry import dispatch

LLAMA = json.loads((MODELS_DIR / "llama3-8b.json").read_text())
ESTIMATE = ["--gpu", "h100", "--gpus", "8"]


def one_error_line(code: int, out: str, err: str, fragment: str = "") -> str:
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert fragment in lines[0], lines[0]
    return lines[0]


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --- the reader ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels"),   # RecursionError before
    ('{"a": ' + "9" * 5000 + "}", "more than 100 digits"),            # Python's 4,300-digit ValueError before
    ('{"a": NaN}', "NaN"),
    ('{"a": -Infinity}', "-Infinity"),
    ('{"a": {"b": 1e400}}', "too large for a float at a.b"),
    ('{"a": "' + "x" * (2**20 + 1) + '"}', "string over"),
    ('{"a": ', "not valid JSON"),
])
def test_the_reader_refuses_in_one_line(text, fragment):
    with pytest.raises(InputError, match=fragment.replace("(", r"\(")) as caught:
        safe_json.loads(text, "the input")
    assert "\n" not in str(caught.value) and "xxxx" not in str(caught.value)


def test_depth_inside_strings_does_not_count():
    text = json.dumps({"note": "[" * 10_000, "list": [[[1]]]})
    assert safe_json.loads(text, "x")["list"] == [[[1]]]


def test_the_reader_reads_no_more_than_its_limit_from_a_device_or_fifo(tmp_path):
    with pytest.raises(InputError, match="not a regular file"):
        safe_json.read_bytes("/dev/zero", "x", 1024)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):  # opened non-blocking: no writer, no hang
        safe_json.read_bytes(fifo, "x", 1024)
    big = write(tmp_path, "big.json", b" " * 5000)
    with pytest.raises(InputError, match="over 4,096 bytes"):
        safe_json.read_bytes(big, "x", 4096)
    with pytest.raises(InputError, match="over 10 bytes"):
        safe_json.read_stream(io.BytesIO(b"0" * 10**6), "x", 10)


def test_check_value_walks_without_recursion():
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(InputError, match="nested"):
        safe_json.check_value({"a": deep}, "the arguments")
    with pytest.raises(InputError, match="digits"):
        safe_json.check_value({"a": 10**200}, "the arguments")
    assert safe_json.non_finite_path({"a": [1.0, {"b": math.inf}]}) == "a[1].b"


# --- model and GPU files ---------------------------------------------------------------------------


@pytest.mark.parametrize("change, fragment", [
    ({"model_type": ["llama"]}, "'model_type' must be a name"),      # TypeError: unhashable before
    ({"model_type": {}}, "'model_type' must be a name"),
    ({"hidden_size": 1e308}, "'hidden_size'=1e+308 is over 16,777,216"),   # OverflowError before
    ({"num_hidden_layers": 1_000_000}, "over 256, the most layers"),       # minutes of loops before
    ({"hidden_act": {"x": 1}}, "'hidden_act' must be a name"),
    ({"attention_dropout": 7}, "a probability"),
    ({"vocab_size": "128256"}, "must be a positive integer"),
])
def test_config_fields_are_type_checked_and_bounded(tmp_path, change, fragment):
    path = write(tmp_path, f"m{abs(hash(str(change)))}.json", json.dumps({**LLAMA, **change}))
    one_error_line(*run(["estimate", "--model", str(path), *ESTIMATE]), fragment)


def test_a_value_is_described_not_echoed(tmp_path):
    secret = "TOKEN-" + "s" * 40
    path = write(tmp_path, "secret.json", json.dumps({**LLAMA, "hidden_size": secret}))
    line = one_error_line(*run(["estimate", "--model", str(path), *ESTIMATE]), "a string")
    assert "TOKEN" not in line


@pytest.mark.parametrize("model", ["/dev/zero", "a" * 300 + ".json", "x/" + "b" * 300])
def test_devices_and_overlong_paths_are_one_line(model):
    one_error_line(*run(["estimate", "--model", model, *ESTIMATE]))   # OSError ENAMETOOLONG before


def test_a_fifo_model_does_not_block(tmp_path):
    fifo = tmp_path / "m.json"
    os.mkfifo(fifo)
    one_error_line(*run(["estimate", "--model", str(fifo), *ESTIMATE]), "not a regular file")


@pytest.mark.parametrize("field, value", [("bf16_tflops", 1e308), ("memory_gib", 1e300), ("price", 1e308),
                                          ("gpus_per_node", 10**30)])
def test_gpu_files_are_bounded(tmp_path, field, value):
    gpu = json.loads((MODELS_DIR.parent / "gpus" / "h100-sxm-80gb.json").read_text())
    path = write(tmp_path, f"g-{field}.json", json.dumps({**gpu, field: value}))
    one_error_line(*run(["estimate", "--model", "llama3-8b", "--gpu", str(path), "--gpus", "8"]), field)


# --- --from, --args, numbers that overflow ---------------------------------------------------------


@pytest.mark.parametrize("config, fragment", [
    ({"tp": "8"}, "'tp' input should be a valid integer"),            # TypeError '<=' str/int before
    ({"tp": 1, "recompute": ["full"]}, "'recompute'"),
    ({"tp": 1, "model": {}}, "'model'"),
    ({"tp": 1, "zero": True}, "'zero'"),
])
def test_from_values_are_type_checked(tmp_path, config, fragment):
    path = write(tmp_path, "saved.json", json.dumps({"config": config}))
    for command in (["estimate", "--from", str(path), "--model", "llama3-8b", *ESTIMATE],
                    ["export", "--from", str(path), "--engine", "megatron"]):
        one_error_line(*run(command), fragment)


def test_a_plan_with_a_list_for_recommended_is_one_line(tmp_path):
    path = write(tmp_path, "plan.json", json.dumps({"recommended": [1]}))
    one_error_line(*run(["estimate", "--from", str(path)]), "has no 'config'")


def test_price_that_overflows_is_refused_before_formatting():
    # the text output formatted None ($inf cost) before
    one_error_line(*run(["estimate", "--model", "llama3-8b", *ESTIMATE, "--gbs", "16", "--tokens", "1T",
                         "--price", "1e308"]), "over 10,000")


@pytest.mark.parametrize("arguments, fragment", [
    ({"price": 1e308}, "price=1e+308"),          # Infinity in the result before
    ({"goodput": 1e-300}, "below 1%"),
    ({"step_s": 1e300}, "step_s="),
    ({"gpus": 10**30}, "more GPUs than any cluster"),
])
def test_estimate_cost_refuses_what_the_cli_refuses(arguments, fragment):
    base = {"tokens": "1T", "step_s": 2.0, "gbs": 16, "seq": 4096, "gpus": 8, "price": 2.0}
    result = dispatch("estimate_cost", json.dumps({**base, **arguments}))
    assert set(result) == {"error"} and fragment in result["error"], result


def test_dispatch_refuses_a_non_finite_result(monkeypatch):
    from trainplan.agent import registry

    tool = registry.TOOLS_BY_NAME["list_catalog"]
    monkeypatch.setitem(registry.TOOLS_BY_NAME, "list_catalog",
                        registry.Tool(tool.name, tool.description, tool.args, lambda args: {"x": [math.nan]}))
    assert "x[0] is not a finite number" in dispatch("list_catalog", "{}")["error"]


@pytest.mark.parametrize("text, fragment", [
    ('{"kind": ' + "9" * 5000 + "}", "more than 100 digits"),
    ("[" * 100_000 + "]" * 100_000, "nested more than 32"),
    ('{"kind": "' + "k" * 70_000 + '"}', "string over"),
])
def test_tool_arguments_are_bounded(text, fragment):
    result = dispatch("list_catalog", text)
    assert set(result) == {"error"} and fragment in result["error"] and "kkkk" not in result["error"]
    assert "\n" not in result["error"]


def test_args_from_standard_input_are_read_within_the_limit(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"0" * (2 * 2**20))))
    one_error_line(*run(["tools", "call", "list_catalog", "--args", "-"]), "over 1,048,576 bytes")


def test_args_file_that_is_a_device_is_refused():
    one_error_line(*run(["tools", "call", "list_catalog", "--args", "@/dev/zero"]), "not a regular file")


def test_prompt_check_on_a_non_utf8_file_is_one_line(tmp_path):
    path = write(tmp_path, "prompt.md", b"\xff\xfe\x00")
    code, out, err = run(["prompt", "--check", "--out", str(path)])
    assert code == 1 and "Traceback" not in err and err.strip().startswith("error:") and "UTF-8" in err


def test_simulate_accumulate_is_bounded():
    # 10,000 micro-batches ran for minutes (a K^2 split) before
    one_error_line(*run(["simulate", "accumulate", "--micro-batches", "10000"]), "at most 1024")
    one_error_line(*run(["simulate", "accumulate", "--micro-batches", "64", "--ranks", "256"]), "ranks^2")


# --- environment -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, value, fragment", [
    ("OPENAI_BASE_URL", "http://[::1", "not a valid URL"),
    ("OPENAI_BASE_URL", "ftp://host/v1", "http(s)"),
    ("TRAINPLAN_LLM_DEADLINE_S", "1e12", "from 0.001 to 86400"),     # OverflowError in Thread.join before
    ("OPENAI_API_KEY", "clé-secrète", "printable ASCII"),             # UnicodeEncodeError in httpx before
])
def test_environment_values_are_one_line(monkeypatch, name, value, fragment):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv(name, value)
    line = one_error_line(*run(["plan", "llama3-8b on 8 H100 for 1T tokens"]), fragment)
    assert "secrète" not in line


# --- chat transcripts ------------------------------------------------------------------------------


@pytest.mark.parametrize("record", [
    "[" * 100_000 + "]" * 100_000,
    json.dumps({"kind": "plan", "request": [1]}),
    json.dumps({"kind": "plan", "request": {"gpus": "many"}}),
    json.dumps({"kind": "message", "message": "hi"}),
    json.dumps({"kind": "message", "message": {"role": "assistant", "tool_calls": [{"id": 1}]}}),
    json.dumps({"kind": "user", "text": ["x"]}),
    json.dumps({"kind": ["user"]}),
    '{"kind": "user", "text": "a", "n": ' + "9" * 5000 + "}",
])
def test_a_malformed_transcript_does_not_end_the_chat(tmp_path, record):
    from trainplan.agent.chat import run_chat

    path = write(tmp_path, "t.jsonl", json.dumps({"kind": "session", "version": 1}) + "\n" + record + "\n")
    out = io.StringIO()
    session = run_chat(io.StringIO(f"/load {path}\n/help\n/quit\n"), out, backend="offline", width=200)
    text = out.getvalue()
    assert "error:" in text and "Traceback" not in text and "Commands:" in text  # /help ran after the error
    assert session.request is None and session.transcript.path is None          # nothing changed


# --- the LLM deadline, tool-call cap and grounding -------------------------------------------------


def test_grounding_is_linear_and_honours_a_deadline():
    from trainplan.agent.grounding import GroundingTimeout, check_grounding, mark_ungrounded

    text = " ".join(f"{i * 1.37:.2f} GiB" for i in range(20_000))
    with pytest.raises(GroundingTimeout):
        check_grounding(text, [{"memory_gib": {"total": 1.37}}], deadline=time.monotonic() - 1)
    report = check_grounding(text, [{"memory_gib": {"total": 1.37}}])
    marked = mark_ungrounded(text, report.ungrounded)
    assert marked.count("[ungrounded]") == len(report.ungrounded) > 19_000


def test_two_hundred_tool_calls_in_one_reply_run_at_most_the_cap(openai_server):
    from openai_server import reply, tool_calls
    from test_llm_agent import agent

    from trainplan.agent.llm import MAX_CALLS_PER_REPLY

    openai_server.script(tool_calls(*[("estimate_cost", {"tokens": 1e12})] * 200), reply("Done."))
    ran = []
    result = agent(openai_server, on_event=lambda kind, data: ran.append(data) if kind == "tool_result" else None)
    refused = [r for r in ran if "error" in r["result"]]
    assert len(ran) == 200 and len(ran) - len(refused) == MAX_CALLS_PER_REPLY
    assert result.text.startswith("Done.")


def test_the_deadline_holds_between_tool_calls(openai_server):
    from openai_server import tool_calls
    from test_llm_agent import settings_for

    from trainplan.agent.config import LlmEndpoint
    from trainplan.agent.llm import AgentToolset, DeadlineExceeded, make_client, run_agent

    openai_server.script(tool_calls(*[("estimate_cost", {"tokens": 1e12})] * 10))
    settings = settings_for(openai_server, deadline_s=2.0)
    slow = []

    def dispatch_slowly(name, arguments):
        slow.append(name)
        time.sleep(0.5)
        return {"ok": 1}

    with pytest.raises(DeadlineExceeded):
        run_agent("plan", system_prompt="s", toolset=AgentToolset(tools=[], dispatch=dispatch_slowly),
                  endpoint=LlmEndpoint(client=make_client(settings), settings=settings))
    assert len(slow) < 10


def test_load_model_of_a_catalog_name_still_works():
    assert load_model("llama3-8b").num_layers == 32


@pytest.mark.parametrize("value", [True, "3", 1.5, 1e30, float("inf")])
@pytest.mark.parametrize("knob", ["mbs", "vpp", "lora_rank", "document_tokens"])
def test_a_whole_number_knob_from_the_python_api_is_a_whole_number_or_one_line(knob, value):
    """The Python API takes keywords untyped: a bool, a string, a fraction or a huge float for a whole-number knob is
    refused in one line (mbs=True trained one sequence, mbs='3' raised a TypeError); 2.0 is 2."""
    import trainplan

    with pytest.raises(InputError, match=f"{knob}=.* (must be a whole number|is not a finite number)"):
        trainplan.estimate(model="llama3-8b", gpu="a100", gpus=1, seq=2048, gbs=8, method="lora", **{knob: value})
    assert trainplan.estimate(model="llama3-8b", gpu="a100", gpus=1, seq=2048, gbs=8, method="lora",
                              mbs=2.0).config.mbs == 2


@pytest.mark.parametrize(("call", "knob", "value"), [
    ("estimate", "price", "2"), ("estimate", "goodput", "0.9"), ("estimate", "capacity_factor", "1.0"),
    ("estimate", "headroom_gib", True), ("search", "deadline_days", "3"), ("search", "budget_usd", "100"),
])
def test_a_number_knob_from_the_python_api_is_a_number_or_one_line(call, knob, value):
    """price='2' and deadline_days='3' raised a TypeError traceback from the Python API."""
    import trainplan

    job = dict(model="llama3-8b", gpu="a100", gpus=8, seq=2048, gbs=8, tokens=1e9)
    with pytest.raises(InputError, match=f"{knob}=.* must be a number"):
        getattr(trainplan, call)(**job, **{knob: value})
