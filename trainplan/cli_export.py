"""`trainplan export`: launch settings for one engine of tools/config/engines.py from one layout."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from trainplan.tools.core.output import write_output

from trainplan import cli_common as opt
from trainplan.tools.hardware import catalog
from trainplan.tools.core.errors import InputError
from trainplan.tools.engines import Engine, export
from trainplan.tools.config.layout import resolve_with_batch
from trainplan.tools.perf.memory import memory_breakdown

EngineOpt = Annotated[Engine, typer.Option("--engine", help="engine to write launch settings for")]
Out = Annotated[Optional[Path], typer.Option("--out", help="write the file here instead of printing it")]
From = opt.From

DOES_NOT_FIT = "this layout does not fit in memory: "
"""The note an export of a layout that runs out of memory starts with; the CLI prints it as a warning."""
EXPORT_JOB_FIELDS = ("model", "gpu", "gpus", "gpus_per_node")
"""The Job fields an export needs; the rest of what it takes is every Layout field (tools/config/contract.py)."""


def export_fields() -> dict:
    from trainplan.tools.config.contract import Job, Layout

    return {**{name: Job.model_fields[name] for name in EXPORT_JOB_FIELDS}, **Layout.model_fields}


def export_from_options(engine: Engine | str, options: dict, source: Path | None = None):
    """A saved config, then the explicit options over it (None: not given); the Layout defaults fill the
    rest. Resolve the layout and export it."""
    merged = opt.saved_config(source, export_fields()) if source is not None else {}
    merged.update({key: value for key, value in options.items() if value is not None})
    for key in ("model", "gpu", "gpus"):
        if merged.get(key) is None:
            raise InputError(f"--{key} is required (or pass --from with a saved estimate)")
    model_ref = str(merged.pop("model"))
    model = catalog.load_model(model_ref)
    gpu = catalog.load_gpu(str(merged.pop("gpu")))
    gpus, gpus_per_node = int(merged.pop("gpus")), merged.pop("gpus_per_node", None)
    cfg, gbs_note = resolve_with_batch(model, gpus, fp8_supported=gpu.fp8_tflops is not None, **merged)
    result = export(engine, model, cfg, model_ref=model_ref, gpus_per_node=gpus_per_node or gpu.gpus_per_node)
    if gbs_note:
        result.notes.insert(0, gbs_note)
    memory = memory_breakdown(model, cfg, gpu)
    if not memory.fits:
        result.notes.insert(0, f"{DOES_NOT_FIT}{memory.reason}")
    return result


def register(app: typer.Typer) -> None:
    def export_command(engine: EngineOpt, out: Out = None, source: From = None, as_json: opt.Json = False,
                       **options) -> None:
        """Write launch settings (args, ds_config, job TOML, accelerate YAML) for one layout."""
        options = opt.given(options)
        result = export_from_options(engine, options, source)
        if as_json:
            print(json.dumps(result.model_dump(), indent=2))
            return
        if out is None:
            sys.stdout.write(result.content)
        else:
            write_output(out, result.content)
            print(f"wrote {out} ({result.engine}, {result.format})", file=sys.stderr)
        for note in result.notes:
            print(f"{'warning' if note.startswith(DOES_NOT_FIT) else 'note'}: {note}", file=sys.stderr)

    fixed = [inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, annotation=EngineOpt),
             inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=Out, default=None),
             inspect.Parameter("source", inspect.Parameter.KEYWORD_ONLY, annotation=From, default=None),
             inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=opt.Json, default=False)]
    app.command("export")(opt.command(export_command, [fixed[0], *opt.options(export_fields(), mode="override"),
                                                       *fixed[1:]]))
