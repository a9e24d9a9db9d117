"""`trainplan tools schema|list|call` (the function-calling API from a shell) and `trainplan prompt`
(render or check the shipped prompt)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from trainplan.cli_common import DataDirOpt, allow_data_dirs
from trainplan.tools.core.output import write_output


def _fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _read_args(value: str) -> str | bytes:
    """--args: JSON text, '-' for standard input, or @FILE; read within the tool arguments' byte limit
    (safe_json.ARGUMENTS), so /dev/zero or an endless pipe is refused, not read into memory."""
    from trainplan.tools.core import safe_json
    from trainplan.tools.core.errors import InputError

    limit = safe_json.ARGUMENTS.max_bytes
    try:
        if value == "-":
            return safe_json.read_stream(sys.stdin.buffer, "--args from standard input", limit)
        if value.startswith("@"):
            return safe_json.read_bytes(value[1:], f"--args file '{value[1:]}'", limit)
    except InputError as exc:
        _fail(str(exc))
    return value


def _current_text(path: Path) -> str | None:
    """The file `prompt --check` compares, or None when there is none; one error line when it cannot be
    read as UTF-8 text (the rendered prompt is UTF-8, so such a file is out of step)."""
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else None
    except UnicodeDecodeError:
        _fail(f"{path} is not UTF-8 text, so it is not the rendered prompt: run `trainplan prompt` to write it", code=1)
    except OSError as exc:
        _fail(f"cannot read {path}: {(exc.strerror or type(exc).__name__).lower()}")
    return None


def render_prompt_file() -> str:
    from trainplan.agent.prompt_text import shipped_prompt

    return shipped_prompt()


def register(app: typer.Typer) -> None:
    tools_app = typer.Typer(no_args_is_help=True, help="The agent's tools: schemas and calls from a shell.")
    app.add_typer(tools_app, name="tools")

    @tools_app.command("schema")
    def schema_command(
        strict: Annotated[bool, typer.Option("--strict/--no-strict",
                                             help="OpenAI strict mode (every argument required, nullable)")] = True,
    ) -> None:
        """Print the OpenAI function-tool schemas of every tool as JSON."""
        from trainplan.agent.registry import openai_tools

        print(json.dumps(openai_tools(strict=strict), indent=2))

    @tools_app.command("list")
    def list_command() -> None:
        """List the tools with their descriptions."""
        from trainplan.agent.registry import TOOLS

        for tool in TOOLS:
            print(f"{tool.name}: {tool.description}")

    @tools_app.command("call")
    def call_command(
        name: Annotated[str, typer.Argument(help="tool name (see `trainplan tools list`)")],
        args: Annotated[str, typer.Option("--args", help="arguments as a JSON object; '-' reads standard input, "
                                                         "@FILE reads a file")] = "{}",
        data_dir: DataDirOpt = None,
    ) -> None:
        """Call one tool and print its JSON result; an invalid call prints `error: ...` and exits 2."""
        from trainplan.agent.registry import dispatch

        allow_data_dirs(data_dir)

        result = dispatch(name, _read_args(args))
        if set(result) == {"error"}:
            _fail(result["error"])
        print(json.dumps(result, indent=2))

    @app.command("prompt")
    def prompt_command(
        check: Annotated[bool, typer.Option("--check", help="exit 1 when the file is out of step or asks for a figure "
                                                             "no tool returns; write nothing")] = False,
        out: Annotated[Optional[Path], typer.Option("--out", help="where to write (default: the repository's "
                                                                   "outputs/prompt-distributed-training-planner.md; "
                                                                   "installed from a wheel: print it)")] = None,
    ) -> None:
        """Render the shipped prompt from prompts/*.j2 and the tool registry, or check that it is current."""
        from trainplan.prompts import IN_REPOSITORY, SHIPPED_PATH

        path = out or SHIPPED_PATH
        text = render_prompt_file()
        if check:
            current = _current_text(path)
            if current != text:
                state = "is missing" if current is None else "is out of step with prompts/ and the tool registry"
                _fail(f"{path} {state}: run `trainplan prompt` and commit the result", code=1)
            from trainplan.agent.prompt_text import missing_figures

            missing = missing_figures()
            if missing:
                _fail("the prompt asks for figures no tool returns: " + "; ".join(missing), code=1)
            print(f"{path} is up to date, and every figure it asks for is a tool output field")
            return
        if out is None and not IN_REPOSITORY:
            sys.stdout.write(text)
            return
        write_output(path, text)
        print(f"wrote {path}")
