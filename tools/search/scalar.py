"""The brute-force reference of the search (tools/search/driver.py): every layout of the same space through the
exact scalar path, layout by layout, ranked the same way; for tests and benchmarks."""

from __future__ import annotations

import time as _time

import numpy as np

from trainplan.tools.config.validity import Knobs, broken_policy
from trainplan.tools.core.errors import InputError
from trainplan.tools.core.enums import Schedule
from trainplan.tools.perf.memory import memory_breakdown
from trainplan.tools.perf.pipeline import check_schedule
from trainplan.tools.search.driver import (_engine_filter, _exact_failure, _finish,
                                           _job_summary, _no_split, _resolved, exact, prepare)
from trainplan.tools.search.request import SearchRequest
from trainplan.tools.search.results import SearchResult
from trainplan.tools.search.space import R_ENGINE, R_MEMORY, STORAGE_KNOBS, SearchJob, enumerate_space, row

__all__ = ["R_SCALAR_INVALID", "scalar_policy_reason", "search_scalar"]

R_SCALAR_INVALID = "invalid layout (resolve_config or the pipeline simulator)"
"""search_scalar's one key for every layout the scalar path refuses with an InputError."""


def search_scalar(model: str, gpu: str, gpus: int, **kwargs) -> SearchResult:
    """The brute-force reference: every layout of the same space through the exact scalar path
    (resolve_config + estimate.evaluate with the event-driven simulator), ranked the same way.
    Same arguments and result shape as search; slow (tens of layouts per second); for tests and
    benchmarks. Invalid layouts count under R_SCALAR_INVALID, search's policies under theirs."""
    start = _time.perf_counter()
    request = SearchRequest.of(model, gpu, gpus, **kwargs)
    top_k, pareto = request.top_k, request.pareto
    job, objective_enum, counts = prepare(request)
    rejected: dict[str, int] = {}
    evaluated, scored = 0, []
    for n in counts:
        space = enumerate_space(job.model, n, job.gbs, job.seq, job.node, job.allow_cross_node_tp, job.pins,
                                job.recompute_options)
        for i in range(space["tp"].size):
            evaluated += 1
            layout = row(space, i)
            reason = scalar_policy_reason(job, layout)
            engine_ok = _engine_filter(job)
            if reason is None and engine_ok is not None and not engine_ok({k: np.array([v]) for k, v in layout.items()})[0]:
                reason = R_ENGINE
            if reason is None:
                try:
                    result, reason = _first_fitting(job, layout)
                except InputError:
                    reason = R_SCALAR_INVALID
            if reason:
                rejected[reason] = rejected.get(reason, 0) + 1
            else:
                scored.append(result)
    if not evaluated:
        _no_split(job, counts)
    out = {"job": _job_summary(job, gpus, request.max_gpus, counts, top_k), "objective": objective_enum.value,
           "candidates": [], "evaluated": evaluated, "feasible": len(scored), "rejected": rejected}
    return _finish(job, objective_enum, out, scored, top_k, pareto, start)


def _first_fitting(job: SearchJob, layout: dict) -> tuple[dict | None, str | None]:
    """The exact result of a layout at the first recompute step (job.recompute_ladder, when the
    layout is its first step) and storage variant (job.storage_variants) that fits (None when none does), and
    why it is out (None: it is in): search_score.fit_recipes's choice, layout by layout."""
    steps = job.recompute_ladder if job.recompute_ladder[:1] == ((layout["recompute"], layout["modules"]),) \
        else ((layout["recompute"], layout["modules"]),)
    stored = {k: int(getattr(job, k)) for k in STORAGE_KNOBS}
    tried = [{**layout, "recompute": code, "modules": mask, **stored, **dict(variant)}
             for code, mask in steps for variant in job.storage_variants]
    # Memory first: a step that does not fit is passed over, so only the one kept is timed (exact's fits is
    # this same memory check). The simulator's refusals depend on pp, micro-batches and vpp, which every step
    # shares: a layout that fits at no step is checked against them (InputError: invalid) and is out for
    # memory without a step time, as exact's result would say.
    kept = next((step for step in tried if _fits_exact(job, step)), None)
    if kept is None:
        cfg, _ = _resolved(job, tried[-1])
        check_schedule(cfg.schedule if cfg.pp > 1 else Schedule.one_f_one_b, cfg.pp, cfg.num_microbatches, cfg.vpp)
        return None, R_MEMORY
    result = exact(job, kept)
    return result, _exact_failure(job, result)


def scalar_policy_reason(job: SearchJob, layout: dict) -> str | None:
    """The search's own rules (validity's policies), which resolve_config does not hold."""
    knobs = Knobs(gpus=layout["gpus"], tp=layout["tp"], pp=layout["pp"], cp=layout["cp"], ep=layout["ep"],
                  vpp=layout["vpp"], mbs=layout["mbs"], seq=job.seq, schedule=layout["schedule"])
    return broken_policy(job.model, knobs, job.policies)


def _fits_exact(job: SearchJob, layout: dict) -> bool:
    """exact(job, layout)["fits"] without timing the step: the scalar path's memory alone."""
    cfg, cluster = _resolved(job, layout)
    return memory_breakdown(job.model, cfg, cluster.gpu, headroom_gib=job.headroom_gib).fits


