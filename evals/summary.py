"""What the evals say, kept small for plan time: evals/summary.json, generated from the prediction cases.

    python -m trainplan.evals.summary          # rewrite evals/summary.json after the model or the cases change

Running the prediction cases takes seconds; a plan needs their outcome at once, so it is stored here
and tests/test_evidence.py fails when the file no longer matches what the cases give (stale). The file
holds, per prediction case: its layout as resolved (tools/search/evidence.py derives the evidence region from
the layouts of the cases that pass), whether it passes, and its headline error (the first throughput
figure it publishes, else GPU-hours), and every figure it publishes as predicted and published (`figures`, which
README.md's accuracy table is rendered from: evals/readme_table.py). From them:

- bands: the expected error of a plan by regime (REGIMES: dense at scale, dense small jobs, MoE, fine-tuning),
  as the mean absolute error (MAPE) and the worst case of the held-out cases of that regime: of the headline
  throughput or GPU-hours figure, and of peak memory (runner.MEMORY_QUANTITIES) where a case publishes it;
- gaps: the cases that fail their tolerance or miss by more than GAP_ERROR (their headline figure, or their
  peak memory: memory_error), each with its model and error, so that a plan for that model says so.

Published figures, with their sources, stay in evals/runs/*.yaml; this file copies only their values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainplan.tools.search.eval_summary import ALL, GAP_ERROR, REGIMES, SUMMARY_PATH, regime_of

from .runner import MEMORY_QUANTITIES, THROUGHPUT_QUANTITIES

THROUGHPUT = (*THROUGHPUT_QUANTITIES, "mfu", "mfu_full_attention")
"""Headline quantities, in order: the first a case publishes is its error (they restate one step time)."""
TOTALS = ("gpu_hours", "days", "cost_usd")
def build() -> dict:
    """Run the prediction cases and summarise them (the content of summary.json)."""
    from trainplan.tools.hardware.catalog import load_gpu, load_model
    from trainplan.tools.config.contract import Layout
    from trainplan.tools.config.layout import resolve_config
    from trainplan.tools.config.resolve import is_lora

    from .cases import run_case
    from .dataset import load_dataset

    dataset = load_dataset()
    cases = []
    for case in dataset.select(kind="prediction"):
        result = run_case(case, dataset)
        kwargs = case.kwargs()
        spec, gpu = load_model(str(kwargs["model"])), load_gpu(kwargs["gpu"])
        cfg = resolve_config(spec, kwargs["gpus"], fp8_supported=gpu.fp8_tflops is not None,
                             **{k: kwargs[k] for k in Layout.model_fields if k in kwargs})
        quantity = next((q for q in (*THROUGHPUT, *TOTALS) if q in result.error), None)
        cases.append({
            "id": case.id, "model": spec.name, "gpu": gpu.name, "gpus": int(kwargs["gpus"]), "is_moe": spec.is_moe,
            "adapters": is_lora(cfg.method), "fine_tuning": case.fine_tuning or is_lora(cfg.method),
            "layers": spec.num_layers, "gpus_per_node": int(kwargs.get("gpus_per_node") or gpu.gpus_per_node),
            "layout": {"tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "ep": cfg.ep, "vpp": cfg.vpp, "zero": cfg.zero,
                       "schedule": cfg.schedule.value, "seq": cfg.seq},
            "passed": bool(result.status == "ok" and result.passed), "fits": bool(result.predicted.get("fits", True)), "held_out": not result.used_for_calibration,
            "quantity": quantity, "error": None if quantity is None else round(float(result.error[quantity]), 4),
            "run": case.run, "memory_gib": round(float(result.predicted["memory_gib_total"]), 1),
            "figures": {name: {"predicted": float(f"{result.predicted[name]:.5g}"), "published": published,
                               "error": round(float(result.error[name]), 4)} for name, published in result.published.items()}})
    for c in cases:
        c["memory_error"] = _kind_error(c, "memory", MEMORY_QUANTITIES)
    gaps = [c for c in cases if c["error"] is not None and (not c["passed"] or abs(c["error"]) > GAP_ERROR)
            or c["memory_error"] is not None and abs(c["memory_error"]) > GAP_ERROR]
    return {"generated_by": "python -m trainplan.evals.summary", "cases": cases, "bands": bands(cases),
            "gaps": [c["id"] for c in gaps]}


def bands(cases: list[dict]) -> dict:
    """Regime (and ALL) -> kind (throughput, gpu_hours, memory) -> {mape, n, worst, worst_case}: held-out errors,
    of the headline figure (throughput, gpu_hours) or of the first peak-memory figure a case publishes (memory)."""
    out = {}
    for regime in (*REGIMES, ALL):
        for kind, quantities in (("throughput", THROUGHPUT), ("gpu_hours", TOTALS), ("memory", MEMORY_QUANTITIES)):
            errors = {c["id"]: _kind_error(c, kind, quantities) for c in cases if c["held_out"]
                      and regime in (ALL, regime_of(c["is_moe"], c["gpus"], c["adapters"]))}
            errors = {case: error for case, error in errors.items() if error is not None}
            if not errors:
                continue
            worst = max(errors, key=lambda case: abs(errors[case]))
            out.setdefault(regime, {})[kind] = {
                "mape": round(sum(abs(e) for e in errors.values()) / len(errors), 4), "n": len(errors),
                "worst": errors[worst], "worst_case": worst}
    return out


def _kind_error(case: dict, kind: str, quantities: tuple[str, ...]) -> float | None:
    """A case's error of that kind: its headline error when the headline is one of `quantities`; for memory, its
    first published peak-memory figure."""
    if kind != "memory":
        return case["error"] if case["quantity"] in quantities else None
    return next((case["figures"][q]["error"] for q in quantities if q in case["figures"]), None)


def write() -> Path:
    data = build()
    lines = ",\n  ".join(json.dumps(c) for c in data["cases"])
    head = {k: v for k, v in data.items() if k != "cases"}
    SUMMARY_PATH.write_text(json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n  ' + lines + "\n ]\n}\n")
    return SUMMARY_PATH


if __name__ == "__main__":
    print(f"wrote {write()}", file=sys.stderr)
