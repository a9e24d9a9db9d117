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
    from trainplan.agent.registry import dispatch

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
        gpu_table = Table(title="GPUs (dense peaks; link GB/s per GPU per direction; domain = GPUs on one "
                                "NVLink/xGMI fabric, or one host's PCIe; * efficiencies assumed, not fitted)")
        for column in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "memory GiB", "memory GB/s", "link",
                       "link GB/s", "network GB/s", "domain", "GPUs/host", "$/GPU-h", "price date"):
            gpu_table.add_column(column, justify="left" if column in ("name", "link", "price date") else "right",
                                 no_wrap=column == "name")
        for g in listing["gpus"]:
            name = g["name"] + ("*" if g["efficiency_basis"] == "assumed" else "")
            gpu_table.add_row(name, f"{g['bf16_tflops']:g}", f"{g['fp8_tflops']:g}" if g["fp8_tflops"] else "-",
                              f"{g['memory_gib']:g}", f"{g['hbm_bandwidth_gb_s']:g}", g["interconnect"],
                              f"{g['intra_node_bw']:g}", f"{g['inter_node_bw']:g}", str(g["gpus_per_node"]),
                              str(g["gpus_per_host"]), f"{g['price']:.2f}", g["price_date"])
        model_table = Table(title="Models (HF config.json)")
        for column in ("name", "type", "layers", "hidden", "heads", "kv heads", "experts", "params", "active"):
            model_table.add_column(column, justify="left" if column in ("name", "type") else "right")
        for m in listing["models"]:
            model_table.add_row(m["name"], m["model_type"], str(m["num_layers"]), str(m["hidden_size"]),
                                str(m["num_attention_heads"]), str(m["num_kv_heads"]), str(m["num_experts"] or "-"),
                                f"{m['params_total'] / 1e9:.2f}B", f"{m['params_active'] / 1e9:.2f}B")
        console.print(gpu_table)
        console.print(model_table)
