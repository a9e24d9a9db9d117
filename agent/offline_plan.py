"""The offline planner: a complete request in, a PlanReport out, with no LLM and no network.

It fills the defaults (agent/job_defaults.py, stated as assumptions), sizes an open GPU count
(agent/sizing.py), searches the layouts through the constraint-relaxation ladder (agent/plan_search.py;
only layouts the requested engine runs, when one is named), re-runs `estimate` with timeline=True on the
winner (the simplest within plan_defaults.SIMPLER_MARGIN of the best) and on the best structurally different
layouts (search_choice.FAMILIES), and writes the report. offline_report picks the engine the plan is scored and
launched for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trainplan.prompts import render
from trainplan.tools.hardware import catalog
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.config import engines as engine_registry
from trainplan.tools.config.contract import Layout
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.core.errors import InputError
from trainplan.tools.engines import ExportError
from trainplan.tools.engines.support import refuse
from trainplan.tools.search.memo import layout_memo
from trainplan.tools.search.results import SearchResult
from trainplan.tools.config.plan_defaults import EVIDENCE_MARGIN
from trainplan.agent.registry import estimate_kwargs

from . import advice, method_choice, sizing, tradeoffs
from .job_defaults import (OBJECTIVE, bound_open_fine_tune, complete_request, default_gbs_note, gpus_that_fit,
                           is_fine_tune, probe_fine_tune_seq, shown_job)
from .plan_search import (ALTERNATIVES, PLAN_HEADROOM, evaluate_for_job, search_job, search_relaxing,
                          search_summary)
from .report import GpuCountTradeoffs, LayoutChoice, PlanReport, ReportNotes, ReportOrigin, build_report
from .request import PlanRequest

__all__ = ["ADAPTER_ENGINE", "ADAPTER_FALLBACK", "PLAN_ENGINES", "distinct_results", "offline_report", "plan_offline"]

PLAN_ENGINES = engine_registry.PLAN_ENGINES
"""A request that names no engine is planned once for each of these, each scored with its own kernels
and limits (Megatron-LM: Transformer Engine attention, bf16 parameters; torchtitan: SDPA's
FlashAttention-2, FSDP2's fp32 parameters; tools/config/engines.py plan_candidate), and the engine whose best layout wins
by the objective carries the plan: one engine per plan, end to end."""
ADAPTER_ENGINE = engine_registry.ADAPTER_ENGINE
"""The engine of a LoRA/QLoRA request that names none: the offline search keeps the layouts it runs
(data parallel with ZeRO/FSDP, as practitioners fine-tune with PEFT) when one fits, and the plan carries
its launch settings (Megatron's arguments have no adapters)."""
ADAPTER_FALLBACK = engine_registry.ADAPTER_FALLBACK
FALLBACK_ENGINES = tuple(e for e in engine_registry.LAUNCH_FALLBACK if e not in PLAN_ENGINES)
"""The launch fallbacks that are not plan candidates, in order: a request no PLAN_ENGINES engine fits is planned
with the first of them whose own layouts fit (_best_engine_plan)."""


def _limit_of(request: PlanRequest, recommended: dict) -> dict | None:
    """The limit the request asked (request.solve), tools/search/limits.py's answer: the catalog GPUs the job's
    leanest layout fits on (job_defaults.gpus_that_fit, as the GPU was chosen); the longest seq (at micro-batch 1)
    or the largest mbs of the recommended layout with full recompute, the recompute that fits the most (the pins
    of the request kept); and, under kept_free, the same limit keeping PLAN_HEADROOM of the memory free."""
    if request.solve is None or recommended is None:
        return None
    if request.solve == "gpu":   # every catalog GPU with the leanest layout, as the GPU was chosen
        return gpus_that_fit(request)
    from trainplan.tools.search.limits import solve

    config = estimate_kwargs(recommended["config"])
    config.pop("gpu", None)
    model, gpus = config.pop("model"), config.pop("gpus")
    if request.solve in ("seq", "mbs") and request.recompute is None:
        config.update(recompute="full", recompute_modules=None)
    if request.solve == "seq" and request.mbs is None:
        config["mbs"] = 1
    answer = solve(request.solve, model, recommended["config"]["gpu"], gpus, **config)
    if request.solve != "gpu":
        answer["layout"] = (f"the recommended layout with recompute {config['recompute']}"
                            + (f" and micro-batch {config['mbs']}" if request.solve == "seq" else ""))
        # the same limit keeping the plan's headroom free, as the plan's own layouts do where they can
        headroom = PLAN_HEADROOM * recommended["memory_gib"]["capacity"]
        kept = solve(request.solve, model, recommended["config"]["gpu"], gpus, headroom_gib=headroom, **config)
        answer["kept_free"] = {"headroom_gib": headroom, "share": PLAN_HEADROOM, request.solve: kept[request.solve]}
    return answer


def _rationale(recommended: dict, search: dict | None, alternatives: list[dict], choice_notes: list[str] = ()) -> str:
    comm_s = sum(v for k, v in recommended.get("time", {}).get("breakdown", {}).items() if k.startswith("comm/"))
    return render("rationale.md.j2", r=recommended, config=recommended["config"], search=search,
                  alternatives=alternatives, objective=OBJECTIVE, comm_s=comm_s,
                  choice_notes=list(choice_notes)).strip()


def _alternatives(result: SearchResult, job: dict, recommended: dict) -> tuple[list[dict], list[str]]:
    """The best layout of each structurally different family (search_choice), re-evaluated and
    labelled with its family, then runners-up up to ALTERNATIVES; and the notes on families with no
    feasible layout and on a simpler layout preferred."""
    out, notes = [], [n for n in result.notes if n.startswith("preferred the simpler")]
    if result.evidence:
        notes.insert(0, result.evidence)
    for alt in result.alternatives:
        if alt.candidate is None:
            notes.append(alt.why)
        elif len(out) < ALTERNATIVES:
            out.append({**evaluate_for_job(alt.candidate["config"], job), "family": alt.family})
    runners = [evaluate_for_job(c["config"], job) for c in result.candidates[1:]]
    out = distinct_results(out + runners, recommended)[:max(ALTERNATIVES, len(out))]
    return out, notes


def distinct_results(results: list[dict], exclude: dict | None) -> list[dict]:
    seen = [] if exclude is None else [exclude["config"]]
    out = []
    for result in results:
        if result["config"] not in seen:
            seen.append(result["config"])
            out.append(result)
    return out


def _search_for(engines: tuple[str | None, ...]) -> sizing.Search:
    """The search callback of agent/sizing.py over the layouts the first of `engines` that fits any runs (its
    result; else the last engine's)."""
    def search_fn(j: dict, top_k: int, with_limits: bool, headroom_gib: float, max_gpus: int | None) -> SearchResult:
        for engine in engines:
            result = search_job(j, top_k, with_limits=with_limits, headroom_gib=headroom_gib, max_gpus=max_gpus,
                                engine=engine)
            if result.candidates:
                break
        return result
    return search_fn


def plan_offline(request: PlanRequest, request_text: str = "", engine: str | None = None,
                 fine_tune_seq: tuple[int, str] | None = None) -> PlanReport:
    """Parse, search, re-evaluate the winner with its timeline, and report (draft_offline, then
    _PlanDraft.finish)."""
    return draft_offline(request, request_text, engine, fine_tune_seq).finish()


@dataclass
class _PlanDraft:
    """A plan up to its recommended layout. finish() adds what only the plan that is shown needs (the
    alternatives, the table of GPU counts: the costliest part, a search per count) and builds the report,
    so the comparison of engines (_best_engine_plan) drafts every engine and finishes only the winner.
    A request no layout fits is drafted with no recommended layout and `what_fits` (the search callback and
    headroom that ask what would fit: searches of their own, asked only of the plan that is shown)."""
    request: PlanRequest
    request_text: str
    job: dict
    shown: dict
    result: SearchResult | None = None
    recommended: dict | None = None
    table: tradeoffs.Table | None = None
    trade: str | None = None
    counted: bool = True
    assumptions: list[str] = field(default_factory=list)
    risks: list[str] = field(default_factory=list)
    what_fits: tuple[sizing.Search, float] | None = None

    def finish(self) -> PlanReport:
        if self.recommended is None:
            return _no_fit_report(self)
        request, job, recommended, result = self.request, self.job, self.recommended, self.result
        search = search_summary(result)
        alternatives, choice_notes = _alternatives(result, job, recommended)
        rows = []
        constrained = not self.counted or bool(job["deadline_days"] or job["budget_usd"] or job["max_gpus"])
        if recommended.get("training") and (constrained or request.tokens is not None):
            top = job["max_gpus"] or max(job["gpus"] * 4, sizing.DEFAULT_MAX_GPUS if not self.counted else 0)
            rows = tradeoffs.plan_rows(self.table, job, constrained, sizing.ladder(job, top)[0], top, recommended)
            alternatives += tradeoffs.neighbours(rows, job["gpus"], ALTERNATIVES - len(alternatives))
        return build_report(
            ReportOrigin(backend="offline", request_text=self.request_text),
            LayoutChoice(request=self.shown, recommended=recommended, alternatives=alternatives, search=search,
                         objective=job["objective"], limit=_limit_of(request, recommended)),
            ReportNotes(rationale=_rationale(recommended, search, alternatives, choice_notes),
                        assumptions=self.assumptions, extra_risks=self.risks, not_understood=request.unparsed or []),
            GpuCountTradeoffs(tradeoffs=tradeoffs.shown(rows), tradeoff_note=self.trade))


def draft_offline(request: PlanRequest, request_text: str = "", engine: str | None = None,
                  fine_tune_seq: tuple[int, str] | None = None) -> _PlanDraft:
    """Parse, search and re-evaluate the winner with its timeline: a plan up to its recommended layout.

    A request that leaves the GPU count open (an upper bound, a deadline or a budget) gets the count
    agent/sizing.py chooses. The search first asks for layouts that leave PLAN_HEADROOM of the GPU's
    memory free and meet the deadline and budget; when none does, it drops the deadline and budget (a
    risk, with the GPU count that would meet them), then half the headroom, then all of it (an
    assumption), and reports the best that fits (agent/plan_search.py search_relaxing). With an engine, only
    layouts it runs. fine_tune_seq: a fine-tune's default seq when not the recipes' (job_defaults.probe_fine_tune_seq,
    offline_report probes once for every engine it plans)."""
    engine = engine or request.engine  # an explicit engine (trainplan plan --engine) wins over the text
    search_fn = _search_for((engine,))
    job, assumptions = complete_request(request, fine_tune_seq)
    capacity = catalog.load_gpu(job["gpu"]).memory_gib
    headroom = PLAN_HEADROOM * capacity
    risks = []
    counted = job["gpus"] is not None
    table = tradeoffs.Table(job, sizing.best_at(search_fn, headroom))
    trade = None
    if not counted:
        gpus, how, met, trade = sizing.choose_count(search_fn, job, headroom, table)
        (assumptions if met else risks).append(how)
        job = sizing.at_count(job, gpus)
        if not job["gbs_given"]:
            params = count_params(catalog.load_model(job["model"])).total
            assumptions.append(default_gbs_note(job["seq"], job["gpus"], params, is_fine_tune(request)))
    if engine is not None:
        assumptions.append(f"only layouts {engine} can run were searched")
    relaxed = search_relaxing(job, search_fn, counted=counted, capacity_gib=capacity, engine=engine)
    result = relaxed.result
    assumptions += relaxed.assumptions
    risks += relaxed.risks
    if result.chosen:
        assumptions.append(f"chosen by the search where the request left it open: {result.chosen}")
    candidates = result.candidates
    shown = shown_job(job)
    if not candidates:   # what would fit is asked only of the report that is shown (_no_fit_report)
        return _PlanDraft(request, request_text, job, shown, result=result, assumptions=assumptions, risks=risks,
                          what_fits=(search_fn, headroom))
    recommended = evaluate_for_job(candidates[0]["config"], job, timeline=True)
    return _PlanDraft(request, request_text, job, shown, result=result, recommended=recommended, table=table,
                      trade=trade, counted=counted, assumptions=assumptions, risks=risks)


def _no_fit_report(draft: _PlanDraft) -> PlanReport:
    """The report of a request no layout fits: the rejections, and what would fit (adapters, a shorter
    sequence, more GPUs: agent/sizing.py, with the draft's what_fits), each a search or more."""
    request, job, risks = draft.request, draft.job, draft.risks
    search_fn, headroom = draft.what_fits
    result = draft.result
    search = search_summary(result)
    rejected = ", ".join(f"{reason}: {count}" for reason, count in search["rejected"].items()) or "none evaluated"
    would = sizing.what_would_meet(search_fn, {**job, "deadline_days": None, "budget_usd": None}, headroom)
    shorter = sizing.shorter_seq_that_fits(search_fn, job)
    adapters = None
    if request.fine_tuning and not is_lora(job["method"] or "full"):
        adapters = sizing.adapters_that_fit(job)
    would = "; ".join(w for w in (adapters, shorter, would) if w) or None
    # the engine, not the memory, may be what rules the request's layouts out: then its own line leads
    head = (_engine_refusal(result, job, search["rejected"])
            or f"no layout fits in {job['gpus']} x {job['gpu']} memory")
    risks.append(f"{head} (rejected: {rejected}); "
                 + (f"{would}; else use" if would else "use more GPUs,") + " GPUs with more memory"
                 + ("" if shorter else " or a shorter sequence"))
    return build_report(ReportOrigin(backend="offline", request_text=draft.request_text),
                        LayoutChoice(request=draft.shown, recommended=None, search=search),
                        ReportNotes(assumptions=draft.assumptions, extra_risks=risks,
                                    not_understood=request.unparsed or []))


def _engine_refusal(result: SearchResult | None, job: dict, rejected: dict[str, int]) -> str | None:
    """When the search's engine refused most of the layouts it met: the engine's own line for the request's
    layout (its knobs as the request pinned them, every other knob at its default), or None."""
    engine = result.job.engine if result is not None else None
    if not engine or not rejected or max(rejected, key=rejected.get) != "the engine cannot run it":
        return None
    model = catalog.load_model(job["model"])
    knobs = {k: v for k, v in job.items() if k in Layout.model_fields and v is not None}
    try:
        refuse(engine, model, resolve_config(model, job["gpus"], **knobs))
    except ExportError as err:
        return f"{engine} refuses the request's layouts: {err}"
    except InputError:
        return None
    return None


def offline_report(request: PlanRequest, text: str, engine: str | None = None) -> PlanReport:
    """The offline planner's plan, as every path makes it (plan, the LLM's fallbacks, the chat), with
    the engine it is scored and launched for (a fine-tune naming no method gets one: agent/method_choice.py): the
    named one; for LoRA/QLoRA naming none, ADAPTER_ENGINE's
    layouts when one fits, else ADAPTER_FALLBACK's (_adapter_plan); else the PLAN_ENGINES engine whose best
    layout wins."""
    request, bounded = bound_open_fine_tune(request)
    with layout_memo():   # one plan meets the same layouts again (counts, engines, limits): each evaluated once
        report = _offline_report(request, text, engine)
    if bounded:
        report.assumptions.insert(0, bounded)
    return report


def _offline_report(request: PlanRequest, text: str, engine: str | None) -> PlanReport:
    engine = engine or request.engine
    chosen = method_choice.choose_method(request, engine, _search_for)   # a fine-tune naming no method
    if chosen is not None:
        report = _offline_report(chosen[0], text, engine)
        report.assumptions.insert(0, chosen[1])
        return report
    adapters = engine is None and request.method is not None and is_lora(request.method)
    # A fine-tune's default seq: the recipes' where a layout of any engine the plan may be launched by fits,
    # else the longest that fits; one seq for every engine planned below.
    engines = (engine_registry.ADAPTER_ORDER if adapters else (engine,) if engine is not None else
               (*PLAN_ENGINES, *FALLBACK_ENGINES))
    seq = probe_fine_tune_seq(request, _search_for(engines))
    if adapters:
        return _adapter_plan(request, text, seq)
    if engine is None:
        report, engine = _best_engine_plan(request, text, seq)
        return report.model_copy(update={"engine": engine})
    return plan_offline(request, text, engine, seq).model_copy(update={"engine": engine})


def _adapter_plan(request: PlanRequest, text: str, seq: tuple[int, str] | None) -> PlanReport:
    """A LoRA/QLoRA request naming no engine: ADAPTER_ENGINE's plan when a layout fits; else the first of
    ADAPTER_FALLBACK's that fits, scored and launched as that engine runs it, with ADAPTER_ENGINE's reason
    stated; else ADAPTER_ENGINE's report of what would fit. Never a layout that the launching engine refuses."""
    report = plan_offline(request, text, ADAPTER_ENGINE, seq)
    if report.recommended:
        return report.model_copy(update={"engine": ADAPTER_ENGINE})
    said = [_what_would_fit(report)]
    for engine in ADAPTER_FALLBACK:
        fallback = plan_offline(request, text, engine, seq)
        would = _what_would_fit(fallback)
        if would and would not in said:
            said.append(would)
            report.risks.append(f"with {engine}, which runs the layouts {ADAPTER_ENGINE} cannot: {would}")
        if fallback.recommended:
            fallback.assumptions.append(
                f"no engine named: {ADAPTER_ENGINE}, which runs data-parallel layouts only, fits none on these GPUs; "
                f"{engine} runs this layout, so the plan is scored and launched as {engine} runs it (its launch "
                "settings carry no adapters: the training script applies PEFT's LoraConfig)")
            return fallback.model_copy(update={"engine": engine})
    return report.model_copy(update={"engine": ADAPTER_ENGINE})


def _what_would_fit(report: PlanReport) -> str | None:
    """What a no-fit report says would fit (the clauses after its rejection counts), else None."""
    risk = next((r for r in report.risks if " (rejected: " in r), None)   # _no_fit_report's line
    return risk.split("); ", 1)[1] if risk and "); " in risk else None


def _best_engine_plan(parsed: PlanRequest, text: str, seq: tuple[int, str] | None) -> tuple[PlanReport, str | None]:
    """The plan of the PLAN_ENGINES engine whose recommended layout wins by the request's objective,
    and that engine; when none fits, the plan over every engine's layouts (and None)."""
    from trainplan.tools.core.enums import Objective
    from trainplan.tools.search.rank import result_objective

    drafts = {engine: draft_offline(parsed, text, engine, seq) for engine in PLAN_ENGINES}
    fitting = {engine: draft for engine, draft in drafts.items() if draft.recommended}
    if not fitting:   # the launch fallbacks, in order: the first whose own layouts fit carries the plan
        for engine in FALLBACK_ENGINES:
            draft = draft_offline(parsed, text, engine, seq)
            if draft.recommended:
                report = draft.finish()
                report.assumptions.append(
                    f"no engine named: {' and '.join(PLAN_ENGINES)} fit no layout of this request; {engine} runs "
                    f"one, so the plan is scored and launched as {engine} runs it")
                return report, engine
        return plan_offline(parsed, text, None, seq), None

    def score(draft: _PlanDraft) -> float:
        request = draft.shown
        tokens = request.get("tokens")
        return result_objective(Objective(request.get("objective") or OBJECTIVE), draft.recommended,
                                request.get("price") or 0.0, tokens)

    winner = min(fitting, key=lambda engine: score(fitting[engine]))
    why = _engine_evidence(fitting, winner, score)
    if why is not None:
        winner, why = why
    others = [f"{engine}'s best {_objective_phrase(drafts[engine])}" if drafts[engine].recommended
              else f"{engine} fits no layout" for engine in PLAN_ENGINES if engine != winner]
    report = fitting[winner].finish()
    report.assumptions.append(
        f"no engine named: planned for {', '.join(PLAN_ENGINES)}, each with its own kernels and limits; {winner}'s "
        f"best layout wins ({_objective_phrase(fitting[winner])}; {'; '.join(others)}), so the plan is scored and "
        f"launched as {winner} runs it" + (f"; {why}" if why else ""))
    return report, winner


def _engine_evidence(fitting: dict[str, _PlanDraft], winner: str, score: Callable[[_PlanDraft], float]
                     ) -> tuple[str, str] | None:
    """The evidence rule across engines (tools/search/evidence.py, as search_choice.prefer_evidence within one
    search): when the winner's layout is outside the evals' evidence and another engine's best is inside it, the
    winner must beat that one by EVIDENCE_MARGIN on the objective. Returns (the engine that carries the plan, the
    sentence that says why), or None when the winner's layout is inside the evidence or no other engine's is."""
    outside = advice.departures(fitting[winner].job["model"], fitting[winner].recommended["config"], cite=False)
    inside = [e for e, draft in fitting.items() if not advice.departures(draft.job["model"], draft.recommended["config"])]
    if not outside or not inside:
        return None
    best = min(inside, key=lambda engine: score(fitting[engine]))
    gain = score(fitting[best]) / score(fitting[winner]) - 1
    where = f"{winner}'s best layout is outside the evals' evidence ({'; '.join(outside)})"
    if gain >= EVIDENCE_MARGIN:
        return winner, (f"{where} and beats {best}'s, inside it, by {gain:.1%}, over the {EVIDENCE_MARGIN:.0%} "
                        "margin such a layout must clear")
    return best, (f"{where} and only {gain:.1%} better than {best}'s, inside it: a layout outside the evidence must "
                  f"win by at least {EVIDENCE_MARGIN:.0%}, so {best} carries the plan")


def _objective_phrase(draft: _PlanDraft) -> str:
    r = draft.recommended
    objective = draft.shown.get("objective") or OBJECTIVE
    if objective == "cost" and r.get("training"):
        return f"${r['training']['cost_usd']:,.0f}"
    if objective == "time" and r.get("training"):
        return f"{r['training']['days']:.1f} days"
    return f"{r['time']['tokens_per_s']:,.0f} tokens/s, MFU {r['time']['mfu']:.1%}"
