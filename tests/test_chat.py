"""`trainplan chat` driven by a list of input lines: offline follow-ups, /save and /load, and the LLM."""

from __future__ import annotations

import io
import json

import openai

from openai_server import reply, tool_calls
from trainplan.agent.chat import Transcript, run_chat
from trainplan.agent.registry import dispatch

FIRST = "Llama 3 8B on 64 H100s for 100B tokens, seq 4096, gbs 256"


def chat(*lines: str, **kwargs):
    out = io.StringIO()
    session = run_chat(io.StringIO("".join(line + "\n" for line in lines)), out, width=200, **kwargs)
    return session, out.getvalue()


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_offline_follow_ups_revise_the_plan(tmp_path):
    saved = tmp_path / "session.jsonl"
    session, out = chat(FIRST, "what if I only have 32 GPUs?", "use fp8", "/tools", f"/save {saved}",
                        "seq 2k", "/quit", "never read")
    assert "offline planner" in out.splitlines()[0]
    assert out.count("plan (offline):") == 4
    assert "changed: gpus 64 -> 32" in out and "changed: precision default -> fp8" in out
    assert "changed: seq 4096 -> 2048" in out
    assert "search_configs:" in out and "calculate_memory:" in out
    assert "never read" not in out
    request = session.request
    assert (request.model, request.gpus, request.precision, request.seq, request.tokens) == (
        "llama3-8b", 32, "fp8", 2048, 1e11)
    config = session.report.recommended["config"]
    assert config["gpus"] == 32 and config["precision"] == "fp8" and config["seq"] == 2048
    kinds = [r["kind"] for r in records(saved)]
    # Saved after three plans; the fourth turn was appended as it happened.
    assert kinds == ["session", "user", "plan", "user", "plan", "user", "plan", "user", "plan"]
    assert records(saved)[-1]["request"]["seq"] == 2048


def test_load_restores_the_request_and_keeps_appending(tmp_path):
    saved = tmp_path / "session.jsonl"
    chat(FIRST, "use fp8", f"/save {saved}")
    report = tmp_path / "report.md"
    session, out = chat(f"/load {saved}", f"/report {report}", "what if I only have 32 GPUs?")
    assert "loaded 2 turns" in out and "current request: model=llama3-8b" in out
    assert "```mermaid" in report.read_text()
    assert (session.request.gpus, session.request.precision) == (32, "fp8")
    assert [r["kind"] for r in records(saved)][-2:] == ["user", "plan"]


def test_errors_keep_the_session_going(tmp_path):
    session, out = chat("Llama 3 70B please", "on 64 H100s for 1T tokens, seq 4096, gbs 256", "hello there",
                        "/report", f"/load {tmp_path / 'missing.jsonl'}", "/nope")
    assert "error: the request needs the hardware" in out
    assert "plan (offline):" in out  # the second line completed the first
    assert session.request.model == "llama3-70b" and session.request.gpus == 64
    assert "error: nothing to change found in that" in out
    assert "# Training plan: llama3-70b on 64 x h100-sxm-80gb" in out
    assert "does not exist" in out and "unknown command /nope" in out


def test_transcript_save_is_atomic_and_read_checks_lines(tmp_path):
    transcript = Transcript()
    transcript.add({"kind": "user", "text": "hi"})
    path = transcript.save(tmp_path / "t.jsonl")
    transcript.add({"kind": "user", "text": "again"})
    assert [r["text"] for r in Transcript.read(path)] == ["hi", "again"]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    path.write_text("not json\n")
    try:
        Transcript.read(path)
    except ValueError as exc:
        assert "line 1 is not JSON" in str(exc)
    else:
        raise AssertionError("a broken transcript must not load")


def test_llm_chat_streams_and_keeps_the_conversation(openai_server, tmp_path):
    job = {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64, "tp": 1, "pp": 1, "zero": 1, "gbs": 256,
           "seq": 4096}
    memory = dispatch("calculate_memory", json.dumps(job))
    answer = f"TP1 PP1 ZeRO-1 needs {memory['memory_gib']['total']:.1f} GiB per GPU."
    openai_server.script(
        tool_calls(("calculate_memory", job)),
        tool_calls(("submit_plan", {"layout": job})),
        reply(answer),
        reply("It fits with room to spare."),  # a question: no new plan is asked for
        tool_calls(("submit_plan", {"layout": {**job, "gpus": 32}})),
        reply("On 32 GPUs it still fits."),
    )
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="test", max_retries=0)
    saved = tmp_path / "llm.jsonl"
    report = tmp_path / "report.md"
    session, out = chat("Llama 3 8B on 64 H100s: does TP1 fit?", "does it?", "and with 32 GPUs?", f"/save {saved}",
                        f"/report {report}", client=client, llm_model="scripted-model")
    assert "LLM (scripted-model)" in out.splitlines()[0]
    assert answer in out and "It fits with room to spare." in out
    assert all(body["stream"] is True for body in openai_server.requests)
    third = openai_server.requests[3]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant",
                                          "user"]
    kinds = [(r["kind"], r.get("message", {}).get("role")) for r in records(saved)]
    assert kinds.count(("message", "tool")) == 3 and kinds.count(("user", None)) == 3
    text = report.read_text()
    assert "LLM agent (`scripted-model`)" in text and "TP1 x PP1 x DP32" in text and "```mermaid" in text
    loaded, _ = chat(f"/load {saved}", client=client, llm_model="scripted-model")
    assert loaded.messages == session.messages


def test_llm_turns_that_fail_change_nothing(openai_server):
    from openai_server import CONTEXT_ERROR, http_error

    job = {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64, "tp": 1, "pp": 1, "gbs": 256, "seq": 4096}
    openai_server.script(
        tool_calls(("submit_plan", {"layout": job})),
        reply("Submitted."),
        *[http_error(400, CONTEXT_ERROR)] * 4,  # each turn retries once without the earlier tool results
    )
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="test", max_retries=0)
    session, out = chat("Llama 3 8B on 64 H100s, seq 4096, gbs 256", "what if I only have 32 GPUs?", "use fp8",
                        "/report", client=client, llm_model="scripted-model")
    assert out.count("(the plan is unchanged)") == 2 and "exceeds the available context size" in out
    assert session.request.gpus == 64 and session.request.precision is None
    assert [m["role"] for m in session.messages] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(session.messages[2]["content"])["accepted"]  # the failed turns' retries left it whole
    assert "TP1 x PP1 x DP64" in out and "# Training plan: llama3-8b on 64 x h100-sxm-80gb" in out
    assert "fp8" not in out.split("/report")[-1]


def test_offline_failed_setting_is_rolled_back_and_the_fix_is_said_in_chat_words():
    session, out = chat("Llama 3 8B on 64 A100 80GB for 100B tokens, seq 4096, gbs 256", "use fp8", "seq 2k")
    assert "(the plan is unchanged)" in out and 'say "precision bf16"' in out and "--precision" not in out
    assert session.request.precision is None and session.request.seq == 2048
    assert session.report.recommended["config"]["precision"] == "bf16"
    assert out.count("plan (offline):") == 2


def test_llm_turns_without_tools_are_said_and_the_report_quotes_every_turn(openai_server):
    openai_server.script(reply("I'm sorry."), reply("I'm sorry."), reply("Still sorry."), reply("Still sorry."))
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="test", max_retries=0)
    session, out = chat("Llama 3 8B on 64 H100s for 100B tokens", "what if I only have 32 GPUs?", "/report",
                        client=client, llm_model="scripted-model")
    assert out.count("the LLM called no tool: this answer is not a grounded plan") == 2
    assert "> Llama 3 8B on 64 H100s for 100B tokens / what if I only have 32 GPUs?" in out
    assert "# Training plan: llama3-8b on 32 x h100-sxm-80gb" in out
    assert "The LLM called no tool, so it gave no grounded plan." in out


def test_a_line_of_just_quit_ends_the_session_as_slash_quit_does():
    for word in ("quit", "exit", "Bye.", "q"):
        _, out = chat(FIRST, word, "Llama 3 8B on 16 H100s")
        assert out.count("plan (offline):") == 1 and "nothing to change" not in out, word


def test_a_follow_up_gradient_accumulation_multiplies_the_gpus_already_asked():
    session, out = chat("LoRA Llama 3 8B on 4 A100s for 10M tokens", "per device batch size 2, gradient accumulation 4")
    assert "error" not in out and (session.request.mbs, session.request.gbs) == (2, 2 * 4 * 4)
