"""The offline planner's searches: one search of a job's layouts (tools/search/driver.py), the ladder that
relaxes the job's constraints until some layout fits, and the re-evaluation of a layout for the job.

The ladder (search_relaxing) first asks for layouts that leave PLAN_HEADROOM of the GPU's memory free and meet
the deadline and budget; when none does, it drops the deadline and budget (a risk, with the GPU count that would
meet them), then half the headroom, then all of it (an assumption). A count sized for a deadline first asks for
layouts that finish plan_defaults.DEADLINE_MARGIN early.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainplan.tools.config.contract import FINE_TUNING_KNOBS
from trainplan.tools.config.plan_defaults import DEADLINE_MARGIN, DEFAULT_HEADROOM
from trainplan.tools.perf.estimate import estimate
from trainplan.tools.search.results import SearchResult
from trainplan.agent.registry import estimate_kwargs

from . import sizing
from .request import PINS

__all__ = ["PLAN_HEADROOM", "SEARCH_TOP_K", "RelaxedSearch", "evaluate_for_job", "search_job", "search_relaxing",
           "search_summary"]

ALTERNATIVES = 3
"""Alternatives a report shows: the best of other structural families, then runners-up."""
SEARCH_TOP_K = 1 + ALTERNATIVES
PLAN_HEADROOM = DEFAULT_HEADROOM
"""Share of GPU memory the offline planner keeps free when some layout allows it: the one default
of search and plan (tools.plan_defaults), also the report's headroom risk threshold."""


@dataclass(frozen=True)
class RelaxedSearch:
    """The search the ladder settled on, and what it relaxed to get there (in the order it did)."""

    result: SearchResult
    assumptions: list[str]
    risks: list[str]


def evaluate_for_job(config: dict, job: dict, timeline: bool = False) -> dict:
    """The estimate of a config for the job's model/gpu names, tokens, price and goodput."""
    kwargs = estimate_kwargs(config)
    kwargs.update(model=job["model"], gpu=job["gpu"])
    return estimate(**kwargs, tokens=job["tokens"], price=job["price"], goodput=job["goodput"],
                    timeline=timeline).model_dump(mode="json")


def search_job(job: dict, top_k: int, with_limits: bool = True, headroom_gib: float = 0.0,
               max_gpus: int | None = None, engine: str | None = None) -> SearchResult:
    """The search of the job's layouts, its pins and fine-tuning knobs fixed (with_limits: its deadline and budget)."""
    from trainplan.tools.search.driver import search

    kwargs: dict[str, Any] = {pin: job[pin] for pin in PINS if job[pin] is not None}
    kwargs.update({k: job[k] for k in FINE_TUNING_KNOBS if job.get(k) is not None})   # fixed knobs
    if with_limits:
        kwargs.update({k: job[k] for k in ("deadline_days", "budget_usd") if job[k] is not None})
    return search(job["model"], job["gpu"], job["gpus"], gbs=job["gbs"], seq=job["seq"], tokens=job["tokens"],
                  price=job["price"], precision=job["precision"], objective=job["objective"], top_k=top_k,
                  goodput=job["goodput"], headroom_gib=headroom_gib, gpus_per_node=job["gpus_per_node"],
                  max_gpus=max_gpus, engine=engine, **kwargs)


def search_summary(result: SearchResult) -> dict:
    """The report's `search` section (agent/report.py PlanReport.search)."""
    return {"objective": result.objective, "evaluated": result.evaluated, "feasible": result.feasible,
            "rejected": dict(result.rejected), "wall_s": result.wall_s, "evidence_margin": result.evidence_margin,
            "evidence": result.evidence}


def search_relaxing(job: dict, search_fn: sizing.Search, *, counted: bool, capacity_gib: float,
                    engine: str | None) -> RelaxedSearch:
    """The job's search, its constraints relaxed step by step until a layout fits (the module's ladder).
    counted: the request gave the GPU count (else agent/sizing.py chose it); capacity_gib: one GPU's memory."""
    headroom = PLAN_HEADROOM * capacity_gib
    assumptions: list[str] = []
    risks: list[str] = []
    limited = bool(job["deadline_days"] or job["budget_usd"])
    result = None
    if not counted and job["deadline_days"]:
        # The count was sized to finish DEADLINE_MARGIN early: the layout keeps that margin where one does
        # (the search's own ranking may otherwise pick a slower layout that only meets the deadline).
        result = search_job({**job, "deadline_days": job["deadline_days"] * (1 - DEADLINE_MARGIN)}, SEARCH_TOP_K,
                            headroom_gib=headroom, engine=engine)
    if result is None or not result.candidates:
        result = search_job(job, SEARCH_TOP_K, headroom_gib=headroom, engine=engine)
    if not result.candidates and limited:
        # a count chosen for a budget was the cheapest already: choose_count said so
        would = sizing.what_would_meet(search_fn, job, headroom) if counted or job["deadline_days"] else None
        risks.append(f"no layout on {job['gpus']:,} GPUs meets {sizing.limits_text(job)}: the plan below is the best "
                     f"without it" + (f"; {would}" if would else ""))
        limited = False
        result = search_job(job, SEARCH_TOP_K, with_limits=False, headroom_gib=headroom, engine=engine)
    if result.candidates:
        assumptions.append(f"layouts keep at least {PLAN_HEADROOM:.0%} of GPU memory free ({headroom:.2f} of "
                           f"{capacity_gib:.2f} GiB) for fragmentation and spikes")
    else:  # keep what headroom the GPUs allow: half of it, else none (a layout at 98% of memory is the last resort)
        for fraction in (PLAN_HEADROOM / 2, 0.0):
            result = search_job(job, SEARCH_TOP_K, with_limits=limited, headroom_gib=fraction * capacity_gib,
                                engine=engine)
            if result.candidates:
                assumptions.append(f"no layout leaves {PLAN_HEADROOM:.0%} of GPU memory free: the plan uses the best "
                                   + (f"that leaves {fraction:.0%} ({fraction * capacity_gib:.2f} GiB)" if fraction
                                      else "that fits at all"))
                break
    return RelaxedSearch(result=result, assumptions=assumptions, risks=risks)
