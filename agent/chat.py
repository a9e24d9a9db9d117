"""`trainplan chat`: an interactive planning session.

LLM-backed when one is configured (streaming tokens, the function-calling loop keeps the
conversation as history), offline otherwise: each line is parsed and merged into the previous
request ("what if I only have 256 GPUs?", "use fp8", "seq 4k"), and the plan is re-made.

Commands: /help, /tools, /report [FILE], /save FILE, /load FILE, /quit (or a line of just quit, exit or bye).

Transcript: JSON lines, one record each: {"kind": "session", ...}, {"kind": "user", "text"},
{"kind": "plan", "request", "summary"} (offline), {"kind": "message", "message"} (LLM
conversation), {"kind": "error", "text"}. /save writes the whole transcript atomically (a temporary
file, then a rename) and from then on appends each record as it happens, flushed to disk, so a
saved session survives a crash. /load reads a transcript, restores the request (offline) or the
conversation (LLM), and keeps appending to that file.

`run_chat(input_stream, output_stream, ...)` drives a session from any streams, for tests.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape

from trainplan.tools.core.output import write_output
from trainplan.tools.core import safe_json
from trainplan.tools.core.errors import InputError

from .agent_errors import AgentError
from .config import LlmEndpoint
from .llm_backend import calls_from_messages, grounding_of, report_from_conversation, run_llm
from .offline_plan import offline_report
from .planner import resolve_backend
from .prose import neutralise_line, strip_terminal_controls
from .report import PlanReport, summary_line
from .request import PlanRequest, merge, parse_partial

BARE_QUIT_WORDS = frozenset({"quit", "exit", "bye", "q"})
"""A line of only one of these ends the session as /quit does."""

TRANSCRIPT_VERSION = 1
HELP = ("Ask for a plan in plain language, e.g. \"Llama 3 70B on 512 H100s for 15T tokens\"; then revise it: "
        "\"what if I only have 256 GPUs?\", \"use fp8\", \"seq 4k\", \"within 30 days\".\n"
        "Commands: /tools (the tools), /report [FILE] (the full report), /save FILE and /load FILE (the "
        "transcript, JSON lines), /quit.")


class Transcript:
    """The session's records; once saved, every new record is appended to the file as it happens."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.path: Path | None = None

    def add(self, record: dict) -> None:
        self.records.append(record)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())

    def save(self, path: str | Path) -> Path:
        """Write every record atomically (trainplan.tools.core.output.write_output), then keep appending to `path`."""
        text = "".join(json.dumps(record) + "\n" for record in self.records)
        self.path = write_output(path, text, flag="/save")
        return self.path

    @staticmethod
    def read(path: str | Path) -> list[dict]:
        """The records of a transcript file, read within safe_json.TRANSCRIPT's limits and checked record by
        record (check_record), so that a malformed file is one error line and the session goes on."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise InputError(f"transcript '{path}' does not exist: check the path")
        data = safe_json.read_bytes(path, f"transcript '{path}'", safe_json.TRANSCRIPT.max_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"transcript '{path}' is not UTF-8 text: is it a trainplan transcript?") from None
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"transcript '{path}' line {number}"
            try:
                record = safe_json.loads(line, where, safe_json.TRANSCRIPT)
            except InputError as exc:
                if " not valid JSON" not in str(exc):
                    raise
                raise InputError(f"{where} is not JSON: is it a trainplan transcript?") from None
            records.append(check_record(record, where))
        return records


_ROLES = ("system", "user", "assistant", "tool")


def check_record(record: Any, where: str) -> dict:
    """One transcript record, its fields type-checked (module docstring); InputError names what is wrong."""
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise InputError(f"{where} has no 'kind': is it a trainplan transcript?")
    kind = record["kind"]
    if kind == "user" and not isinstance(record.get("text"), str):
        raise InputError(f"{where}: a user record needs 'text' as a string")
    if kind == "plan" and not isinstance(record.get("request"), dict):
        raise InputError(f"{where}: a plan record needs 'request' as an object")
    if kind == "message":
        _check_message(record.get("message"), where)
    return record


def _check_message(message: Any, where: str) -> None:
    """A chat message as the LLM loop keeps it: role, text content, tool calls with string ids, names and
    arguments."""
    if not isinstance(message, dict) or message.get("role") not in _ROLES:
        raise InputError(f"{where}: a message record needs 'message' with a role ({', '.join(_ROLES)})")
    if message.get("content") is not None and not isinstance(message["content"], str):
        raise InputError(f"{where}: a message's 'content' must be text or null")
    if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise InputError(f"{where}: a tool message needs 'tool_call_id' as a string")
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        raise InputError(f"{where}: a message's 'tool_calls' must be a list")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if (not isinstance(call, dict) or not isinstance(call.get("id"), str) or not isinstance(function, dict)
                or not isinstance(function.get("name"), str) or not isinstance(function.get("arguments"), str)):
            raise InputError(f"{where}: each tool call needs a string 'id' and a 'function' with string 'name' "
                             "and 'arguments'")


class ChatSession:
    """One session: the backend, the state the follow-ups revise, the transcript, the console."""

    def __init__(self, console: Console, backend: str = "auto", llm_model: str | None = None,
                 client: Any = None) -> None:
        self.console = console
        self.backend = resolve_backend(backend, client)
        self.llm_model = llm_model
        self.client = client
        self.request: PlanRequest | None = None  # offline: the request the follow-ups revise
        self.report: PlanReport | None = None
        self.messages: list[dict] = []  # LLM: the conversation so far
        self.grounding = None  # LLM: the check of the last answer
        self.truncated = False  # LLM: the last answer was cut at max_tokens
        self.transcript = Transcript()
        self.transcript.add({"kind": "session", "version": TRANSCRIPT_VERSION, "backend": self.backend,
                             "llm_model": llm_model})

    # --- commands ---------------------------------------------------------------------------------

    def handle(self, line: str) -> bool:
        """Handle one input line; False ends the session."""
        line = line.strip()
        if not line:
            return True
        if line.lower().rstrip(".!") in BARE_QUIT_WORDS:   # 'quit' said without the slash: no request says only that
            return False
        if line.startswith("/"):
            command, _, argument = line.partition(" ")
            argument = argument.strip()
            if command in ("/quit", "/exit", "/q"):
                return False
            handler = {"/help": self.cmd_help, "/tools": self.cmd_tools, "/save": self.cmd_save,
                       "/load": self.cmd_load, "/report": self.cmd_report}.get(command)
            if handler is None:
                self.error(f"unknown command {command}: use /help, /tools, /report, /save FILE, /load FILE, /quit")
                return True
            try:
                handler(argument)
            except (InputError, OSError) as exc:
                self.error(str(exc))
            return True
        self.transcript.add({"kind": "user", "text": line})
        if self.backend == "openai":
            self.turn_llm(line)
        else:
            self.turn_offline(line)
        return True

    def cmd_help(self, _: str) -> None:
        self.console.print(escape(HELP))

    def cmd_tools(self, _: str) -> None:
        from trainplan.agent.registry import TOOLS

        for tool in TOOLS:
            self.console.print(f"[bold]{tool.name}[/bold]: {escape(tool.description)}")

    def cmd_save(self, argument: str) -> None:
        if not argument:
            raise InputError("/save needs a file name: /save session.jsonl")
        path = self.transcript.save(argument)
        self.console.print(f"saved {len(self.transcript.records)} records to {escape(str(path))}; "
                           "new turns are appended to it")

    def cmd_load(self, argument: str) -> None:
        from .llm import is_reask

        if not argument:
            raise InputError("/load needs a file name: /load session.jsonl")
        records = Transcript.read(argument)
        request, messages = None, []  # rebuilt before anything changes: a bad file leaves the session as it was
        for number, record in enumerate(records, 1):
            if record["kind"] == "plan":
                try:
                    request = PlanRequest(**record["request"])
                except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
                    raise InputError(f"transcript '{argument}' record {number}: the plan's request is not a "
                                     f"request ({_first_error(exc)}): is it a trainplan transcript?") from None
            elif record["kind"] == "message":
                messages.append(record["message"])
                content = record["message"].get("content") or ""
                if record["message"].get("role") == "user" and not is_reask(content):
                    update = parse_partial(content)
                    request = update if request is None else merge(request, update)
        self.transcript.records = records
        self.transcript.path = Path(argument).expanduser()
        self.request, self.report, self.messages, self.grounding = request, None, messages, None
        turns = sum(1 for r in records if r["kind"] == "user")
        self.console.print(f"loaded {turns} turns from {escape(argument)}; new turns are appended to it")
        if self.backend == "offline" and self.request is not None:
            self.console.print(f"current request: {escape(describe_request(self.request))}")

    def cmd_report(self, argument: str) -> None:
        report = self.current_report()
        if report is None:
            raise InputError("no plan yet: ask for one first, e.g. \"Llama 3 70B on 512 H100s for 15T tokens\"")
        text = report.to_markdown()
        if argument:
            write_output(argument, text, flag="/report")
            self.console.print(f"wrote the report to {escape(argument)}")
        else:
            self.console.print(text, markup=False, highlight=False)

    def current_report(self) -> PlanReport | None:
        """The last plan; rebuilt from the request (offline) or the conversation (LLM) when needed."""
        if self.report is not None or self.request is None:
            return self.report
        with self.console.status("writing the report..."):
            if self.backend == "offline":
                self.report = offline_report(self.request, describe_request(self.request))
            elif self.messages:
                from .grounding import RequestText, check_grounding
                from .llm import is_reask

                text = next((m.get("content") or "" for m in reversed(self.messages)
                             if m.get("role") == "assistant" and not m.get("tool_calls")), "")
                calls = calls_from_messages(self.messages)
                sources = [m.get("content") if m.get("role") == "tool" else RequestText(m.get("content") or "")
                           for m in self.messages
                           if m.get("role") == "tool" or (m.get("role") == "user" and not is_reask(m.get("content")))]
                grounding = self.grounding or grounding_of(check_grounding(text, sources), called_tools=bool(calls))
                # the request as the user's turns wrote it, in order (the plan follows all of them)
                asked = " / ".join(m["content"] for m in self.messages
                                   if m.get("role") == "user" and not is_reask(m.get("content")))
                self.report = report_from_conversation(asked, self.request, text=text, calls=calls,
                                                       grounding=grounding, llm_model=self.llm_model or _model_name(),
                                                       truncated=self.truncated)
        return self.report

    def error(self, message: str) -> None:
        self.console.print(f"[red]error:[/red] {escape(message)}")
        self.transcript.add({"kind": "error", "text": message})

    # --- turns ------------------------------------------------------------------------------------

    def turn_offline(self, line: str) -> None:
        try:
            update = parse_partial(line, context=self.request)
        except InputError as exc:
            self.error(str(exc))
            return
        if self.request is not None and not update.given():
            self.error("nothing to change found in that: say e.g. \"what if I only have 256 GPUs?\", "
                       "\"use fp8\", \"seq 4k\", \"for 2T tokens\", or a new model and hardware")
            return
        previous = self.request
        request = update if previous is None else merge(previous, update)
        try:
            with self.console.status("searching layouts..."):
                report = offline_report(request, line)
        except InputError as exc:
            # A turn that fails changes nothing: the request stays as it was.
            self.error(for_chat(str(exc)) + (" (the plan is unchanged)" if previous is not None else ""))
            if previous is None:
                self.request = request  # keep a first, incomplete request for the next line to complete
            return
        self.request, self.report = request, report
        if previous is not None:
            changes = changed_fields(previous, self.request)
            if changes:
                self.console.print(f"[dim]changed: {escape(changes)}[/dim]")
        summary = summary_line(report)
        self.console.print(f"[bold]plan[/bold] (offline): {escape(summary)}")
        for risk in report.risks:
            self.console.print(f"[yellow]risk:[/yellow] {escape(risk)}")
        if report.alternatives:
            alt = report.alternatives[0]
            self.console.print(f"[dim]runner-up: {escape(alt.layout)}: {escape(alt.why_not)}[/dim]")
        self.console.print("[dim]/report shows the full report[/dim]")
        self.transcript.add({"kind": "plan", "request": self.request.model_dump(mode="json"), "summary": summary})

    def turn_llm(self, line: str) -> None:
        status = self.console.status("thinking...")
        streamed = {"text": False}

        def on_event(kind: str, data: dict) -> None:
            if kind == "token":
                if not streamed["text"]:
                    status.stop()
                    streamed["text"] = True
                self.console.print(strip_terminal_controls(data["text"]), end="", markup=False, highlight=False)
            elif kind == "tool_call":
                if streamed["text"]:
                    self.console.print()
                    streamed["text"] = False
                status.update(f"running {data['name']}...")
                status.start()
            elif kind == "reask":
                self.console.print(f"\n[dim](asking the model to ground: {escape(', '.join(data['numbers']))})[/dim]")
            elif kind == "reask_tools":
                self.console.print("\n[dim](asking the model to use the tools)[/dim]")
            elif kind == "retry":
                status.update(f"retrying the LLM server (attempt {data['attempt']})...")
            elif kind == "compact":
                status.update("the conversation outgrew the LLM's context: retrying " + (
                    "with the lean tool set..." if data.get("tools") else "without earlier tool results..."))

        try:
            update = parse_partial(line, context=self.request)
        except InputError as exc:
            self.error(str(exc))
            return
        request = update if self.request is None else merge(self.request, update)
        # A new plan is wanted when the request changed or none was handed over yet; a question is not.
        from .toolset import submitted_layout

        require_submit = bool(update.given()) or submitted_layout(calls_from_messages(self.messages)) is None
        before = len(self.messages)
        status.start()
        try:
            result = run_llm(line, endpoint=LlmEndpoint(client=self.client, model=self.llm_model), stream=True,
                             on_event=on_event, history=self.messages, require_submit=require_submit)
        except AgentError as exc:
            # A turn that fails changes nothing: the conversation, the request and the plan stay as they were.
            if streamed["text"]:
                self.console.print()
            self.error(f"{neutralise_line(str(exc))} (the plan is unchanged)")
            return
        finally:
            status.stop()
        if streamed["text"]:
            self.console.print()
        if result.truncated:
            self.console.print("[yellow]the answer was cut off at the token limit (TRAINPLAN_LLM_MAX_TOKENS)[/yellow]")
        from .toolset import submitted_layout

        if require_submit and submitted_layout(result.tool_calls) is None:
            said = "called no tool" if not result.tool_calls else "handed over no layout (submit_plan)"
            self.console.print(f"[yellow]the LLM {said}: this answer is not a grounded plan; /report shows the "
                               "offline planner's plan for the request[/yellow]")
        elif not result.grounding.ok:
            marked = ", ".join(m.text for m in result.grounding.ungrounded) or "the answer is empty"
            self.console.print(f"[yellow]ungrounded (not in any tool result):[/yellow] {escape(marked)}")
        self.request = request
        self.report = None
        self.messages = [m for m in result.messages if m.get("role") != "system"]
        called = bool(calls_from_messages(self.messages))
        self.grounding = grounding_of(result.grounding, result.reasked, called_tools=called)
        self.truncated = result.truncated
        for message in self.messages[before:]:
            self.transcript.add({"kind": "message", "message": message})


_FLAG = re.compile(r"(?:\b(?:use|pass|with|try|add|set)\s+)?`?--([a-z][a-z0-9-]*)(?:[ =]([^\s,;:)`'\"]+))?`?")


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"[:160]
    return type(exc).__name__


def for_chat(message: str) -> str:
    """An error's fix in chat words: "use --precision bf16" -> say "precision bf16"."""
    def say(m: re.Match) -> str:
        words = m.group(1).replace("-", " ")
        return f'say "{words} {m.group(2)}"' if m.group(2) else f'say "{words}"'

    return _FLAG.sub(say, message)


def describe_request(request: PlanRequest) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in request.given().items())


def changed_fields(old: PlanRequest, new: PlanRequest) -> str:
    a, b = old.model_dump(), new.model_dump()
    parts = []
    for key in b:
        if a[key] != b[key]:
            before = "default" if a[key] is None else (f"{a[key]:g}" if isinstance(a[key], float) else a[key])
            after = "default" if b[key] is None else (f"{b[key]:g}" if isinstance(b[key], float) else b[key])
            parts.append(f"{key} {before} -> {after}")
    return ", ".join(parts)


def _lines(stream: TextIO, console: Console, interactive: bool) -> Iterator[str]:
    while True:
        if interactive:
            try:
                line = console.input("[bold cyan]you>[/bold cyan] ")
            except EOFError:
                return
        else:
            console.print("you> ", end="")
            line = stream.readline()
            if not line:
                return
            console.print(line.rstrip("\n"), markup=False, highlight=False)
        yield line


def run_chat(input_stream: TextIO, output_stream: TextIO, *, backend: str = "auto", llm_model: str | None = None,
             client: Any = None, width: int | None = None) -> ChatSession:
    """Run a session reading lines from `input_stream` until /quit or end of input."""
    interactive = input_stream.isatty() and output_stream.isatty()
    console = Console(file=output_stream, width=width, highlight=False,
                      force_terminal=None if interactive else False)
    session = ChatSession(console, backend=backend, llm_model=llm_model, client=client)
    mode = (f"LLM ({llm_model or _model_name()})" if session.backend == "openai"
            else "offline planner (no LLM configured)")
    console.print(f"[bold]trainplan chat[/bold]: {mode}. /help for commands.")
    for line in _lines(input_stream, console, interactive):
        if not session.handle(line):
            break
    return session


def _model_name() -> str:
    from .config import load_settings

    return load_settings().model
