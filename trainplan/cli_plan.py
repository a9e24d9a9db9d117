"""`trainplan plan "..."` (a plain-language request in, a plan report out) and `trainplan chat`."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from collections.abc import Callable
from typing import Annotated, Any, Optional

from trainplan.tools.core.errors import InputError
from trainplan.tools.engines import Engine

import typer

from trainplan.cli_common import DataDirOpt, allow_data_dirs
from trainplan.tools.core.output import write_output
from rich.console import Console


class Backend(str, Enum):
    """Who plans."""

    auto = "auto"
    """the LLM when one is configured (OPENAI_API_KEY or OPENAI_BASE_URL), else offline"""
    offline = "offline"
    """the built-in planner: parse, search, estimate; no LLM"""
    openai = "openai"
    """the LLM agent on any OpenAI-compatible server, calling the same tools"""


BackendOpt = Annotated[Backend, typer.Option("--backend", help="auto (LLM when configured, else offline), "
                                                                "offline or openai")]
LlmModelOpt = Annotated[Optional[str], typer.Option("--llm-model", help="chat model name sent to the server "
                                                                          "(default: TRAINPLAN_MODEL or gpt-4o-mini)")]


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _progress(status: Any, to_lines: bool) -> Callable[[str, dict], None]:
    """The planner's steps and the LLM loop's events as the spinner's text; when stderr is not a terminal
    (no spinner), as one line each on stderr, so that a log shows what a long plan is waiting for."""

    from rich.markup import escape

    from trainplan.agent.prose import strip_terminal_controls

    def on_event(kind: str, data: dict) -> None:
        if kind == "request":
            line = f"asking the LLM (turn {data['turn']}, {data['left_s']:.0f} s left before the deadline)"
        elif kind == "tool_call":
            line = f"the LLM is calling {data['name']}"
        elif kind == "retry":
            line = f"retrying the LLM server in {data['delay_s']:.1f} s (attempt {data['attempt']}; {data['error']})"
        elif kind in ("reask", "reask_tools"):
            line = "asking the LLM again: " + (f"ground {', '.join(data['numbers'])}" if kind == "reask"
                                               else "use the tools")
        elif kind == "compact":
            line = "the request outgrew the LLM's context: retrying " + (
                "with the lean tool set" if data.get("tools") else "without earlier tool results")
        elif kind == "fallback":
            line = f"the LLM failed ({data['error']}): the offline planner answers"
        elif kind == "step":
            line = data["text"]
        else:
            return
        line = " ".join(strip_terminal_controls(line).split())    # server text among it: no escape sequences
        status.update(escape(line) + "...")
        if to_lines:
            print(f"trainplan: {line}", file=sys.stderr, flush=True)

    return on_event


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_command(
        request: Annotated[str, typer.Argument(help='the request, e.g. "Llama 3 70B on 512 H100s for 15T tokens"')],
        backend: BackendOpt = Backend.auto,
        llm_model: LlmModelOpt = None,
        as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
        full: Annotated[bool, typer.Option("--full", help="print the whole report, not its summary")] = False,
        out: Annotated[Optional[Path], typer.Option("--out", help="also write the whole report to this file "
                                                                   "(Markdown; JSON with --json)")] = None,
        html_out: Annotated[Optional[Path], typer.Option("--html", help="also write the report as a self-contained "
                                                                        "HTML page with charts (needs matplotlib)")] = None,
        engine: Annotated[Optional[Engine], typer.Option(
            "--engine", help="search only layouts this engine runs, and carry its launch settings "
                             "(default: any layout, Megatron-LM launch settings)")] = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        """Plan a training run from plain language: layout, memory, step time, MFU, days and cost."""
        from trainplan.agent.agent_errors import AgentError
        from trainplan.agent.config import LlmEndpoint
        from trainplan.agent.planner import plan, resolve_backend

        allow_data_dirs(data_dir)

        err = Console(stderr=True)
        chosen = resolve_backend(backend.value)
        with err.status("planning with the LLM agent..." if chosen == "openai" else "searching layouts...") as status:
            on_event = _progress(status, to_lines=not sys.stderr.isatty())
            try:
                report = plan(request, backend=chosen, endpoint=LlmEndpoint(model=llm_model), on_event=on_event, engine=engine.value if engine else None)
            except AgentError as exc:
                from trainplan.agent.prose import neutralise_line

                status.stop()
                _fail(neutralise_line(str(exc), max_chars=2000), 1)
        text = (report.to_json() if as_json else report.to_markdown()).rstrip("\n") + "\n"
        if out is not None:
            write_output(out, text)
        if html_out is not None:
            from trainplan.agent.report_html import to_html

            try:
                write_output(html_out, to_html(report), flag="--html")
            except InputError as exc:
                _fail(str(exc), 2)
        shown = text if as_json or full else report.to_summary().rstrip("\n") + "\n"
        if as_json or not sys.stdout.isatty():
            sys.stdout.write(shown)
        else:
            from rich.markdown import Markdown

            Console().print(Markdown(shown))
        backend_line = ("LLM agent " + (report.llm_model or "")) if report.backend == "openai" else "offline planner"
        if report.llm_status == "failed":
            backend_line += f" (the LLM failed: {report.llm_error})"
        elif report.llm_status in ("no_submission", "no_tool_calls"):
            backend_line += " (it handed over no layout: the layout is the offline planner's)"
        from rich.markup import escape

        written = [str(path) for path in (out, html_out) if path is not None]
        err.print(f"[dim]backend: {escape(backend_line)}"
                  + (f"; report written to {escape(' and '.join(written))}" if written else "") + "[/dim]",
                  soft_wrap=True)
        if report.recommended is None:
            _fail(f"no layout fits: {report.risks[-1] if report.risks else 'see the report'}", 1)

    @app.command("chat")
    def chat_command(
        backend: BackendOpt = Backend.auto,
        llm_model: LlmModelOpt = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        """An interactive planning session; follow-ups revise the plan. /help lists the commands."""
        from trainplan.agent.chat import run_chat

        allow_data_dirs(data_dir)

        run_chat(sys.stdin, sys.stdout, backend=backend.value, llm_model=llm_model)
