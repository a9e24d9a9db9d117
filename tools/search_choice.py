"""What the search recommends among near-equals, and the structurally different layouts it shows.

- Simpler within a margin: among the exactly scored layouts whose objective is within
  plan_defaults.SIMPLER_MARGIN of the best, the search recommends the simplest: fewer parallel
  dimensions (tp, pp, cp, ep above 1) plus departures from what engines run by default, counted
  alike (context parallelism with fewer than plan_defaults.CP_MIN_TOKENS_PER_RANK tokens per rank, a
  zero-bubble or DualPipe schedule that Megatron-LM does not ship, ZeRO-2/3 together with pipeline
  parallelism); ties go to the objective. It says so, with the difference.
- Structural alternatives: the best layout of each family below that the recommendation is not
  in (Megatron-style TP x PP, FSDP/ZeRO-3 only, context-parallel, TP without
  pipeline parallelism, and for MoE expert parallelism without TP), each with why it lost in numbers, or
  why no layout of the family is feasible.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .codes import SCHEDULE_CODES
from .plan_defaults import CP_MIN_TOKENS_PER_RANK, SIMPLER_MARGIN
from .search_explain import explain_runner_up, label
from .search_rank import Objective, result_objective
from .specs import Schedule

_ZB, _DUAL = SCHEDULE_CODES[Schedule.zb_h1], SCHEDULE_CODES[Schedule.dualpipe]

FAMILIES = (
    ("Megatron-style TP x PP", "tp > 1, pp > 1, no CP, ZeRO 0-1",
     lambda c: (c.tp > 1) & (c.pp > 1) & (c.cp == 1) & (c.zero <= 1)),
    ("FSDP / ZeRO-3", "data parallel only, fully sharded",
     lambda c: (c.tp == 1) & (c.pp == 1) & (c.cp == 1) & (c.zero == 3)),
    ("context-parallel", "cp > 1", lambda c: c.cp > 1),
    ("TP without PP", "pp = 1, tp > 1", lambda c: (c.pp == 1) & (c.tp > 1)),
    ("expert parallel without TP", "MoE: ep > 1, tp = 1", lambda c: (c.ep > 1) & (c.tp == 1)),
)
"""(name, what it means, predicate over numpy columns or one config)."""


def columns(table: dict) -> SimpleNamespace:
    """Columns tp, pp, cp, ep, zero, schedule (code) of a layout table or of one config dict."""
    schedule = table["schedule"]
    if isinstance(schedule, str):
        schedule = SCHEDULE_CODES[Schedule(schedule)]
    return SimpleNamespace(**{k: np.asarray(table[k]) for k in ("tp", "pp", "cp", "ep", "zero")},
                           schedule=np.asarray(schedule))


def parallel_dims(c: SimpleNamespace):
    return sum((getattr(c, k) > 1).astype(int) for k in ("tp", "pp", "cp", "ep"))


def departures(c: SimpleNamespace, seq: int):
    """Departures from what engines run by default (module doc), counted."""
    return (((c.cp > 1) & (seq / c.cp < CP_MIN_TOKENS_PER_RANK)).astype(int)
            + ((c.pp > 1) & ((c.schedule == _ZB) | (c.schedule == _DUAL))).astype(int)
            + ((c.pp > 1) & (c.zero >= 2)).astype(int))


def simplicity(c: SimpleNamespace, seq: int):
    """Smaller is simpler: parallel dimensions plus departures, each a moving part a practitioner has
    to get right (ties go to the objective)."""
    return parallel_dims(c) + departures(c, seq)


def _describe(config: dict, seq: int) -> str:
    c = columns(config)
    dims = int(parallel_dims(c))
    parts = [f"{dims} parallel dimension{'s' if dims != 1 else ''}"]
    if config["cp"] > 1 and seq / config["cp"] < CP_MIN_TOKENS_PER_RANK:
        parts.append(f"CP{config['cp']} with {seq // config['cp']:,} tokens per rank (usual from {CP_MIN_TOKENS_PER_RANK:,})")
    if config["pp"] > 1 and config["schedule"] in (Schedule.zb_h1.value, Schedule.dualpipe.value):
        parts.append(f"the {config['schedule']} schedule")
    if config["pp"] > 1 and config["zero"] >= 2:
        parts.append(f"ZeRO-{config['zero']} with PP")
    return ", ".join(parts)


def rows_to_rescore(rows: dict[str, np.ndarray], seq: int, per_group: int = 3, slack: float = 0.10) -> list[int]:
    """Row indices worth an exact score for the preference and the alternatives: the best few of each
    simplicity level within SIMPLER_MARGIN + slack (the closed form's error) of the best score, and
    the best few of each family."""
    if not rows["score"].size:
        return []
    c = columns(rows)
    score = rows["score"]
    near = score <= score.min() * (1 + SIMPLER_MARGIN + slack)
    level = simplicity(c, seq)
    chosen = []
    for value in np.unique(level[near]):
        members = np.nonzero(near & (level == value))[0]
        chosen += [int(i) for i in members[np.argsort(score[members])][:per_group]]
    for _, _, member in FAMILIES:
        members = np.nonzero(member(c))[0]
        chosen += [int(i) for i in members[np.argsort(score[members])][:per_group]]
    return chosen


def prefer_simpler(ranked: list[dict], objective: Objective, price: float, tokens, seq: int) -> tuple[list[dict], str | None]:
    """Move the simplest layout within SIMPLER_MARGIN of the best to the front; the note says which,
    and by how much it trails."""
    if len(ranked) < 2:
        return ranked, None
    best = ranked[0]
    floor = result_objective(objective, best, price, tokens)
    near = [r for r in ranked if result_objective(objective, r, price, tokens) <= floor * (1 + SIMPLER_MARGIN)]
    chosen = min(near, key=lambda r: (int(simplicity(columns(r["config"]), seq)),
                                      result_objective(objective, r, price, tokens)))
    if chosen is best or int(simplicity(columns(chosen["config"]), seq)) >= int(simplicity(columns(best["config"]), seq)):
        return ranked, None
    gap = result_objective(objective, chosen, price, tokens) / floor - 1
    note = (f"preferred the simpler {label(chosen['config'])} ({_describe(chosen['config'], seq)}) over the "
            f"{gap:.1%} better {label(best['config'])} ({_describe(best['config'], seq)}) on {objective.value}: "
            f"within the {SIMPLER_MARGIN:.0%} margin a simpler layout wins")
    return [chosen] + [r for r in ranked if r is not chosen], note


def alternatives(best: dict, ranked: list[dict], space: dict[str, np.ndarray], reasons: np.ndarray,
                 reason_names: tuple[str, ...], objective: Objective, price: float, tokens,
                 is_moe: bool) -> list[dict]:
    """The best exactly scored layout of each family the recommendation is not in, with why it lost;
    a family with no feasible layout says what rejected its layouts (from the vectorised pass)."""
    out = []
    space_cols = columns(space)
    for name, meaning, member in FAMILIES:
        if name.startswith("expert") and not is_moe:
            continue
        if bool(member(columns(best["config"]))):
            continue
        found = next((r for r in ranked if bool(member(columns(r["config"])))), None)
        if found is not None:
            why = explain_runner_up(best, found, objective).replace("runner-up ", "", 1)
            worse = (result_objective(objective, found, price, tokens)
                     / result_objective(objective, best, price, tokens) - 1)
            out.append({"family": name, "meaning": meaning, "candidate": found, "worse_by": worse,
                        "why": f"best {name} layout: {why}"})
            continue
        in_family = np.asarray(member(space_cols), dtype=bool)
        if not in_family.any():
            continue
        codes, counts = np.unique(reasons[in_family], return_counts=True)
        top = max(zip(counts, codes))
        what = "feasible but not re-scored" if top[1] < 0 else reason_names[top[1]]
        out.append({"family": name, "meaning": meaning, "candidate": None, "worse_by": None,
                    "why": f"no {name} layout ({meaning}) is feasible: {top[0]:,} of its {int(in_family.sum()):,} layouts "
                           f"rejected ({what})"})
    return out
