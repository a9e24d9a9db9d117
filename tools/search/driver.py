"""`search`: every layout of a job, the valid ones that fit, ranked by an objective; numpy-vectorised.

    search(model, gpu, gpus, gbs=..., [seq, tokens, price, precision, objective, top_k, pins, ...]) -> SearchResult

The work is split by job, each in its own module:
 1. search_space: the job, the candidate layouts (one numpy table per GPU count tried), and which
    are valid: validity.RULES, the one table layout.resolve_config also applies, plus the search's
    three policies (tp inside a node, CP_MIN_TOKENS, tp within the key/value heads). A layout is
    counted once, under the first rule it breaks.
 2. search_score: memory (memory.memory_totals_vectorised, the scalar path's core), step time from
    step.py's own terms and the pipeline in closed form, days and cost; layouts over the memory
    (capacity - headroom), the deadline or the budget are rejected by reason. What the request leaves
    open among the recompute modules and (with FP8) the low-precision storage is chosen per layout
    as search_recipes says: the cheapest choice that fits.
 3. search_rank: rank by the objective, re-score the best max(3 top_k, RESCORE_MIN) layouts with the
    exact scalar path (resolve_config + estimate.evaluate, which runs the event-driven pipeline
    simulator) and rank by the exact figures; ZeRO twins collapsed; the Pareto front.
 4. search_explain: layout names, why the runner-up lost, what to change when nothing fits.

search_scalar runs the same space through the exact path layout by layout: the brute-force
reference the tests compare against (same feasible set, same winner on small jobs).
"""

from __future__ import annotations

import time as _time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.config.codes import RECOMPUTE_BY_CODE, RECOMPUTE_CODES, SCHEDULE_BY_CODE, SCHEDULE_CODES
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT
from trainplan.tools.perf.cost import TrainingRun, parse_tokens
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.config.contract import SEARCH_CHOSEN_KNOBS, default_gbs, default_seq
from trainplan.tools.config.job_checks import check_job_numbers
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.estimate import evaluate
from trainplan.tools.config.engine_refusals import module_recompute_message
from trainplan.tools.config.engines import check_engine, engine_knobs, job_refusal_knobs, runs, selects_recompute_modules
from trainplan.tools.config.resolve import beyond_default_modules, is_lora
from trainplan.tools.config.contract import Layout, ParallelConfig
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.config.layout import check_moe_a2a_overlap_job, resolve_config
from trainplan.tools.perf.recompute import modules_of
from trainplan.tools.search.evidence import shape_of
from trainplan.tools.config.plan_defaults import DEFAULT_HEADROOM, EVIDENCE_MARGIN
from trainplan.tools.search.choice import alternatives, prefer_evidence, prefer_simpler, rows_to_rescore
from trainplan.tools.search.explain import explain_runner_up, label, no_feasible_hint
from trainplan.tools.search.rank import best_rows, collapse_twins, objective_of, pareto_front, result_key
from trainplan.tools.core.enums import Objective
from trainplan.tools.search.recipes import chosen_note, recompute_choices, storage_variants
from trainplan.tools.search.memo import remembered
from trainplan.tools.search.request import SearchRequest
from trainplan.tools.search.results import SearchJobSummary, SearchResult
from trainplan.tools.search.score import evaluate_count, fixed_knobs
from trainplan.tools.search.space import (
    FIXED_KNOBS, KNOBS, STORAGE_KNOBS, R_BUDGET, R_DEADLINE, R_MEMORY, REASONS, Pins, SearchJob, enumerate_space, gpu_counts,
    min_gpus, row,
    validity,
)
from trainplan.tools.core.enums import Precision, Recompute, Schedule

__all__ = ["CALCULON_LAYOUTS_PER_S", "KNOBS", "Objective", "Pins", "REASONS", "SearchRequest", "enumerate_space", "exact",
           "explain_runner_up", "label", "no_feasible_hint", "prepare", "search", "validity"]

RESCORE_MIN = 32
"""Layouts re-scored with the exact path: max(3 * top_k, RESCORE_MIN)."""
PARETO_RESCORE = 3
"""Best layouts per GPU count re-scored for the Pareto front."""
CALCULON_LAYOUTS_PER_S = 143.0
"""Calculon's search rate: Turing-530B on 5,128 A100, 8,112 layouts in 57 s (Isaev et al. SC23)."""

_R = {mode: RECOMPUTE_CODES[mode] for mode in Recompute}
_S = {sched: SCHEDULE_CODES[sched] for sched in Schedule}


# --- the request ----------------------------------------------------------------------------------


def _ints(name: str, value, low: int, high: int | None = None) -> tuple[int, ...] | None:
    """A pin: None, one whole number or a list of them, each in [low, high]."""
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple, set, np.ndarray)) else [value]
    if not values:
        raise InputError(f"{name}=[] pins nothing: give a value or leave {name} free")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low or (high is not None and v > high):
            span = f"{low}-{high}" if high is not None else f">= {low}"
            raise InputError(f"{name}={v!r} must be a whole number {span}")
    return tuple(sorted({int(v) for v in values}))


def _codes(name: str, enum: type, value, codes: dict) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple, set)) else [value]
    out = set()
    for v in values:
        try:
            out.add(codes[enum(getattr(v, "value", v))])
        except ValueError:
            options = ", ".join(member.value for member in enum)
            raise InputError(f"{name}='{v}' is not one of: {options}") from None
    return tuple(sorted(out))


def names_lora(method: object) -> bool:
    """Whether a method argument names LoRA or QLoRA (the fine-tuning defaults of seq and gbs then apply);
    an invalid name is refused later, by resolve_config."""
    try:
        return method is not None and is_lora(method)
    except ValueError:
        return False


def prepare(request: SearchRequest) -> tuple[SearchJob, Objective, list[int]]:
    """Check a search request (InputError on bad input) -> (job, objective, GPU counts to try)."""
    r = request
    model_spec, gpu_spec = load_model(r.model), load_gpu(r.gpu)
    # None means the shared default (contract.py): seq and gbs by their rules, the search options below.
    objective, top_k = r.objective or Objective.throughput, r.top_k or 5
    precision = r.precision or Precision.bf16
    allow_cross_node_tp, pareto = bool(r.allow_cross_node_tp), bool(r.pareto)
    for name, value in (("gpus", r.gpus), ("gbs", r.gbs), ("top_k", top_k), ("max_gpus", r.max_gpus), ("seq", r.seq),
                        ("gpus_per_node", r.gpus_per_node)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0):
            raise InputError(f"{name}={value!r} must be a positive whole number")
    headroom_gib = DEFAULT_HEADROOM * gpu_spec.memory_gib if r.headroom_gib is None else r.headroom_gib
    check_job_numbers({"price": r.price, "deadline_days": r.deadline_days, "budget_usd": r.budget_usd,
                       "intra_node_bw": r.intra_node_bw, "inter_node_bw": r.inter_node_bw, "headroom_gib": headroom_gib,
                       "goodput": r.goodput, "tokens": r.tokens, "gpus": r.gpus, "max_gpus": r.max_gpus, "gbs": r.gbs,
                       "seq": r.seq, "tp": r.tp, "pp": r.pp, "cp": r.cp, "ep": r.ep, "vpp": r.vpp, "mbs": r.mbs,
                       "dp_shard": r.dp_shard},
                      gpu_spec.memory_gib)
    margin = r.evidence_margin
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin <= 10):
        raise InputError(f"evidence_margin={margin!r} must be a share from 0 to 10 (0.05: 5%)")
    engine = getattr(r.engine, "value", r.engine)
    if engine is not None:
        check_engine(engine)
    if r.max_gpus is not None and r.max_gpus < r.gpus:
        raise InputError(f"max_gpus={r.max_gpus} is below gpus={r.gpus}: max_gpus is the most GPUs to try")
    try:
        objective_enum = Objective(getattr(objective, "value", objective))
    except ValueError:
        raise InputError(f"objective='{objective}' is not one of: throughput, cost, time") from None
    try:
        precision_enum = Precision(getattr(precision, "value", precision))
    except ValueError:
        raise InputError(f"precision='{precision}' is not one of: bf16, fp8") from None
    gpu_spec.peak_tflops(precision_enum)    # InputError when the GPU has no FP8
    tokens_value = parse_tokens(r.tokens)
    for name, value in (("deadline_days", r.deadline_days), ("budget_usd", r.budget_usd), ("pareto", pareto or None)):
        if value is not None and tokens_value is None:
            raise InputError(f"{name} needs the training tokens: pass tokens (e.g. 15.6T)")
    pins = Pins(
        tp=_ints("tp", r.tp, 1), pp=_ints("pp", r.pp, 1), cp=_ints("cp", r.cp, 1), ep=_ints("ep", r.ep, 1),
        vpp=_ints("vpp", r.vpp, 1), zero=_ints("zero", r.zero, 0, 3), dp_shard=_ints("dp_shard", r.dp_shard, 1),
        mbs=_ints("mbs", r.mbs, 1),
        recompute=_codes("recompute", Recompute, r.recompute, _R),
        schedule=_codes("schedule", Schedule, r.schedule, _S),
    )
    fixed = dict(r.fixed)
    if engine is not None:   # as the engine stores its parameters and runs attention, unless the request says
        for name, value in engine_knobs(engine).items():
            if fixed.get(name) is None and not (name == "fp32_params" and fixed.get("pure_bf16")):
                fixed[name] = value   # a pure-bf16 request keeps no master: the engine's refusal says why
    fine_tune = names_lora(fixed.get("method"))
    seq = int(r.seq or default_seq(model_spec.max_seq_len, fine_tune))
    gbs = int(r.gbs or default_gbs(seq, int(r.gpus), count_params(model_spec).total, fine_tune))
    job = SearchJob(model=model_spec, gpu=gpu_spec, gbs=gbs, seq=seq,
               precision=precision_enum, tokens=tokens_value, price=gpu_spec.price if r.price is None else r.price,
               goodput=DEFAULT_GOODPUT if r.goodput is None else r.goodput, headroom_gib=float(headroom_gib),
               allow_cross_node_tp=allow_cross_node_tp, deadline_days=r.deadline_days, budget_usd=r.budget_usd,
               gpus_per_node=r.gpus_per_node, intra_node_bw=r.intra_node_bw, inter_node_bw=r.inter_node_bw,
               pins=pins, engine=engine,
               evidence_margin=EVIDENCE_MARGIN if margin is None else float(margin),
               fixed=_fixed(model_spec, seq, precision_enum, gpu_spec, fixed))
    given = {k: v for k, v in fixed.items() if v is not None}
    if not selects_recompute_modules(engine) and beyond_default_modules(job.recompute_modules):
        raise InputError(module_recompute_message(engine))
    ladder, options = recompute_choices(job, job.recompute_modules if "recompute_modules" in given else None)
    job = replace(job, storage_variants=storage_variants(job, given), recompute_ladder=ladder,
                  recompute_options=options, chosen=tuple(k for k in SEARCH_CHOSEN_KNOBS if k not in given))
    return job, objective_enum, gpu_counts(int(r.gpus), r.max_gpus, job.node, min_gpus(model_spec, gpu_spec))


def _fixed(model, seq: int, precision: Precision, gpu, given: dict) -> dict:
    """The fixed Layout knobs (search_space.FIXED_KNOBS), resolved by resolve_config itself on a
    one-GPU probe layout (InputError on a bad value); sequence parallelism, TP overlap and expert TP,
    which depend on each layout's tp, as given (search_score.fixed_knobs resolves them per layout)."""
    unknown = sorted(set(given) - set(FIXED_KNOBS))
    if unknown:
        raise InputError(f"unknown search argument(s) {', '.join(unknown)}: the fixed layout knobs are "
                         f"{', '.join(FIXED_KNOBS)}")
    given = {k: v for k, v in given.items() if v is not None}
    # moe_a2a_overlap's conditions on ep, schedule and recompute are per layout (validity.RULES): the
    # one-GPU probe checks only what the whole job must have for it.
    overlap = bool(given.pop("moe_a2a_overlap", False))
    probe = resolve_config(model, 1, seq=seq, precision=precision, recompute=Recompute.selective,
                           fp8_supported=gpu.fp8_tflops is not None, **given)
    if overlap:
        check_moe_a2a_overlap_job(model, probe.dispatcher)
    fixed = {k: getattr(probe, k) for k in FIXED_KNOBS}
    fixed["moe_a2a_overlap"] = overlap
    for name in ("sequence_parallel", "tp_comm_overlap", "etp"):   # resolved per layout (they depend on tp)
        fixed[name] = given.get(name, Layout.model_fields[name].default)
    return fixed


def _job_summary(job: SearchJob, gpus: int, max_gpus: int | None, counts: list[int], top_k: int) -> SearchJobSummary:
    return SearchJobSummary(**{"model": job.model.name, "gpu": job.gpu.name, "gpus": int(gpus), "max_gpus": max_gpus,
            "gpu_counts": counts, "gbs": job.gbs, "seq": job.seq, "tokens": job.tokens, "price": job.price,
            "precision": job.precision.value, "goodput": job.goodput, "top_k": top_k, "pins": _pins_dict(job.pins),
            "deadline_days": job.deadline_days, "budget_usd": job.budget_usd, "headroom_gib": job.headroom_gib,
            "allow_cross_node_tp": job.allow_cross_node_tp, "gpus_per_node": job.node, "engine": job.engine,
            "fixed": {k: getattr(v, "value", v) if not isinstance(v, tuple) else [getattr(m, "value", m) for m in v]
                      for k, v in job.fixed.items() if k not in job.chosen},
            "chosen_per_layout": {
                "knobs": list(job.chosen),
                "recompute_ladder": [[RECOMPUTE_BY_CODE[code].value, [m.value for m in modules_of(mask)]]
                                     for code, mask in job.recompute_ladder],
                "storage_variants": [dict(variant) for variant in job.storage_variants]}})


def _exact_failure(job: SearchJob, result: dict) -> str | None:
    """Why an exactly scored layout is out: memory, deadline or budget; None when it is in."""
    if not result["fits"]:
        return R_MEMORY
    if job.deadline_days is not None and result["training"]["days"] > job.deadline_days:
        return R_DEADLINE
    if job.budget_usd is not None and result["training"]["cost_usd"] > job.budget_usd:
        return R_BUDGET
    return None


def _finish(job: SearchJob, objective: Objective, out: dict, scored: list[dict], top_k: int, pareto: bool,
            start: float, space_reasons: tuple[dict, np.ndarray] | None = None) -> SearchResult:
    """Rank the exactly scored layouts and add candidates, the simpler-layout preference, the
    structural alternatives, notes, the front and the timing."""
    ranked = sorted(scored, key=lambda r: result_key(objective, r, job.price, job.tokens))
    ranked = collapse_twins(ranked, objective, job.price, job.tokens)
    shape = shape_of(job.model, job.seq, job.node)
    # The simplest near the best, then the evidence gate on that pick; when the gate moves the lead
    # inside the evidence, the simplest near the new lead.
    ranked, preferred = prefer_simpler(ranked, objective, job.price, job.tokens, shape)
    lead = ranked[0] if ranked else None
    ranked, evidence = prefer_evidence(ranked, objective, job.price, job.tokens, shape, job.evidence_margin)
    if ranked and ranked[0] is not lead:
        ranked, preferred = prefer_simpler(ranked, objective, job.price, job.tokens, shape)
    candidates = ranked[:top_k]
    out["candidates"] = candidates
    out["evidence_margin"] = job.evidence_margin
    out["evidence"] = evidence
    out["rejected"] = dict(sorted(out["rejected"].items(), key=lambda kv: -kv[1]))
    notes = [n for n in (evidence, preferred) if n]
    out["chosen"] = chosen_note(job, candidates[0]["config"]) if candidates else None
    if out["chosen"]:
        notes.append(out["chosen"])
    out["alternatives"] = []
    if candidates and space_reasons is not None:
        out["alternatives"] = alternatives(candidates[0], ranked, *space_reasons, objective, job)
        notes += [alt["why"] for alt in out["alternatives"]]
    if len(candidates) >= 2:
        notes.append(explain_runner_up(candidates[0], candidates[1], objective))
    if not candidates:
        notes.append(no_feasible_hint(out["rejected"]))
    if pareto:
        points: dict[int, dict] = {}
        for result in ranked:
            n = result["config"]["gpus"]
            if n not in points or result["time"]["step_s"] < points[n]["time"]["step_s"]:
                points[n] = result
        out["pareto"] = pareto_front([
            {"gpus": n, "days": r["training"]["days"], "cost_usd": r["training"]["cost_usd"],
             "gpu_hours": r["training"]["gpu_hours"], "tokens_per_s": r["time"]["tokens_per_s"],
             "config": r["config"]} for n, r in points.items()])
    out["notes"] = notes
    out["wall_s"] = _time.perf_counter() - start
    out["layouts_per_s"] = out["evaluated"] / out["wall_s"] if out["wall_s"] > 0 else float("inf")
    return SearchResult(**out)


OFFLOAD_NOTE = ("no layout fits in GPU memory alone: the search offloaded the optimizer states and step to the CPU "
                "(ZeRO-Offload, optimizer_offload), timed by the host link (PCIe) and the CPU's Adam "
                "(time.breakdown optimizer)")
"""The note of a search that found a fit only with the optimizer offloaded (see search)."""


def search(model: str, gpu: str, gpus: int, **kwargs) -> SearchResult:
    """The best layouts for a job (_search_once); the keywords are SearchRequest's (tools/search/request.py),
    made into one request here. When none fits in GPU memory and the request left optimizer_offload open,
    the search runs again with the optimizer states and step on the CPU (ZeRO-Offload, timed by
    tools/perf/offload.py) and says so in its notes: offload is what fits, so an expert would run it
    rather than give up."""
    request = SearchRequest.of(model, gpu, gpus, **kwargs)
    result = _search_once(request)
    if result.candidates or request.fixed.get("optimizer_offload") is not None or R_MEMORY not in result.rejected:
        return result
    if request.fixed.get("pure_bf16") or request.fixed.get("optimizer_8bit"):
        return result   # the offloading engines' CPU Adam keeps an fp32 master and 32-bit moments: not these states
    # Every engine runs ZeRO-Offload inside a ZeRO stage (tools/config/engines.py ENGINE_REFUSALS): stage 1 or more.
    zero = request.zero if request.zero is not None else [1, 2, 3]
    offloaded = _search_once(replace(request, zero=zero, fixed={**request.fixed, "optimizer_offload": True}))
    if not offloaded.candidates:
        return result
    offloaded.notes = [OFFLOAD_NOTE, *offloaded.notes]
    return offloaded


def _search_once(request: SearchRequest) -> SearchResult:
    """The best layouts for a job, best first; a pin (tp=8, schedule='1f1b', or a list of values)
    fixes a knob, None leaves it free. See the module docstring for the space, rules and time model.
    headroom_gib None keeps plan_defaults.DEFAULT_HEADROOM of the GPU's memory free; engine keeps only
    layouts that engine runs (export.support).

    Returns a SearchResult (tools/search/results.py): job, objective, candidates (estimate results in
    their JSON form, best first, at most top_k; the first is the simplest within SIMPLER_MARGIN of the
    best), alternatives (the best of each structurally different family, with why it lost), evaluated,
    feasible, rejected {reason: count}, chosen (what the search chose for the first candidate among
    the knobs the request left open, search_recipes; None: nothing), notes, wall_s, layouts_per_s[, pareto].
    """
    start = _time.perf_counter()
    job, objective_enum, counts = prepare(request)
    top_k, pareto = request.top_k, request.pareto
    width = max(3 * top_k, RESCORE_MIN)
    # Within one plan (memo.layout_memo) a search that differs from an earlier one only in top_k, with the same
    # re-score width, ranks the same scored layouts: it is ranked again from them (_finish), not searched again.
    scored = remembered(("search", repr(replace(request, top_k=None)), width),
                        lambda: _scored(job, objective_enum, counts, width, pareto, start))
    out = {"job": _job_summary(job, request.gpus, request.max_gpus, counts, top_k), "objective": objective_enum.value,
           "candidates": [], "evaluated": scored["evaluated"], "feasible": scored["feasible"],
           "rejected": scored["rejected"]}
    return _finish(job, objective_enum, out, scored["results"], top_k, pareto,
                   _time.perf_counter() - scored["wall_s"], scored["space_reasons"])


def _scored(job: SearchJob, objective_enum: Objective, counts: list[int], width: int, pareto: bool,
            start: float) -> dict:
    """The vectorised pass over every count and the exact re-score of the best `width` distinct layouts (and,
    for the front, the best few per GPU count): evaluated, feasible, rejected, results (the exact results that
    fit), space_reasons (the space and each layout's rejection code) and wall_s since `start`."""
    rejected: dict[str, int] = {}
    evaluated = 0
    per_count, spaces, reasons = [], [], []
    for n in counts:
        result = evaluate_count(job, n, lambda step_s, gpus, days, cost: objective_of(
            objective_enum, step_s, gpus, days, cost, job.price, job.tokens), _engine_filter(job))
        spaces.append(result["space"])
        reasons.append(result["reason"])
        evaluated += result["reason"].size
        for code, num in zip(*np.unique(result["reason"][result["reason"] >= 0], return_counts=True)):
            rejected[REASONS[code]] = rejected.get(REASONS[code], 0) + int(num)
        per_count.append(result["rows"])
    if not evaluated:
        _no_split(job, counts)
    rows = {k: np.concatenate([r[k] for r in per_count]) for k in per_count[0]}
    feasible = int(rows["score"].size)

    chosen = best_rows(rows, width) + rows_to_rescore(rows, shape_of(job.model, job.seq, job.node), job.evidence_margin)
    if pareto:
        offset = 0
        for r in per_count:
            chosen += [offset + i for i in best_rows(r, PARETO_RESCORE)]
            offset += r["score"].size
    scored = []
    for i in dict.fromkeys(chosen):   # each once, in order
        result = exact(job, row(rows, i))
        failure = _exact_failure(job, result)
        if failure:   # the vectorised model let it through; the exact path has the last word
            feasible -= 1
            rejected[failure] = rejected.get(failure, 0) + 1
        else:
            scored.append(result)
    space = {k: np.concatenate([sp[k] for sp in spaces]) for k in KNOBS}
    return {"evaluated": int(evaluated), "feasible": feasible, "rejected": rejected, "results": scored,
            "space_reasons": (space, np.concatenate(reasons)), "wall_s": _time.perf_counter() - start}


def _engine_filter(job: SearchJob):
    """The rows the job's engine runs (tools/config/engines.py runs), or None when any engine will do."""
    if job.engine is None:
        return None

    def runs_rows(rows: dict[str, np.ndarray]) -> np.ndarray:
        dp = np.maximum(rows["gpus"] // (rows["tp"] * rows["pp"] * rows["cp"]), 1)
        knobs = SimpleNamespace(**{k: rows[k] for k in ("tp", "pp", "cp", "ep", "zero", "schedule", "dp_shard", "vpp")},
                                dp=dp,
                                recompute_modules=0,   # recipes.recompute_choices offers no module set it refuses
                                **job_refusal_knobs(job))
        return runs(job.engine, job.model, knobs)
    return runs_rows


def exact(job: SearchJob, layout: dict) -> dict:
    """The scalar path for one layout: resolve_config (raises InputError if invalid) + evaluate."""
    cfg, cluster = _resolved(job, layout)
    run = TrainingRun(job.tokens, job.price, job.goodput)
    return remembered((repr(job.model), repr(cluster), repr(cfg), repr(run), job.headroom_gib), lambda: evaluate(
        job.model, cluster, cfg, run, headroom_gib=job.headroom_gib).model_dump(mode="json"))


def _resolved(job: SearchJob, layout: dict) -> tuple[ParallelConfig, ClusterSpec]:
    """The layout's validated config (resolve_config; raises InputError if invalid) and its cluster."""
    recompute = RECOMPUTE_BY_CODE[layout["recompute"]]
    storage = {k: layout[k] for k in STORAGE_KNOBS if k in layout}
    cfg = resolve_config(job.model, layout["gpus"], tp=layout["tp"], pp=layout["pp"], cp=layout["cp"],
                         ep=layout["ep"], vpp=layout["vpp"], zero=layout["zero"], dp_shard=layout["dp_shard"],
                         mbs=layout["mbs"], gbs=job.gbs,
                         seq=job.seq, recompute=recompute, schedule=SCHEDULE_BY_CODE[layout["schedule"]],
                         precision=job.precision, fp8_supported=job.gpu.fp8_tflops is not None,
                         **fixed_knobs(job, layout["tp"], recompute, layout.get("modules"), storage))
    return cfg, job.cluster(layout["gpus"])


def _no_split(job: SearchJob, counts: list[int]) -> None:
    pinned = ", ".join(f"{k}={v}" for k, v in _pins_dict(job.pins).items() if k in ("tp", "pp", "cp"))
    raise InputError(f"no split {pinned} divides gpus={', '.join(map(str, counts))}: "
                     f"choose tp, pp and cp whose product divides the GPU count")


def _pins_dict(pins: Pins) -> dict:
    """Pinned knobs only, each as its value (or list of values), in the contract's vocabulary (tools/config/contract.py)."""
    out = {}
    for name, values in vars(pins).items():
        if values is None:
            continue
        if name == "recompute":
            values = [RECOMPUTE_BY_CODE[c].value for c in values]
        elif name == "schedule":
            values = [SCHEDULE_BY_CODE[c].value for c in values]
        out[name] = values[0] if len(values) == 1 else list(values)
    return out


