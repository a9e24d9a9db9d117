"""`trainplan estimate`: memory, time and cost of one layout."""

from __future__ import annotations

import inspect
import json

import typer
from rich.console import Console
from rich.table import Table

from trainplan import cli_common as opt
from trainplan.tools.core.errors import InputError


def _shown(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return "-" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def render_estimate(result: dict, console: Console) -> None:
    """A readable view of an estimate result."""
    from trainplan.tools.config.contract import Layout

    config = result["config"]
    sizes = ("tp", "pp", "cp", "ep")
    layout = (f"TP{config['tp']} x PP{config['pp']} x DP{config['dp']} x CP{config['cp']} x EP{config['ep']}  "
              + " ".join(f"{name}={_shown(config.get(name))}" for name in Layout.model_fields if name not in sizes))
    console.print(f"[bold]{config['model']}[/bold] on {config['gpus']} x {config['gpu']}")
    console.print(layout)
    params = result["params"]
    console.print(f"parameters: {params['total'] / 1e9:.2f}B total, {params['active'] / 1e9:.2f}B active"
                  + (f", MTP {params['mtp'] / 1e9:.2f}B apart" if params.get("mtp") else ""))
    table = Table(title="Memory per GPU, most loaded rank (GiB)", min_width=44)
    table.add_column("part")
    table.add_column("GiB", justify="right")
    for key in ("weights", "gradients", "optimizer", "activations", "other", "total", "capacity"):
        table.add_row(key, f"{result['memory_gib'][key]:.2f}")
    console.print(table)
    console.print("fits: [green]yes[/green]" if result["fits"] else f"fits: [red]no[/red] - {result.get('reason')}")
    if "time" in result:
        t = result["time"]
        time_table = Table(title="Step time (breakdown on the critical stage)")
        time_table.add_column("metric")
        time_table.add_column("value", justify="right")
        time_table.add_row("step_s", f"{t['step_s']:.3f}")
        time_table.add_row("tokens_per_s", f"{t['tokens_per_s']:,.0f}")
        time_table.add_row("tokens_per_s_per_gpu", f"{t['tokens_per_s_per_gpu']:,.1f}")
        time_table.add_row("tflops_per_gpu (model)", f"{t['tflops_per_gpu']:.1f}")
        time_table.add_row("hardware_tflops_per_gpu", f"{t['hardware_tflops_per_gpu']:.1f}")
        time_table.add_row("mfu", f"{t['mfu']:.1%}")
        time_table.add_row("hfu", f"{t['hfu']:.1%}")
        time_table.add_row("mfu_full_attention (PaLM count)", f"{t['mfu_full_attention']:.1%}")
        time_table.add_row("bubble_fraction", f"{t['bubble_fraction']:.1%}")
        for key, seconds in t["breakdown"].items():
            time_table.add_row(f"  {key}", f"{seconds:.3f} s ({seconds / t['step_s']:.1%})")
        console.print(time_table)
        console.print(f"MFU denominator: {t['mfu_denominator']}")
    if "training" in result:
        c = result["training"]
        console.print(f"training: {c['tokens']:.3g} tokens, {c['steps']:,} steps, {c['days']:.1f} days, "
                      f"{c['gpu_hours']:,.0f} GPU-hours, ${c['cost_usd']:,.0f} at ${c['price_per_gpu_hour']:.2f}/GPU-hour "
                      f"(goodput {c['goodput']:.0%})")
    for note in result.get("notes", []):
        console.print(note if note.startswith("warning:") else f"note: {note}")


def register(app: typer.Typer) -> None:
    def estimate_command(source: opt.From = None, as_json: opt.Json = False, solve: opt.Solve = None,
                         **values) -> None:
        """Memory per GPU, step time, MFU and training cost of one layout. With --solve: the longest seq or
        the largest mbs that fits, or the catalog GPUs it fits on (tools/search/limits.py)."""
        from trainplan.tools.perf.estimate import estimate

        merged = opt.merged_options(fields, values, source)
        for key in ("model", "gpu", "gpus"):
            if merged.get(key) is None and not (key == "gpu" and solve == "gpu"):
                raise InputError(f"--{key} is required (or pass --from with a saved estimate)")
        if solve is not None:
            from trainplan.tools.search.limits import render_limit, solve as solve_limit

            answer = solve_limit(solve, **merged)
            print(json.dumps(answer, indent=2) if as_json else render_limit(answer))
            return
        result = estimate(**merged)
        if as_json:
            print(json.dumps(result.model_dump(mode="json"), indent=2))
        else:
            render_estimate(result.model_dump(mode="json"), Console())

    from trainplan.tools.config.contract import Job, Layout
    from trainplan.tools.config.fields import fields_of

    fields = fields_of(Job, Layout)
    tail = [inspect.Parameter("source", inspect.Parameter.KEYWORD_ONLY, annotation=opt.From, default=None),
            inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=opt.Json, default=False),
            inspect.Parameter("solve", inspect.Parameter.KEYWORD_ONLY, annotation=opt.Solve, default=None)]
    app.command("estimate")(opt.command(estimate_command, [*opt.options(fields, mode="override"), *tail]))
