"""`trainplan simulate`: run the collective algorithms on simulated ranks with numpy and show that
they compute what they claim (see trainplan.tools.perf.collectives)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from trainplan.tools.perf.collective_sim import SIMULATIONS, simulate_accumulate
from trainplan.tools.core.errors import InputError


def run_simulation(what: str, ranks: int = 4, micro_batches: int = 4) -> dict:
    """One simulation's result as plain data; unknown names and bad counts raise InputError."""
    if what not in SIMULATIONS:
        raise InputError(f"unknown simulation '{what}': use one of {', '.join(SIMULATIONS)}")
    if what == "accumulate":
        return simulate_accumulate(ranks, micro_batches=micro_batches)
    return SIMULATIONS[what](ranks)


def _lines(result: dict) -> list[str]:
    what, n = result["simulation"], result["ranks"]
    if what == "allreduce":
        return [
            f"ring all-reduce (reduce-scatter + all-gather) of {result['size_bytes']} bytes on {n} ranks",
            f"  max abs error vs the sum: {result['max_abs_error']:.3g}",
            f"  bytes sent per rank: {sorted(set(result['bytes_sent_per_rank']))}; "
            f"formula 2(N-1)/N x size = 2*{n - 1}/{n} x {result['size_bytes']} = {result['formula_bytes_per_rank']:g}"
            f" -> {'match' if result['matches_formula'] else 'MISMATCH'}",
        ]
    if what == "dp":
        return [
            f"data parallel: batch of {result['batch']} split over {n} ranks, gradients averaged by all-reduce",
            f"  max abs error vs the single-device gradient: {result['max_abs_error']:.3g}",
            f"  all-reduces: {result['all_reduces']} ({result['bytes_sent_per_rank']} bytes sent per rank)",
        ]
    if what == "tp":
        return [
            f"tensor parallel MLP on {n} ranks: column-parallel then row-parallel linear (Megatron f/g)",
            f"  max abs error vs the full matmuls: forward {result['max_abs_error_forward']:.3g}, "
            f"input gradient {result['max_abs_error_grad_input']:.3g}",
            f"  all-reduces: forward {result['all_reduces_forward']} (g), backward {result['all_reduces_backward']} (f)",
        ]
    return [
        f"gradient accumulation: {result['micro_batches']} micro-batches on each of {n} ranks "
        f"(global batch {result['batch']})",
        f"  max abs error vs the large-batch gradient: {result['max_abs_error']:.3g} "
        f"(all-reduce every micro-batch: {result['max_abs_error_without_accumulation']:.3g})",
        f"  all-reduces: {result['all_reduces']} with accumulation, "
        f"{result['all_reduces_without_accumulation']} without "
        f"({result['bytes_sent_per_rank']} vs {result['bytes_sent_per_rank_without_accumulation']} bytes per rank)",
    ]


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate_command(
        what: Annotated[str, typer.Argument(help="allreduce, dp, tp or accumulate")],
        ranks: Annotated[int, typer.Option("--ranks", help="simulated ranks N")] = 4,
        micro_batches: Annotated[int, typer.Option("--micro-batches", help="K, for accumulate")] = 4,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    ) -> None:
        """Run a collective algorithm on N simulated ranks (numpy) and check it against the math."""
        result = run_simulation(what, ranks=ranks, micro_batches=micro_batches)
        if as_json:
            print(json.dumps(result, indent=2))
            return
        print("\n".join(_lines(result)))
