"""The Unsloth long-context table as the line it is (evals/runs/unsloth-hf-qlora-context.yaml, issue 23).

Unsloth's "Llama 3.1 (8B) max. context length" table gives, per nominal VRAM size, the longest context that fits.
Its Hugging Face + FA2 contexts grow by the same ~404.7 tokens per GB between every pair of rows: one straight
line, memory = intercept + slope x context, evaluated at the card sizes (Unsloth's long-context post says of its
earlier table of this kind: "Numbers are extrapolated based on experiments"). So the rows are two numbers, not
one measurement per card. This prints the published line (the cards' capacity at each published context), the
planner's line (its peak at the same contexts) and the gap between the two: a gap in the intercept is a fixed term
the planner misses, and it weighs most on the smallest card; a per-card term cannot show in a line.
Run: python benchmarks/bench_context_line.py"""

from __future__ import annotations

import numpy as np

from trainplan.evals.cases import run_case
from trainplan.evals.dataset import load_dataset

RUN = "unsloth-hf-qlora-context"
QUANTITY = "peak_memory_gib"


def fit_line(contexts: list[float], gib: list[float]) -> tuple[float, float]:
    """(intercept GiB, slope GiB per 1,000 tokens), least squares."""
    slope, intercept = np.polyfit(np.asarray(contexts) / 1000.0, np.asarray(gib), 1)
    return float(intercept), float(slope)


def main() -> None:
    dataset = load_dataset()
    cases = [c for c in dataset.cases if c.run == RUN and QUANTITY in c.published]
    by_model: dict[str, list] = {}
    for case in cases:
        by_model.setdefault(case.kwargs()["model"], []).append(case)
    print(f"{'case':<32}{'seq':>8}{'predicted':>11}{'published':>11}{'error':>9}")
    for model, group in by_model.items():
        contexts, predicted, published = [], [], []
        for case in group:
            result = run_case(case, dataset)
            if result.status != "ok":
                print(f"{case.id:<32}{result.status}: {result.message}")
                continue
            contexts.append(float(case.kwargs()["seq"]))
            predicted.append(result.predicted[QUANTITY])
            published.append(result.published[QUANTITY])
            print(f"{case.id:<32}{contexts[-1]:>8,.0f}{predicted[-1]:>11.2f}{published[-1]:>11.2f}"
                  f"{result.error[QUANTITY]:>+9.1%}")
        if len(contexts) < 2:
            continue
        pub_b, pub_m = fit_line(contexts, published)
        pre_b, pre_m = fit_line(contexts, predicted)
        residuals = ", ".join(f"{s:,.0f}: {p - (pub_b + pub_m * s / 1000.0):+.2f}" for s, p in zip(contexts, published))
        print(f"{model}: published line {pub_b:.2f} GiB + {pub_m:.3f} GiB per 1K tokens (residuals, GiB: "
              f"{residuals}); planner {pre_b:.2f} GiB + {pre_m:.3f} GiB per 1K tokens; intercept gap "
              f"{pub_b - pre_b:+.2f} GiB, slope {pre_m / pub_m - 1:+.1%}")


if __name__ == "__main__":
    main()
