"""Accuracy of the performance model against the published runs in evals/runs: per case the
predicted and published figures and the relative error, then MAPE per quantity (all cases and
held-out cases). Run: python benchmarks/bench_accuracy.py [--kind prediction|claims|planning]"""

from __future__ import annotations

import argparse
import time

from trainplan.evals.cases import QUANTITIES
from trainplan.evals.report import num, pct, tol
from trainplan.evals.runner import run_eval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", default="prediction", choices=["prediction", "planning", "claims"])
    args = parser.parse_args()
    start = time.perf_counter()
    report = run_eval(kind=args.kind)
    seconds = time.perf_counter() - start

    print(f"{'case':<38}{'quantity':<25}{'predicted':>12}{'published':>12}{'error':>9}{'tol':>6}  pass")
    for case in report["cases"]:
        if case["status"] != "ok":
            print(f"{case['id']:<38}{case['status']}: {case['message']}")
            continue
        for quantity, published in case["published"].items():
            print(f"{case['id']:<38}{quantity:<25}{num(case['predicted'][quantity]):>12}{num(published):>12}"
                  f"{pct(case['error'][quantity]):>9}{tol(case['tolerance'][quantity]):>6}  "
                  f"{'yes' if case['checks'][quantity] else 'NO'}")
        if case["predicted"].get("fits") is False:
            print(f"{case['id']:<38}{'fits':<25}{'no':>12}{'yes':>12}")

    summary = report["summary"]
    if summary["mape"]:
        print()
        print(f"{'quantity':<25}{'MAPE':>8}{'n':>4}{'held-out':>10}{'n':>4}  meaning")
        for quantity, m in summary["mape"].items():
            held = pct(m["mape_held_out"]).lstrip("+")
            print(f"{quantity:<25}{pct(m['mape']).lstrip('+'):>8}{m['n']:>4}{held:>10}{m['n_held_out']:>4}  "
                  f"{QUANTITIES[quantity][1]}")
        print(f"{'overall':<25}{pct(summary['mape_overall']).lstrip('+'):>8}    "
              f"{pct(summary['mape_overall_held_out']).lstrip('+'):>10}      "
              f"{', '.join(summary['mape_overall_quantities'])}")
    print(f"\n{summary['cases']} cases, {summary['pass']} pass, {summary['fail']} fail, "
          f"{summary['skipped']} skipped, {summary['errors']} crashed in {seconds:.2f} s")


if __name__ == "__main__":
    main()
