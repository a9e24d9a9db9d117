"""What the search recommends among near-equals, and the structurally different layouts it shows.

- Inside the evidence unless worth it: a layout with departures from what the evals validate
  (tools/search/evidence.py, the one definition) is recommended only when it beats the best layout without
  any by the evidence margin (evidence.EVIDENCE_MARGIN, 5%, SearchOptions.evidence_margin); otherwise
  the best layout inside the evidence leads and the other is shown with its departures as its risk.
- Simpler within a margin: among the exactly scored layouts whose objective is within
  plan_defaults.SIMPLER_MARGIN of the leader and that depart no further from the evidence, the
  search recommends the simplest: fewer parallel dimensions (tp, pp, cp, ep above 1) plus
  departures, counted alike; ties go to the objective. It says so, with the difference.
- Structural alternatives: the best layout of each family below that the recommendation is not
  in (Megatron-style TP x PP, FSDP/ZeRO-3 only, context-parallel, TP without
  pipeline parallelism, and for MoE expert parallelism without TP), each with why it lost in numbers, or
  why no layout of the family is feasible.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from trainplan.tools.search.evidence import EVIDENCE_MARGIN, Shape, columns, departures_of, distance
from trainplan.tools.config.plan_defaults import SIMPLER_MARGIN
from trainplan.tools.search.explain import explain_runner_up, label
from trainplan.tools.search.rank import result_objective
from trainplan.tools.search.space import REASONS, SearchJob
from trainplan.tools.core.enums import Objective

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


def parallel_dims(c: SimpleNamespace):
    return sum((getattr(c, k) > 1).astype(int) for k in ("tp", "pp", "cp", "ep"))


def departures(c: SimpleNamespace, shape: Shape):
    """Departures from the evals' evidence (tools/search/evidence.py), counted."""
    return distance(c, shape)


def simplicity(c: SimpleNamespace, shape: Shape):
    """Smaller is simpler: parallel dimensions plus departures, each a moving part a practitioner has
    to get right (ties go to the objective)."""
    return parallel_dims(c) + departures(c, shape)


def _describe(config: dict, shape: Shape) -> str:
    dims = int(parallel_dims(columns(config)))
    return ", ".join([f"{dims} parallel dimension{'s' if dims != 1 else ''}", *departures_of(config, shape, cite=False)])


def _distance(result: dict, shape: Shape) -> int:
    return int(departures(columns(result["config"]), shape))


def rows_to_rescore(rows: dict[str, np.ndarray], shape: Shape, margin: float = EVIDENCE_MARGIN,
                    per_group: int = 3, slack: float = 0.10) -> list[int]:
    """Row indices worth an exact score for the preferences and the alternatives: the best few of each
    simplicity level within SIMPLER_MARGIN + slack (the closed form's error) of the best score, the
    best few inside the evidence, and the best few of each family."""
    if not rows["score"].size:
        return []
    c = columns(rows)
    score = rows["score"]
    level, inside = simplicity(c, shape), departures(c, shape) == 0
    chosen = [int(i) for i in np.nonzero(inside)[0][np.argsort(score[inside])][:per_group]]
    near = score <= score[inside].min() * (1 + SIMPLER_MARGIN + slack) if inside.any() else \
        score <= score.min() * (1 + max(margin, SIMPLER_MARGIN) + slack)
    near |= score <= score.min() * (1 + SIMPLER_MARGIN + slack)
    for value in np.unique(level[near]):
        members = np.nonzero(near & (level == value))[0]
        chosen += [int(i) for i in members[np.argsort(score[members])][:per_group]]
    for _, _, member in FAMILIES:
        members = np.nonzero(member(c))[0]
        chosen += [int(i) for i in members[np.argsort(score[members])][:per_group]]
    return chosen


def prefer_evidence(ranked: list[dict], objective: Objective, price: float, tokens, shape: Shape,
                    margin: float = EVIDENCE_MARGIN) -> tuple[list[dict], str | None]:
    """Move the best layout inside the evals' evidence to the front unless the leader, outside it,
    beats it by `margin` on the objective; the note says which, why, and by how much."""
    if not ranked or _distance(ranked[0], shape) == 0:
        return ranked, None
    best = ranked[0]
    inside = next((r for r in ranked if _distance(r, shape) == 0), None)
    outside = "; ".join(departures_of(best["config"], shape, cite=False))
    if inside is None:
        return ranked, (f"no exactly scored layout that fits and meets the job's limits is inside the evals' evidence: "
                        f"{label(best['config'])} leads outside it ({outside})")
    gain = result_objective(objective, inside, price, tokens) / result_objective(objective, best, price, tokens) - 1
    if gain >= margin:
        return ranked, (f"recommended {label(best['config'])} outside the evals' evidence ({outside}): it beats the "
                        f"best layout inside it, {label(inside['config'])}, by {gain:.1%} on {objective.value}, over "
                        f"the {margin:.0%} margin such a layout must clear; a risk, shown with the alternative")
    note = (f"ranked {label(inside['config'])}, inside the evals' evidence, ahead of {label(best['config'])}, "
            f"{gain:.1%} better on {objective.value} but outside it ({outside}): a layout outside the evidence "
            f"must win by at least {margin:.0%}")
    return [inside] + [r for r in ranked if r is not inside], note


def prefer_simpler(ranked: list[dict], objective: Objective, price: float, tokens, shape: Shape) -> tuple[list[dict], str | None]:
    """Move the simplest layout within SIMPLER_MARGIN of the leader, and no further from the evidence,
    to the front; the note says which, and by how much it trails."""
    if len(ranked) < 2:
        return ranked, None
    best = ranked[0]
    floor = result_objective(objective, best, price, tokens)
    far = _distance(best, shape)
    near = [r for r in ranked if result_objective(objective, r, price, tokens) <= floor * (1 + SIMPLER_MARGIN)
            and _distance(r, shape) <= far]
    chosen = min(near, key=lambda r: (int(simplicity(columns(r["config"]), shape)),
                                      result_objective(objective, r, price, tokens)))
    if chosen is best or int(simplicity(columns(chosen["config"]), shape)) >= int(simplicity(columns(best["config"]), shape)):
        return ranked, None
    gap = result_objective(objective, chosen, price, tokens) / floor - 1
    note = (f"preferred the simpler {label(chosen['config'])} ({_describe(chosen['config'], shape)}) over the "
            f"{gap:.1%} better {label(best['config'])} ({_describe(best['config'], shape)}) on {objective.value}: "
            f"within the {SIMPLER_MARGIN:.0%} margin a simpler layout wins")
    return [chosen] + [r for r in ranked if r is not chosen], note


def alternatives(best: dict, ranked: list[dict], space: dict[str, np.ndarray], reasons: np.ndarray,
                 objective: Objective, job: SearchJob) -> list[dict]:
    """The best exactly scored layout of each family the recommendation is not in, with why it lost;
    a family with no feasible layout says what rejected its layouts (from the vectorised pass: `reasons`
    index space.REASONS)."""
    price, tokens, is_moe, reason_names = job.price, job.tokens, job.model.is_moe, REASONS
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
