"""vTrain's measured A100 iteration times against the planner (evals/vtrain.py; data in evals/data/vtrain/ with
its licence): single-node MAPE, median error and in-group Spearman (fitted on hidden 2048, held out hidden 1024),
multi-node MAPE, and the single-node slices of issue 23, without the floors of small work (before) and with them
(after). Targets (issue 23): single-node MAPE <= 15% with in-group Spearman >= 0.8, multi-node MAPE <= 10%, with
default knobs plus attention=eager, recompute=full, zero=0 and 150/12.5 GB/s links.
Run: python benchmarks/bench_vtrain.py [--every N] [--slices]"""

from __future__ import annotations

import argparse
import time

from trainplan.evals import vtrain


def _line(name: str, figures: dict) -> str:
    return (f"  {name:<18} n {figures['n']:>4}  MAPE {figures['mape']:6.1%}  median {figures['median_error']:+6.1%}  "
            f"in-group Spearman {figures['spearman']:.2f} ({figures['groups']} groups)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--every", type=int, default=1, help="every N-th row only (1: all)")
    parser.add_argument("--slices", action="store_true", help="also print the single-node slices")
    args = parser.parse_args()
    start = time.perf_counter()
    for label, floors, knobs in (("before (no floors), default attention=flash", False, {"attention": "flash"}),
                                 ("before (no floors)", False, {}), ("after (floors)", True, {})):
        result = vtrain.evaluate(args.every, floors=floors, **knobs)
        print(f"{label}: {', '.join(f'{k}={v}' for k, v in {**vtrain.KNOBS, **knobs}.items())}")
        for name in ("single", "single_fitted", "single_held_out", "multi"):
            print(_line(name, result[name]))
        if args.slices:
            for name, figures in vtrain.slices(result["pairs"]).items():
                print(_line(name, figures))
    print(f"\n{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
