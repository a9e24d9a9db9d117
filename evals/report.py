"""Markdown report of an eval run: a table per kind, MAPE per quantity, and a text plot of
predicted against published (log2 of the ratio, so 0.5x and 2x sit at equal distances)."""

from __future__ import annotations

import math

from .cases import EXPERT_TOP_K, QUANTITIES
from .runner import MEMORY_QUANTITIES, THROUGHPUT_QUANTITIES


def num(value) -> str:
    """A readable number: 30.84M, 1,536, 138.2, 0.4312."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.3f}B"
    if magnitude >= 1e6:
        return f"{value / 1e6:.3f}M"
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}"


def pct(error: float | None) -> str:
    if error is None:
        return "-"
    return "+0.0%" if abs(error) < 5e-4 else f"{error:+.1%}"


def tol(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 else f"{value:.1%}"


def mark(passed) -> str:
    return {True: "pass", False: "FAIL", None: "-"}[passed]


def layout(config: dict) -> str:
    parts = [f"TP{config['tp']}", f"PP{config['pp']}", f"DP{config['dp']}"]
    if config.get("cp", 1) > 1:
        parts.append(f"CP{config['cp']}")
    if config.get("ep", 1) > 1:
        parts.append(f"EP{config['ep']}")
    extra = f" vpp{config['vpp']}" if config.get("vpp", 1) > 1 else ""
    return (" ".join(parts) + extra + f" z{config['zero']} mbs{config['mbs']} {config['recompute']} "
            f"{config['schedule']} {config['precision']}")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return lines


def _figure_rows(cases: list[dict], held_column: bool, quantities: tuple[str, ...] | None = None) -> list[list[str]]:
    """One row per compared figure (of `quantities`, or every one): case, figure, predicted, published, error, tol,
    pass, [set,] source."""
    rows = []
    for c in cases:
        held = ["calibration" if c["used_for_calibration"] else "held-out"] if held_column else []
        if c["status"] != "ok":
            rows.append([c["id"], "-", "-", "-", "-", "-", c["status"], *["-" for _ in held], c["message"] or ""])
            continue
        for q, published in c["published"].items():
            if quantities is not None and q not in quantities:
                continue
            rows.append([c["id"], q, num(c["predicted"][q]), num(published), pct(c["error"][q]),
                         tol(c["tolerance"][q]), mark(c["checks"][q]), *held, c["source"][q]])
        if c["predicted"].get("fits") is False:
            rows.append([c["id"], "fits", "no", "yes", "-", "-", "FAIL", *held, "the published run ran"])
    return rows


def text_plot(cases: list[dict], width: int = 41) -> list[str]:
    """One line per compared figure: where predicted/published falls between 0.5x and 2x."""
    half = width // 2
    axis = [" "] * (width + 2)
    axis[0:4], axis[half:half + 2], axis[width - 2:width] = "0.5x", "1x", "2x"
    lines = [f"{'':45}{''.join(axis).rstrip()}", f"{'':45}{'-' * half}|{'-' * half}"]
    for c in cases:
        if c["status"] != "ok":
            continue
        for quantity, error in c["error"].items():
            ratio = 1 + error
            pos = half + (round(math.log2(ratio) * half) if ratio > 0 else -half - 1)
            row = [" "] * width
            row[half] = "|"
            symbol = "o" if c["checks"].get(quantity) else "x"
            if pos < 0:
                row[0] = "<"
            elif pos >= width:
                row[-1] = ">"
            else:
                row[pos] = symbol
            label = f"{c['id']} {quantity}"[:43]
            lines.append(f"{label:43}  {''.join(row)} {ratio:.2f}x")
    lines.append("o inside its tolerance, x outside, < or > beyond the axis")
    return lines


def render_markdown(report: dict, backend: str = "offline") -> str:
    cases = report["cases"]
    s = report["summary"]
    out = ["# trainplan eval", ""]
    out.append(f"{s['cases']} cases: {s['pass']} pass, {s['fail']} fail, {s['skipped']} skipped, "
               f"{s['errors']} crashed. Thresholds are per figure (column 'tol'); a case passes when every "
               "check is inside its tolerance. Relative error = predicted / published - 1.")
    out.append("")

    prediction = [c for c in cases if c["kind"] == "prediction"]
    if prediction:
        out += ["## Prediction: published layouts", ""]
        out += _table(["case", "quantity", "predicted", "published", "error", "tol", "pass", "set", "source"],
                      _figure_rows(prediction, held_column=True))
        out += ["", "### MAPE per quantity", ""]
        mrows = [[q, QUANTITIES[q][1], pct(m["mape"]).lstrip("+"), str(m["n"]),
                  pct(m["mape_held_out"]).lstrip("+"), str(m["n_held_out"])] for q, m in s["mape"].items()]
        mrows.append(["overall", ", ".join(s["mape_overall_quantities"]), pct(s["mape_overall"]).lstrip("+"), "",
                      pct(s["mape_overall_held_out"]).lstrip("+"), ""])
        out += _table(["quantity", "meaning", "MAPE", "n", "MAPE held-out", "n held-out"], mrows)
        for key, family in (("dense_throughput_held_out", "Dense models"), ("moe_throughput_held_out", "MoE models")):
            pooled = s.get(key)
            if pooled and pooled["n"]:
                out += ["", f"{family}, held out, step time or throughput (one figure per case): MAPE "
                            f"{pct(pooled['mape']).lstrip('+')} over {pooled['n']} cases; worst {pooled['worst_case']} "
                            f"{pct(pooled['worst_error'])}."]
        if s.get("vtrain"):
            v = s["vtrain"]
            out += ["", "vTrain's measured A100 iteration times (evals/vtrain.py; attention eager, recompute full, "
                        "zero 0, 150/12.5 GB/s): "
                        + "; ".join(f"{label} MAPE {pct(v[key]['mape']).lstrip('+')} over {v[key]['n']} rows, "
                                    f"median {pct(v[key]['median_error'])}, in-group Spearman {v[key]['spearman']:.2f}"
                                    for key, label in (("single", "single-node"),
                                                       ("single_fitted", "fitted on (hidden 2048)"),
                                                       ("single_held_out", "held out (hidden 1024)"),
                                                       ("multi", "multi-node, held out")))
                        + "."]
        for key, title, what, quantities in (("fine_tuning_memory", "peak memory", "peak memory", MEMORY_QUANTITIES),
                                             ("fine_tuning_speed", "speed", "step time / throughput",
                                              THROUGHPUT_QUANTITIES)):
            tuning = s.get(key)
            if not (tuning and tuning["n"]):
                continue
            rows = [c for c in prediction if c["id"] in tuning["cases"]]
            out += ["", f"## Fine-tuning: {title}", ""]
            out += _table(["case", "quantity", "predicted", "published", "error", "tol", "pass", "set", "source"],
                          _figure_rows(rows, held_column=True, quantities=quantities))
            out += ["", f"Fine-tuning {what} (full, LoRA and QLoRA): MAPE {pct(tuning['mape']).lstrip('+')} over "
                        f"{tuning['n']} cases ({pct(tuning['mape_held_out']).lstrip('+')} over {tuning['n_held_out']} "
                        f"held out); {tuning['inside_tolerance']} of {tuning['n']} within tolerance; worst "
                        f"{tuning['worst_case']} {pct(tuning['worst_error'])}."]
        calibration = ", ".join(s["calibration_cases"]) or "none"
        out += ["", f"Cases used to calibrate an efficiency constant (excluded from held-out MAPE): {calibration}.", ""]
        from trainplan.tools.core.calibration import constants

        out += ["### The calibration table (tools/core/calibration.py)", ""]
        out += _table(["constant", "value", "fitted on", "held out"],
                      [[name, f"{fit.value:g}", ", ".join(fit.fitted_on) or "not fitted (set: see its method)",
                        f"{len(fit.held_out)} cases"] for name, fit in constants().items()])
        out.append("")
        if s.get("calibration_unknown"):
            out += [f"**Warning:** tools/core/calibration.py names cases no run file defines: "
                    f"{', '.join(s['calibration_unknown'])}", ""]
        out += ["### Predicted against published", "", "```"] + text_plot(prediction) + ["```", ""]

    planning = [c for c in cases if c["kind"] == "planning"]
    if planning:
        out += [f"## Planning: the planner given only the request (backend: {backend})", ""]
        rows = []
        for c in planning:
            p = c["predicted"]
            if c["status"] != "ok":
                rows.append([c["id"], c["status"], c["message"] or "", "-", "-", "-", "-", "-", "-", "-"])
                continue
            structure = ", ".join(f"{k.split('.', 1)[1]} {mark(v)}" for k, v in c["checks"].items()
                                  if k.startswith("structure.")) or "-"
            hours = (f"{num(p['gpu_hours'])} vs {num(c['published']['gpu_hours'])} ({pct(c['error']['gpu_hours'])})"
                     if "gpu_hours" in c["published"] else "-")
            expert = (f"{p['expert_vs_best']:.2f}x, rank {p['expert_rank']}"
                      + ("" if p["expert_rank"] <= EXPERT_TOP_K else "+")
                      + ("" if p.get("expert_fits", True) else " (does not fit)")
                      + (f"; {p['expert_vs_recommended']:.2f}x the recommended" if "expert_vs_recommended" in p else "")
                      if "expert_vs_best" in p else "-")
            rows.append([c["id"], "ok", layout(p["config"]), mark(p["fits"]),
                         f"{p['throughput_ratio']:.2f}x" if "throughput_ratio" in p else "-", expert, hours, structure,
                         "-" if p.get("grounded_share") is None else f"{p['grounded_share']:.0%}", mark(c["pass"])])
        out += _table(["case", "status", "plan", "fits", "tokens/s vs published layout",
                       "published layout vs search's best and recommended (same recipe)", "GPU-hours vs published",
                       "structure", "grounded", "pass"], rows)
        out.append("")

    claims = [c for c in cases if c["kind"] == "claims"]
    if claims:
        out += ["## Claims: the lesson's arithmetic through the tools", ""]
        out += _table(["case", "figure", "tools", "lesson", "error", "tol", "pass", "source"],
                      _figure_rows(claims, held_column=False))
        out.append("")

    noted = [c for c in cases if c["notes"] or c["assumptions"]]
    if noted:
        out += ["## Assumptions and working", ""]
        for c in noted:
            out.append(f"- **{c['id']}**")
            for name, why in c["assumptions"].items():
                out.append(f"  - assumed {name}: {why}")
            for note in c["notes"]:
                out.append(f"  - {note}")
        out.append("")
    return "\n".join(out)
