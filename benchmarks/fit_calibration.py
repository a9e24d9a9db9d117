"""Refit the calibration table's constants on the cases it names as `fitted_on`, and print the
held-out errors. Run: python benchmarks/fit_calibration.py [--family ampere|hopper|blackwell|moe-host|host]

The fit is a grid search minimising the mean absolute log error (the eval's MAPE; the squared one for
the LEAST_SQUARES families) of the fitted-on cases' published throughput figures (hardware TFLOP/s for
SC21; causal TFLOP/s for Llama 3 and Megatron-Bridge), every other constant as in tools/core/calibration.py.
The MoE host constant (MOE_HOST_S_PER_EXPERT_GEMM, which moe.py reads as HOST_S_PER_EXPERT_GEMM) is
fitted by least squares on the log errors of its cases' step times.
Copy the printed values into tools/core/calibration.py by hand; this script never edits the table."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math

from trainplan.evals.cases import evaluate_prediction
from trainplan.evals.dataset import load_dataset
from trainplan.tools.core import calibration
from trainplan.tools.hardware import catalog
from trainplan.tools.perf import compute, moe

# family -> (constant names in calibration.FAMILY_EFFICIENCY[family] or "MEMORY_BOUND_EFFICIENCY", grids)
GRIDS = {
    "ampere": {"gemm_efficiency": [x / 100 for x in range(60, 87)], "MEMORY_BOUND_EFFICIENCY": [0.8, 0.85, 0.9]},
    "hopper": {"gemm_efficiency": [x / 100 for x in range(45, 81)],
               "attention_efficiency": [x / 100 for x in range(30, 76, 2)]},
    # Up to B200's MAMF share of its FP8 peak (calibration.FAMILY_EFFICIENCY["blackwell"] method); the
    # attention efficiency stays as set (its row says why the two dense runs cannot fit it).
    "blackwell": {"gemm_efficiency": [x / 100 for x in range(40, 77)]},
}
QUANTITIES = ("hardware_tflops_per_gpu", "tflops_per_gpu")
# Families whose one constant is fitted on two cases that pull it apart: the absolute log error is flat
# between their optima, the squared one has a single minimum (as for the MoE host constant below).
LEAST_SQUARES = {"blackwell"}
# The MoE host constant: microseconds per host-issued expert GEMM, inside the tens of microseconds a
# PyTorch/Transformer Engine op call costs on the host (calibration.MOE_HOST_S_PER_EXPERT_GEMM.method).
MOE_HOST_GRID_S = [us * 1e-6 for us in range(40, 121)]
MOE_QUANTITIES = ("step_s",)


def _apply(family: str, values: dict[str, float]) -> None:
    catalog.load_gpu.cache_clear()
    row = dict(calibration.FAMILY_EFFICIENCY[family])
    for name, value in values.items():
        if name == "MEMORY_BOUND_EFFICIENCY":
            compute.MEMORY_BOUND_EFFICIENCY = value
        else:
            row[name] = dataclasses.replace(row[name], value=value)
    calibration.FAMILY_EFFICIENCY[family] = row


def _errors(cases, dataset, quantities=QUANTITIES) -> list[float]:
    out = []
    for case in cases:
        result = evaluate_prediction(case, dataset)
        out += [math.log1p(e) for q, e in result.error.items() if q in quantities]
    return out


def _report(fitted, held, dataset) -> None:
    for label, cases in (("fitted-on", fitted), ("held-out", held)):
        for case in cases:
            result = evaluate_prediction(case, dataset)
            errs = ", ".join(f"{q} {e:+.1%}" for q, e in result.error.items() if q in QUANTITIES or q == "step_s")
            print(f"  {label:<9} {case.id:<38} {errs}")


def fit_moe_host(dataset) -> None:
    """Grid-search MOE_HOST_S_PER_EXPERT_GEMM on its fitted-on cases' step times."""
    fit = calibration.MOE_HOST_S_PER_EXPERT_GEMM
    fitted = [c for c in dataset.cases if c.id in fit.fitted_on]
    held = [c for c in dataset.cases if c.id in fit.held_out and c.kind == "prediction"]
    best = None
    for value in MOE_HOST_GRID_S:
        moe.HOST_S_PER_EXPERT_GEMM = value
        # Least squares on the log errors: with two fitted-on cases on either side of zero the absolute
        # error is flat between them, the squared one has a single minimum.
        loss = sum(e * e for e in _errors(fitted, dataset, MOE_QUANTITIES))
        if best is None or loss < best[0]:
            best = (loss, value)
    moe.HOST_S_PER_EXPERT_GEMM = best[1]
    print(f"MOE_HOST_S_PER_EXPERT_GEMM: fitted on {', '.join(fit.fitted_on)}")
    print(f"best: {best[1] * 1e6:g} us")
    _report(fitted, held, dataset)


HOST_GRID_S = [x * 1e-6 for x in range(8, 33)]


def fit_host() -> None:
    """Grid-search HOST_S_PER_OP on vTrain's single-node rows with hidden 2048 (the mean absolute log error of
    step time); print the fitted-on and held-out figures (evals/vtrain.py)."""
    import math

    from trainplan.evals import vtrain
    from trainplan.tools.perf import host

    fitted = [r for r in vtrain.rows(False) if r.fitted]
    best = None
    for value in HOST_GRID_S:
        host.HOST_S_PER_OP = value
        loss = sum(abs(math.log(vtrain.predict_s(r) / r.measured_s)) for r in fitted)
        if best is None or loss < best[0]:
            best = (loss, value)
    host.HOST_S_PER_OP = best[1]
    print(f"HOST_S_PER_OP: fitted on {', '.join(calibration.HOST_S_PER_OP.fitted_on)}")
    print(f"best: {best[1] * 1e6:g} us")
    figures = vtrain.evaluate()
    for name in ("single_fitted", "single_held_out", "multi"):
        f = figures[name]
        print(f"  {name:<16} n {f['n']:>4}  MAPE {f['mape']:.1%}  median {f['median_error']:+.1%}  "
              f"in-group Spearman {f['spearman']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", choices=sorted(GRIDS) + ["moe-host", "host"], default="ampere")
    args = parser.parse_args()
    if args.family == "host":
        fit_host()
        return
    dataset = load_dataset()
    if args.family == "moe-host":
        fit_moe_host(dataset)
        return
    row = calibration.FAMILY_EFFICIENCY[args.family]
    fitted_ids = set().union(*(fit.fitted_on for fit in row.values()))
    if "MEMORY_BOUND_EFFICIENCY" in GRIDS[args.family]:
        fitted_ids |= set(calibration.MEMORY_BOUND_EFFICIENCY.fitted_on)
    held_ids = set().union(*(fit.held_out for fit in row.values())) - fitted_ids
    fitted = [c for c in dataset.cases if c.id in fitted_ids]
    held = [c for c in dataset.cases if c.id in held_ids and c.kind == "prediction"]
    names = list(GRIDS[args.family])
    best = None
    for values in itertools.product(*(GRIDS[args.family][n] for n in names)):
        _apply(args.family, dict(zip(names, values)))
        errors = _errors(fitted, dataset)
        loss = sum(e * e for e in errors) if args.family in LEAST_SQUARES else sum(abs(e) for e in errors)
        if best is None or loss < best[0]:
            best = (loss, dict(zip(names, values)))
    _apply(args.family, best[1])
    print(f"{args.family}: fitted on {', '.join(sorted(fitted_ids))}")
    print("best:", ", ".join(f"{k} = {v:g}" for k, v in best[1].items()))
    _report(fitted, held, dataset)


if __name__ == "__main__":
    main()
