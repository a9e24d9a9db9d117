"""`trainplan catalog`: list the GPU and model catalogs."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table



def catalog_listing() -> dict:
    """Both catalogs as plain data: the `list_catalog` tool's result (GPUs with their figures, models
    with their sizes)."""
    from trainplan.tools.registry import dispatch

    return dispatch("list_catalog", "{}")


def register(app: typer.Typer) -> None:
    @app.command("catalog")
    def catalog_command(
        as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of tables")] = False,
    ) -> None:
        """List the GPU and model catalogs."""
        listing = catalog_listing()
        if as_json:
            print(json.dumps(listing, indent=2))
            return
        console = Console(width=max(120, Console().width))
        gpu_table = Table(title="GPUs (dense peaks; network GB/s per GPU per direction)")
        for column in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GiB", "HBM GB/s", "NVLink GB/s",
                       "network GB/s", "GPUs/node", "$/GPU-h"):
            gpu_table.add_column(column, justify="left" if column == "name" else "right")
        for g in listing["gpus"]:
            gpu_table.add_row(g["name"], f"{g['bf16_tflops']:g}", f"{g['fp8_tflops']:g}" if g["fp8_tflops"] else "-",
                              f"{g['memory_gib']:g}", f"{g['hbm_bandwidth_gb_s']:g}", f"{g['intra_node_bw']:g}",
                              f"{g['inter_node_bw']:g}", str(g["gpus_per_node"]), f"{g['price']:.2f}")
        model_table = Table(title="Models (HF config.json)")
        for column in ("name", "type", "layers", "hidden", "heads", "kv heads", "experts", "params", "active"):
            model_table.add_column(column, justify="left" if column in ("name", "type") else "right")
        for m in listing["models"]:
            model_table.add_row(m["name"], m["model_type"], str(m["num_layers"]), str(m["hidden_size"]),
                                str(m["num_attention_heads"]), str(m["num_kv_heads"]), str(m["num_experts"] or "-"),
                                f"{m['params_total'] / 1e9:.2f}B", f"{m['params_active'] / 1e9:.2f}B")
        console.print(gpu_table)
        console.print(model_table)
