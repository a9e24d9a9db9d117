"""The `trainplan` command line. Each command lives in its own module, imported only when it runs.

COMMANDS names every command, the module whose register(app) defines it, and the line
`trainplan --help` shows for it (a test checks that line against the command's own docstring).
`trainplan --help` and `--version` import none of the command modules, numpy or pydantic, so they
answer in well under 0.3 s beyond the interpreter's start (benchmarks/bench_startup.py).
"""

from __future__ import annotations

import importlib
import sys

import typer
import typer.core
try:
    from typer import _click as click   # typer's own click, which the newer releases vendor
except ImportError:   # the releases before it depend on click itself
    import click

from trainplan.tools.core.errors import InputError

HELP = "Plan distributed LLM training: layout, memory, step time, MFU, GPU-hours and cost."

COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("trainplan.cli_plan", "Plan a training run from plain language: layout, memory, step time, MFU, days "
                                   "and cost."),
    "chat": ("trainplan.cli_plan", "An interactive planning session; follow-ups revise the plan. /help lists the "
                                   "commands."),
    "estimate": ("trainplan.cli_estimate", "Memory per GPU, step time, MFU and training cost of one layout."),
    "search": ("trainplan.cli_search", "The best layouts for a job: every knob searched unless pinned; exit 1 when "
                                       "none is feasible."),
    "export": ("trainplan.cli_export", "Write launch settings (args, ds_config, job TOML, accelerate YAML) for one "
                                       "layout."),
    "bubble": ("trainplan.cli_bubble", "Simulate a pipeline schedule over its dependency graph: bubble, peak "
                                       "in-flight micro-batches, timeline."),
    "simulate": ("trainplan.cli_simulate", "Run a collective algorithm on N simulated ranks (numpy) and check it "
                                           "against the math."),
    "catalog": ("trainplan.cli_catalog", "List the GPU and model catalogs."),
    "tools": ("trainplan.cli_tools", "The agent's tools: schemas and calls from a shell."),
    "mcp": ("trainplan.cli_mcp", "Serve the agent's tools over MCP on stdio (the official MCP Python SDK)."),
    "prompt": ("trainplan.cli_tools", "Render the shipped prompt from prompts/*.j2 and the tool registry, or check "
                                      "that it is current."),
    "eval": ("trainplan.cli_eval", "Run the reference runs in evals/: prediction errors, planning scores and the "
                                   "lesson's claims."),
}
"""command -> (module with register(app), the one-line help of `trainplan --help`)."""


def load_command(name: str) -> click.Command | None:
    """Import the command's module and build its click command (None for an unknown name)."""
    if name not in COMMANDS:
        return None
    module = importlib.import_module(COMMANDS[name][0])
    sub_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    module.register(sub_app)
    sub_app.callback()(lambda: None)            # always a group, so each command keeps its name
    group = typer.main.get_command(sub_app)
    return group.commands.get(name) if isinstance(group, typer.core.TyperGroup) else None


class LazyGroup(typer.core.TyperGroup):
    """The root group: lists COMMANDS without importing them; builds one when it is invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        click.Command.format_help(self, ctx, formatter)     # plain help: no rich, no command imports

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, line) in COMMANDS.items()])


app = typer.Typer(cls=LazyGroup, no_args_is_help=True, add_completion=False, help=HELP,
                  pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        from trainplan import __version__

        print(f"trainplan {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", help="print the version and exit", callback=_version,
                                 is_eager=True),
) -> None:
    """Plan distributed LLM training: layout, memory, step time, MFU, GPU-hours and cost."""


def fail(message: str) -> None:
    """Print one `error:` line on stderr and exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _click_exceptions():
    """The exception classes typer raises: its vendored click (typer >= 0.2x) or click itself."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def main() -> None:
    """Console entry point: input errors become one line and exit code 2, never a traceback."""
    click = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":   # a bare command group: its help, as before
            exc.show()
            raise SystemExit(2)
        # click's own usage errors (a bad option value, an unknown option or command) follow the same
        # rule as ours: one line naming the fix, exit 2, instead of click's framed box.
        where = exc.ctx.command_path if exc.ctx is not None else "trainplan"
        fail(f"{exc.format_message().rstrip('.')} (see '{where} --help')")
    except typer.Abort:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130)
    except click.ClickException as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)
        raise SystemExit(exc.exit_code)
    except InputError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130)
    except Exception as exc:
        pydantic = sys.modules.get("pydantic")   # loaded by whichever command raised it
        if pydantic is None or not isinstance(exc, pydantic.ValidationError):
            raise
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "input"
        fail(f"{field}: {first['msg']}")
    raise SystemExit(code if isinstance(code, int) else 0)   # as click's standalone mode ends


if __name__ == "__main__":
    main()
