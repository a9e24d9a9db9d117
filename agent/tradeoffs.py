"""GPU counts against days, dollars and MFU: the table a plan whose count the planner chose shows, and
what "cheapest" means in it.

- standard_counts: the GPU counts published runs use: whole nodes in counts of 2^k or 3 x 2^k nodes
  (Llama 3 405B on 16,384 H100 = 2,048 nodes; DeepSeek-V3 on 2,048 H800 = 256; Nemotron-4 340B on
  6,144 H100 = 768 nodes = 3 x 256; BLOOM on 384 A100 = 48 = 3 x 16), and powers of two below a node.
  A count like 896 GPUs (7/8 of 1,024) leaves the batch and the pipeline few divisors.
- Table: the best layout at each count (one search per count, the request's limits dropped, so the
  rows that miss a deadline or a budget show by how much), each marked whether it meets the request
  and whether it is on the Pareto front of days against dollars.
- cheapest: the fastest count whose plan costs at most COST_SLACK more than the cheapest one (a plan
  that saves 0.5% of the cost by taking 16 times as long is not what "cheapest" asks for), and the
  sentence that states the trade.
"""

from __future__ import annotations

from collections.abc import Callable

from trainplan.tools.hardware import catalog
from trainplan.tools.search.evidence import departures_of, shape_of
from trainplan.tools.config.plan_defaults import COST_SLACK
from trainplan.tools.search.explain import label
from trainplan.tools.search.rank import pareto_front

TABLE_ROWS = 9
"""At most this many GPU counts in a plan's table (one search each)."""


def standard_counts(low: int, high: int, per_node: int) -> list[int]:
    """Standard GPU counts in [low, high], ascending (module doc)."""
    out, k = set(), 1
    while k < per_node:
        if low <= k <= high:
            out.add(k)
        k *= 2
    nodes = 1
    while nodes * per_node <= high:
        for n in (nodes, 3 * nodes // 2 if nodes >= 2 else None):
            if n and low <= n * per_node <= high:
                out.add(n * per_node)
        nodes *= 2
    return sorted(out)


def _meets(job: dict, result: dict) -> bool:
    training = result.get("training") or {}
    if job.get("deadline_days") and training.get("days", float("inf")) > job["deadline_days"]:
        return False
    return not (job.get("budget_usd") and training.get("cost_usd", float("inf")) > job["budget_usd"])


class Table:
    """The best layout per GPU count for one job, searched once per count (best_at: (job, gpus) -> the
    best estimate result or None, the job's limits dropped)."""

    def __init__(self, job: dict, best_at: Callable[[dict, int], dict | None]):
        self.job, self._best_at, self._cache = job, best_at, {}

    def best(self, gpus: int) -> dict | None:
        if gpus not in self._cache:
            self._cache[gpus] = self._best_at({**self.job, "deadline_days": None, "budget_usd": None}, gpus)
        return self._cache[gpus]

    def rows(self, counts: list[int], chosen: int | None, planned: dict | None = None) -> list[dict]:
        """One row per count with a layout that fits: gpus, days, cost_usd, mfu, layout, departures (from
        the evals' evidence, tools/search/evidence.py), meets, pareto, chosen, and the result (for the report's
        alternatives; dropped from the report's table). planned: the plan's own layout, the chosen count's row (it
        meets the request's limits, which the other rows drop)."""
        rows = []
        for gpus in counts:
            result = planned if gpus == chosen and planned is not None else self.best(gpus)
            if result is None or not result.get("training"):
                continue
            training = result["training"]
            config = result["config"]
            shape = shape_of(catalog.load_model(self.job["model"]), config["seq"], config["gpus_per_node"])
            rows.append({"gpus": gpus, "days": training["days"], "cost_usd": training["cost_usd"],
                         "mfu": result["time"]["mfu"], "layout": label(config),
                         "departures": len(departures_of(config, shape)),
                         "meets": _meets(self.job, result), "chosen": gpus == chosen, "result": result})
        front = {id(p["row"]) for p in pareto_front([{"days": r["days"], "cost_usd": r["cost_usd"], "row": r}
                                                     for r in rows])}
        for row in rows:
            row["pareto"] = id(row) in front
        return rows


def around(job: dict, chosen: int, low: int, high: int) -> list[int]:
    """Standard counts from chosen / 4 to chosen x 4 within [low, high], at most TABLE_ROWS, centred on
    the chosen count, which is always in."""
    per_node = job.get("gpus_per_node") or catalog.load_gpu(job["gpu"]).gpus_per_node
    counts = sorted(set(standard_counts(max(low, chosen // 4), min(high, chosen * 4), per_node)) | {chosen})
    while len(counts) > TABLE_ROWS:
        counts.pop(0 if abs(counts[0] - chosen) / chosen > abs(counts[-1] - chosen) / chosen else -1)
    return counts


def cheapest(rows: list[dict], slack: float = COST_SLACK) -> tuple[dict, str] | None:
    """The fastest row that meets the request within `slack` of the cheapest that does, and the trade."""
    meeting = [r for r in rows if r["meets"]]
    if not meeting:
        return None
    low = min(meeting, key=lambda r: (r["cost_usd"], r["days"]))
    pick = min((r for r in meeting if r["cost_usd"] <= low["cost_usd"] * (1 + slack)), key=lambda r: r["days"])
    if pick is low:
        return pick, (f"{pick['gpus']:,} GPUs is the cheapest plan ({pick['days']:.1f} days, ${pick['cost_usd']:,.0f}); "
                      f"no count within {slack:.0%} of its cost finishes sooner")
    return pick, (f"{pick['gpus']:,} GPUs: {pick['days']:.1f} days for ${pick['cost_usd']:,.0f}, "
                  f"{pick['cost_usd'] / low['cost_usd'] - 1:.1%} more than the cheapest plan ({low['gpus']:,} GPUs, "
                  f"{low['days']:.1f} days, ${low['cost_usd']:,.0f}) and {low['days'] / pick['days']:.1f}x sooner: "
                  f"'cheapest' takes the fastest plan within {slack:.0%} of the lowest cost (plan_defaults.COST_SLACK)")


def shown(rows: list[dict]) -> list[dict]:
    """The rows as the report shows them (without the results)."""
    return [{k: v for k, v in row.items() if k != "result"} for row in rows]


def plan_rows(table: Table, job: dict, constrained: bool, low: int, top: int, planned: dict | None = None
              ) -> list[dict]:
    """The table of a plan on job["gpus"] (its layout `planned`): for a constrained one (a deadline, a budget, a
    bound, or a count the planner chose) the standard counts from `low` up to the bound ("up to N"), else around
    the planned count; for any other, half and twice the planned count beside it."""
    gpus = job["gpus"]
    per_node = job.get("gpus_per_node") or catalog.load_gpu(job["gpu"]).gpus_per_node
    if not constrained:
        near = [c for c in standard_counts(max(low, gpus // 2), gpus * 2, per_node) if c in (gpus // 2, gpus * 2)]
        return table.rows(sorted({*near, gpus}), gpus, planned)
    if job.get("max_gpus"):
        counts = sorted(set(standard_counts(low, top, per_node)[-TABLE_ROWS:]) | {gpus})
    else:
        counts = around(job, gpus, low, top)
    return table.rows(counts, gpus, planned)


def neighbours(rows: list[dict], gpus: int, wanted: int) -> list[dict]:
    """Up to `wanted` best layouts at the GPU counts nearest the plan's, labelled as such (an
    alternative the plan's own count cannot offer)."""
    others = sorted((r for r in rows if r["gpus"] != gpus), key=lambda r: abs(r["gpus"] - gpus) / gpus)
    return [{**r["result"], "family": f"at {r['gpus']:,} GPUs"} for r in others[:max(wanted, 0)]]
