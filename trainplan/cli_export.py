"""`trainplan export`: launch settings for Megatron-LM, DeepSpeed, torchtitan or Accelerate from one layout."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from trainplan.output import write_output

from trainplan import cli_common as opt
from trainplan.tools import catalog
from trainplan.tools.errors import InputError
from trainplan.tools.export import Engine, export
from trainplan.tools.layout import resolve_config

EngineOpt = Annotated[Engine, typer.Option("--engine", help="engine to write launch settings for")]
Out = Annotated[Optional[Path], typer.Option("--out", help="write the file here instead of printing it")]
From = Annotated[Optional[Path], typer.Option(
    "--from", help="a saved estimate/plan JSON: its 'config' object gives the layout; flags override it")]

# Layout keys read from a saved result's config, in the DESIGN.md vocabulary.
LAYOUT_KEYS = ("model", "gpu", "gpus", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "recompute",
               "schedule", "precision", "attention", "sequence_parallel", "optimizer_offload", "bf16_grads", "gpus_per_node")
DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "zero": 1, "mbs": 1, "recompute": "selective",
            "precision": "bf16", "attention": "flash", "sequence_parallel": True, "optimizer_offload": False, "bf16_grads": False}


def saved_config(path: Path) -> dict:
    """The layout in a saved `estimate --json` result (key 'config') or a plan (its recommended config)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"cannot read --from file '{path}': {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"--from file '{path}' is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    candidates = [data.get("config"), (data.get("recommended") or {}).get("config"), data] \
        if isinstance(data, dict) else []
    for config in candidates:
        if isinstance(config, dict) and "tp" in config:
            return {key: config[key] for key in LAYOUT_KEYS if config.get(key) is not None}
    raise InputError(f"--from file '{path}' has no 'config' object with a layout: save one with estimate --json")


def export_from_options(engine: Engine | str, options: dict, source: Path | None = None):
    """Merge defaults, a saved config and explicit options (in that order), resolve the layout, export it."""
    merged = dict(DEFAULTS)
    if source is not None:
        merged.update(saved_config(source))
    merged.update({key: value for key, value in options.items() if value is not None})
    for key in ("model", "gpu", "gpus"):
        if merged.get(key) is None:
            raise InputError(f"--{key} is required (or pass --from with a saved estimate)")
    model = catalog.load_model(str(merged["model"]))
    gpu = catalog.load_gpu(str(merged["gpu"]))
    cfg = resolve_config(
        model, int(merged["gpus"]), tp=merged["tp"], pp=merged["pp"], cp=merged["cp"], ep=merged["ep"],
        vpp=merged["vpp"], zero=merged["zero"], mbs=merged["mbs"], gbs=merged.get("gbs"), seq=merged.get("seq"),
        recompute=merged["recompute"], schedule=merged.get("schedule"), precision=merged["precision"],
        attention=merged["attention"],
        sequence_parallel=merged["sequence_parallel"], optimizer_offload=merged["optimizer_offload"],
        bf16_grads=merged["bf16_grads"], fp8_supported=gpu.fp8_tflops is not None,
    )
    return export(engine, model, cfg, model_ref=str(merged["model"]),
                  gpus_per_node=min(gpu.host_size, merged.get("gpus_per_node") or gpu.gpus_per_node))


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_command(
        engine: EngineOpt,
        model: Annotated[Optional[str], typer.Option("--model", help="catalog name or path to an HF config.json")] = None,
        gpu: Annotated[Optional[str], typer.Option("--gpu", help="catalog name or path to a GPU JSON")] = None,
        gpus: Annotated[Optional[int], typer.Option("--gpus", help="total GPUs")] = None,
        tp: Annotated[Optional[int], typer.Option("--tp", help="tensor-parallel size")] = None,
        pp: Annotated[Optional[int], typer.Option("--pp", help="pipeline-parallel size")] = None,
        cp: Annotated[Optional[int], typer.Option("--cp", help="context-parallel size")] = None,
        ep: Annotated[Optional[int], typer.Option("--ep", help="expert-parallel size")] = None,
        vpp: Annotated[Optional[int], typer.Option("--vpp", help="virtual pipeline stages per rank")] = None,
        zero: Annotated[Optional[int], typer.Option("--zero", help="ZeRO stage 0-3")] = None,
        mbs: Annotated[Optional[int], typer.Option("--mbs", help="micro-batch size, sequences")] = None,
        gbs: opt.Gbs = None, seq: opt.Seq = None,
        recompute: Annotated[Optional[opt.Recompute], typer.Option("--recompute", help="activation recompute mode")] = None,
        schedule: opt.ScheduleOpt = None,
        precision: Annotated[Optional[opt.Precision], typer.Option("--precision", help="GEMM precision")] = None,
        attention: Annotated[Optional[opt.Attention], typer.Option(
            "--attention", help="attention kernel: flash or eager")] = None,
        gpus_per_node: opt.GpusPerNode = None,
        optimizer_offload: Annotated[Optional[bool], typer.Option(
            "--optimizer-offload/--no-optimizer-offload", help="ZeRO-Offload: optimizer on the CPU")] = None,
        bf16_grads: Annotated[Optional[bool], typer.Option(
            "--bf16-grads/--fp32-grads", help="bf16 gradients (16 B/param) instead of fp32")] = None,
        out: Out = None, source: From = None, as_json: opt.Json = False,
    ) -> None:
        """Write launch settings (args, ds_config, job TOML, accelerate YAML) for one layout."""
        options = {
            "model": model, "gpu": gpu, "gpus": gpus, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp,
            "zero": zero, "mbs": mbs, "gbs": gbs, "seq": seq, "recompute": getattr(recompute, "value", recompute),
            "schedule": getattr(schedule, "value", schedule), "precision": getattr(precision, "value", precision),
            "attention": getattr(attention, "value", attention),
            "gpus_per_node": gpus_per_node, "optimizer_offload": optimizer_offload, "bf16_grads": bf16_grads,
        }
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
            print(f"note: {note}", file=sys.stderr)
