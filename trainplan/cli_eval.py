"""`trainplan eval`: run the reference cases in evals/runs and report accuracy.

Exit status: 0 when every case ran (failed thresholds are reported, not hidden); 1 when a case
crashed; 2 for invalid options.
"""

from __future__ import annotations

import difflib
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from trainplan.tools.core.output import write_output
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trainplan.tools.core.errors import InputError


class KindOption(str, Enum):
    """Which kind of case to run."""

    prediction = "prediction"
    """Published layouts: predicted step time, TFLOP/s, MFU, GPU-hours and cost against the published figures."""
    planning = "planning"
    """The planner given only the request, scored against the published layout."""
    claims = "claims"
    """The lesson's arithmetic reproduced by the tools."""


class BackendOption(str, Enum):
    """Which planner runs the planning cases."""

    offline = "offline"
    """The built-in offline planner (the layout search)."""
    openai = "openai"
    """The LLM agent on an OpenAI-compatible endpoint."""


def run_with_progress(kind: str | None, case_id: str | None, backend: str) -> dict:
    """Run the selected cases with a progress bar on stderr."""
    from trainplan.evals.dataset import load_dataset
    from trainplan.evals.runner import run_eval

    dataset = load_dataset()
    known = [c.id for c in dataset.cases]
    if case_id is not None and case_id not in known:
        close = difflib.get_close_matches(case_id, known, n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise InputError(f"unknown case '{case_id}': {hint}list the ids with: trainplan eval --json")
    total = len(dataset.select(kind=kind, case_id=case_id))
    console = Console(stderr=True)
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("eval", total=total)

        def advance(result) -> None:
            progress.update(task, advance=1, description=f"{result.id} {result.status}")

        return run_eval(dataset, kind=kind, case_id=case_id, backend=backend, on_case=advance)


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        kind: Annotated[Optional[KindOption], typer.Option("--kind", help="run only this kind of case")] = None,
        case: Annotated[Optional[str], typer.Option("--case", help="run only the case with this id")] = None,
        backend: Annotated[BackendOption, typer.Option("--backend", help="planner for the planning cases")] = BackendOption.offline,
        as_json: Annotated[bool, typer.Option("--json", help="print {cases, summary} as JSON")] = False,
        out: Annotated[Optional[Path], typer.Option("--out", help="write the Markdown report to this file")] = None,
    ) -> None:
        """Run the reference runs in evals/: prediction errors, planning scores and the lesson's claims."""
        from trainplan.evals.report import render_markdown
        from trainplan.evals.runner import crashed

        report = run_with_progress(kind.value if kind else None, case, backend.value)
        markdown = render_markdown(report, backend=backend.value)
        if out is not None:
            write_output(out, markdown + "\n")
            print(f"wrote {out}", file=sys.stderr)
        if as_json:
            print(json.dumps(report, indent=2, default=str))
        elif out is None:
            print(markdown)
        if crashed(report):
            for c in report["cases"]:
                if c["status"] == "error":
                    print(f"crashed: {c['id']}: {c['message']}", file=sys.stderr)
            raise typer.Exit(code=1)
