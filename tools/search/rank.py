"""The layout search's ranking: the objective, ties, ZeRO twins and the Pareto front.

Rank by the objective (smaller is better; ties: lower ZeRO stage, then less memory). The vectorised
scores pick the layouts worth re-scoring with the exact scalar path; the final order is by the
exact figures. ZeRO twins (the same layout but the ZeRO stage, with the same time, e.g. when there
is no data parallelism) are collapsed to the lowest stage that fits, so the top K differ.

Objectives: throughput (most tokens/s), time (fewest days; with a fixed gbs the same order as
throughput, reported in days when tokens are given) and cost (fewest dollars: GPUs x step time x
price; differs from throughput only when several GPU counts are tried, see max_gpus).
"""

from __future__ import annotations

import numpy as np

from trainplan.tools.core.enums import Objective


def objective_of(objective: Objective, step_s, gpus, days, cost_usd, price, tokens):
    """Smaller is better."""
    if objective is Objective.cost:
        return cost_usd if tokens is not None else gpus * step_s * price
    if objective is Objective.time and tokens is not None:
        return days
    return step_s


def result_objective(objective: Objective, result: dict, price: float, tokens) -> float:
    t, c = result["time"], result.get("training", {})
    return float(objective_of(objective, t["step_s"], result["config"]["gpus"], c.get("days"), c.get("cost_usd"),
                               price, tokens))


def result_key(objective: Objective, result: dict, price: float, tokens) -> tuple:
    """Sort key of an exact result: the objective (12 significant digits, so the model's exact ties
    stay ties), then the lower ZeRO stage (the time model charges ZeRO-2/3's extra traffic only in
    part), then less memory."""
    value = result_objective(objective, result, price, tokens)
    return (float(f"{value:.12g}"), result["config"]["zero"], result["memory_gib"]["total"])


def significant(x: np.ndarray, digits: int = 12) -> np.ndarray:
    """x rounded to `digits` significant digits, so the model's exact ties compare equal."""
    x = np.asarray(x, dtype=float)
    scale = 10.0 ** (digits - 1 - np.floor(np.log10(np.maximum(np.abs(x), 1e-300))))
    return np.round(x * scale) / scale


_TWIN_KNOBS = ("gpus", "tp", "pp", "cp", "ep", "vpp", "mbs", "recompute", "schedule")
"""A layout's knobs but the ZeRO stage: ZeRO twins with the same time are collapsed to the lowest stage
(with the recompute module set: the `modules` column of a table, recompute_modules of a config)."""


def best_rows(rows: dict[str, np.ndarray], limit: int) -> list[int]:
    """Indices of the best `limit` rows, ZeRO twins of equal score collapsed; a tie keeps the lower
    ZeRO stage, then the smaller memory, as the final ranking does."""
    if not rows["score"].size:
        return []
    score = significant(rows["score"])
    order = np.lexsort((rows["memory_gib"], rows["zero"], score))
    chosen, seen = [], set()
    for i in order:
        key = (*(int(rows[k][i]) for k in (*_TWIN_KNOBS, "modules") if k in rows), float(score[i]))
        if key not in seen:
            seen.add(key)
            chosen.append(int(i))
            if len(chosen) >= limit:
                break
    return chosen


def collapse_twins(ranked: list[dict], objective: Objective, price: float, tokens) -> list[dict]:
    """Drop a result whose ZeRO twin (same layout but zero, same objective) ranks above it."""
    seen, out = set(), []
    for result in ranked:
        config = result["config"]
        key = (*(config[k] for k in _TWIN_KNOBS), tuple(config.get("recompute_modules") or ()),
               result_key(objective, result, price, tokens)[0])
        if key not in seen:
            seen.add(key)
            out.append(result)
    return out


def pareto_front(points: list[dict]) -> list[dict]:
    """Points no other point beats on both days and cost_usd, by days."""
    front = []
    for p in points:
        dominated = any(q is not p and q["days"] <= p["days"] and q["cost_usd"] <= p["cost_usd"]
                        and (q["days"] < p["days"] or q["cost_usd"] < p["cost_usd"]) for q in points)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: p["days"])
