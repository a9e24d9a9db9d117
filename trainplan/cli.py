"""The `trainplan` command line. Each command group lives in its own module and registers here."""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from trainplan.tools.errors import InputError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Plan distributed LLM training: layout, memory, step time, MFU, GPU-hours and cost.",
    pretty_exceptions_enable=False,
)


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

# One explicit list of command modules; each defines register(app).
from trainplan import cli_catalog, cli_estimate, cli_simulate, cli_bubble, cli_export, cli_eval  # noqa: E402
from trainplan import cli_plan, cli_tools  # noqa: E402
from trainplan import cli_search  # noqa: E402

COMMAND_MODULES = (cli_catalog, cli_estimate, cli_simulate, cli_bubble, cli_export, cli_eval, cli_plan, cli_tools, cli_search)
for _module in COMMAND_MODULES:
    _module.register(app)


def fail(message: str) -> None:
    """Print one `error:` line on stderr and exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    """Console entry point: input errors become one line and exit code 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except InputError as exc:
        fail(str(exc))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "input"
        fail(f"{field}: {first['msg']}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130)


if __name__ == "__main__":
    main()
