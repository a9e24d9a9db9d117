"""`plan`: a plain-language request in, a PlanReport out, by the offline planner or the LLM agent.

- offline: parse the request (agent/request.py), fill the defaults (stated as assumptions),
  `search` the layouts (keeping plan_defaults.DEFAULT_HEADROOM of GPU memory free when some layout
  can; only layouts the requested engine runs, when one is named), re-run `estimate` with
  timeline=True on the winner (the simplest within plan_defaults.SIMPLER_MARGIN of the best) and on
  the best structurally different layouts (search_choice.FAMILIES), and write the report. No LLM,
  no network.
- openai: run the function-calling loop (agent/llm.py) with the rendered system prompt, the
  registry's tools (agent/toolset.py's lean schemas). The recommended layout is the one the model
  hands over with submit_plan, re-evaluated with `estimate`; the model's text is the rationale and
  its grounding check goes in the report. Prose is never parsed for a layout: when the model does
  not submit (after one re-ask), the offline planner's layout is used and the report says so.
  When the LLM fails (server error, context overflow, deadline) on a complete request, the
  offline plan is returned, labelled with the LLM's error.
- auto: openai when an LLM is configured (agent.config.llm_configured), else offline.

Defaults when the request does not say (each becomes a line of the report's assumptions):
seq: the model's default capped at 8192; gbs: tools.plan_defaults.default_gbs; tokens: 20 per
parameter; a fine-tune (is_fine_tune) instead: seq FINETUNE_SEQ, gbs default_finetune_gbs, and no token
count (no cost) unless given; precision: bf16; price: the GPU's catalog price; goodput: tools/config/plan_defaults.py DEFAULT_GOODPUT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainplan.agent.prompt_text import system_prompt
from trainplan.prompts import DEFAULT_SEQ_CAP, DEFAULT_TOKENS_PER_PARAM, render
from trainplan.tools.hardware import catalog
from trainplan.tools.core import safe_json
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT
from trainplan.tools.perf.cost import parse_tokens
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.estimate import estimate
from trainplan.tools.config.resolve import DEFAULT_LORA_RANK, is_lora
from trainplan.tools.core.enums import LoraTargets, Method
from trainplan.tools.config.contract import FINE_TUNING_KNOBS, default_seq
from trainplan.tools.config import engines as engine_registry
from trainplan.tools.config.plan_defaults import DEADLINE_MARGIN, DEFAULT_HEADROOM, FINETUNE_SOURCE, default_gbs, default_gbs_reason
from trainplan.tools.core.file_access import user_named_files
from trainplan.tools.search.results import SearchResult
from trainplan.agent.registry import dispatch, estimate_kwargs

from . import sizing, tradeoffs
from .prose import neutralise, neutralise_line
from .report import Grounding, PlanReport, build_report, launch_settings
from .request_rules import json_paths_in
from .request import PINS, PlanRequest, merge, parse_partial, require_complete, resolve_gbs
from .toolset import SUBMIT_PLAN, agent_tools, lean_agent_tools, lean_result, submitted_layout

__all__ = ["plan", "plan_offline", "plan_openai", "resolve_backend", "complete_request"]

ALTERNATIVES = 3
SEARCH_TOP_K = 1 + ALTERNATIVES
OBJECTIVE = "throughput"
PLAN_HEADROOM = DEFAULT_HEADROOM
"""Share of GPU memory the offline planner keeps free when some layout allows it: the one default
of search and plan (tools.plan_defaults), also the report's headroom risk threshold."""
DEFAULT_ENGINE = engine_registry.DEFAULT_ENGINE
"""Whose launch settings a plan carries when the request names no engine (the search is then not
restricted to one engine) and Megatron-LM runs the recommended layout."""
LAUNCH_FALLBACK = engine_registry.LAUNCH_FALLBACK
"""When DEFAULT_ENGINE cannot run the recommended layout (e.g. ZeRO-2 with pipeline parallelism), the
first of these that can (tools/config/engines.py launch_order) carries the launch settings instead."""
PLAN_ENGINES = engine_registry.PLAN_ENGINES
"""A request that names no engine is planned once for each of these, each scored with its own kernels
and limits (Megatron-LM: Transformer Engine attention, bf16 parameters; torchtitan: SDPA's
FlashAttention-2, FSDP2's fp32 parameters; tools/config/engines.py plan_candidate), and the engine whose best layout wins
by the objective carries the plan: one engine per plan, end to end."""
ADAPTER_ENGINE = engine_registry.ADAPTER_ENGINE
"""The engine of a LoRA/QLoRA request that names none: the offline search keeps the layouts it runs
(data parallel with ZeRO/FSDP, as practitioners fine-tune with PEFT) when one fits, and the plan carries
its launch settings (Megatron's arguments have no adapters)."""


def resolve_backend(backend: str, client: Any = None) -> str:
    from .config import llm_configured

    if backend not in ("auto", "offline", "openai"):
        raise InputError(f"backend='{backend}' is not one of: auto, offline, openai")
    if backend == "auto":
        return "openai" if client is not None or llm_configured() else "offline"
    return backend


def _request_from(request_text: str | None, request: PlanRequest | None, fields: dict) -> PlanRequest:
    """The parsed text, over `request` (a previous one), under explicit `fields`."""
    base = request or PlanRequest()
    if request_text:
        base = merge(base, parse_partial(request_text))
    unknown = set(fields) - set(PlanRequest.model_fields)
    if unknown:
        raise InputError(f"unknown request field(s) {', '.join(sorted(unknown))}: use "
                         f"{', '.join(PlanRequest.model_fields)}")
    given = {k: v for k, v in fields.items() if v is not None}
    if "tokens" in given:
        given["tokens"] = parse_tokens(given["tokens"])
    return merge(base, PlanRequest(**given)) if given else base


def complete_request(request: PlanRequest) -> tuple[dict, list[str]]:
    """Every field the tools need, defaults filled in, and the assumptions that names them."""
    require_complete(request)
    assumptions = []
    if request.solve is not None and request.gpus is None and request.max_gpus is None and \
            request.deadline_days is None and request.budget_usd is None:
        request = request.model_copy(update={"gpus": 1})
        assumptions.append("GPU count not given: one GPU, as the limit asked is one GPU's")
    if request.solve == "gpu" and request.gpu is None:
        request = request.model_copy(update={"gpu": _cheapest_gpu(request, assumptions)})
    spec = catalog.load_model(request.model)
    gpu = catalog.load_gpu(request.gpu)
    if request.model_from_size:
        assumptions.append(f"model: '{request.model_from_size}' read as {request.model}, the catalog's one model of "
                           "that size; name the model to plan another")
    if request.gpus_at_least and request.gpus is not None:
        assumptions.append(f"'at least {request.gpus:,} GPUs' was planned at {request.gpus:,}: the search tries "
                           "no larger counts; say 'up to N GPUs' to let it choose the count")
    fine_tune = is_fine_tune(request)
    seq = request.seq
    if seq is None and fine_tune:
        seq = default_seq(spec.max_seq_len, fine_tune=True)
        assumptions.append(f"seq not given: {seq} tokens, a fine-tuning default ({FINETUNE_SOURCE})")
    elif seq is None:
        seq = default_seq(spec.max_seq_len)
        assumptions.append(f"seq not given: {seq} tokens, the model's default ({spec.max_seq_len}) capped at "
                           f"{DEFAULT_SEQ_CAP}")
    gbs, how = resolve_gbs(request, seq)
    gbs_given = gbs is not None
    if how:
        assumptions.append(f"global batch from the request: {how}")
    params = count_params(spec).total
    if gbs is None and request.gpus is not None:
        gbs = default_gbs(seq, request.gpus, params, fine_tune)
        assumptions.append(_default_gbs_note(seq, request.gpus, params, fine_tune))
    tokens = request.tokens
    if tokens is None and fine_tune:
        assumptions.append("tokens not given: a fine-tune's token count is its data set's (tokens x epochs), so no "
                           "cost or duration is estimated; give it (e.g. \"for 100M tokens\") to get them")
    elif tokens is None:
        tokens = float(DEFAULT_TOKENS_PER_PARAM * params)
        assumptions.append(f"tokens not given: {tokens:.4g}, {DEFAULT_TOKENS_PER_PARAM} per parameter "
                           "(compute-optimal, Hoffmann et al. 2022)")
    method, lora_rank, lora_targets = request.method, request.lora_rank, request.lora_targets
    if method is None and lora_targets is not None:
        method = Method.lora.value
        assumptions.append("method not given: LoRA (bf16 base), since the request names the adapters' targets")
    elif fine_tune and method is None:
        method = Method.full.value
        assumptions.append("method not given: full fine-tuning (every weight trains); say LoRA or QLoRA for adapters")
    if method is not None and is_lora(method) and lora_rank is None:
        lora_rank = DEFAULT_LORA_RANK
        assumptions.append(f"LoRA rank not given: {lora_rank}")
    if method is not None and is_lora(method) and lora_targets is None:
        lora_targets = LoraTargets.all_linear.value
        assumptions.append(f"LoRA targets not given: adapters on every linear layer of the blocks ({lora_targets});"
                           " say 'attention only' for the attention projections")
    precision = request.precision or "bf16"
    if request.precision is None:
        assumptions.append("precision not given: bf16")
    price = request.price
    if price is None:
        price = gpu.price
        assumptions.append(f"price not given: ${price:.2f} per GPU-hour, the {gpu.name} catalog price")
    goodput = request.goodput if request.goodput is not None else DEFAULT_GOODPUT
    if request.goodput is None:
        assumptions.append(f"goodput {goodput:.0%}: the share of wall-clock time that trains (Llama 3 reports "
                           "more than 90% effective training time)")
    objective = request.objective or _default_objective(request)
    if request.objective is None and objective != OBJECTIVE:
        assumptions.append(f"objective not given: {objective}, since the request bounds the "
                           f"{'time' if request.deadline_days else 'cost'} and leaves the GPU count open")
    full = {"model": request.model, "gpu": request.gpu, "gpus": request.gpus, "max_gpus": request.max_gpus,
            "gpus_per_node": request.gpus_per_node, "tokens": tokens, "seq": seq, "gbs": gbs, "gbs_given": gbs_given,
            "precision": precision, "price": price, "goodput": goodput, "objective": objective,
            "deadline_days": request.deadline_days, "budget_usd": request.budget_usd,
            "method": method, "lora_rank": lora_rank, "lora_targets": lora_targets, "fine_tune": fine_tune,
            **{pin: getattr(request, pin) for pin in PINS}}
    return full, assumptions


def _cheapest_gpu(request: PlanRequest, assumptions: list[str]) -> str:
    """The catalog GPU a solve=gpu request runs on: the cheapest on which its leanest layout fits (data parallel,
    ZeRO-3 across GPUs, full recompute, micro-batch 1), as tools/search/limits.py finds it."""
    from trainplan.tools.search.limits import solve

    gpus = request.gpus or 1
    lean = {"zero": 3 if gpus > 1 else 0, "recompute": "full", "mbs": 1}
    fields = {k: getattr(request, k) for k in ("seq", "precision", "method", "lora_rank", "lora_targets")
              if getattr(request, k) is not None}
    answer = solve("gpu", request.model, gpus=gpus, **fields, **lean)
    if not answer["fits_on"]:
        raise InputError(f"{request.model} fits on no catalog GPU with {gpus} GPU(s), even with ZeRO-3, full "
                         "recompute and micro-batch 1: use more GPUs, LoRA or QLoRA, or a shorter sequence")
    assumptions.append(f"GPU not given: the cheapest catalog GPU on which the leanest layout fits, "
                       f"{answer['cheapest']} (smallest: {answer['smallest']}; {len(answer['fits_on'])} fit)")
    return answer["cheapest"]


def _limit_of(request: PlanRequest, recommended: dict) -> dict | None:
    """The limit the request asked (request.solve), tools/search/limits.py's answer: the GPUs the recommended layout fits
    on; the longest seq (at micro-batch 1) or the largest mbs of the recommended layout with full recompute, the
    recompute that fits the most (the pins of the request kept)."""
    if request.solve is None or recommended is None:
        return None
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
    return answer


def _shown(job: dict) -> dict:
    """The job as the report shows it (without the planner's own bookkeeping)."""
    return {k: v for k, v in job.items() if k not in ("gbs_given", "fine_tune")}


def is_fine_tune(request: PlanRequest) -> bool:
    """A fine-tune: the request says so ("fine-tune", "SFT") or names LoRA/QLoRA. It gets the fine-tuning
    defaults of tools/config/plan_defaults.py, not the pre-training ones."""
    return (bool(request.fine_tuning) or (request.method is not None and is_lora(request.method))
            or request.lora_targets is not None)


def _default_gbs_note(seq: int, gpus: int, params: float, fine_tune: bool = False) -> str:
    return f"gbs not given: {default_gbs_reason(seq, gpus, params, fine_tune)}"


def _default_objective(request: PlanRequest) -> str:
    """With the GPU count open: a deadline asks for the cheapest plan that meets it (the fewest GPUs), a
    budget alone for the fastest it buys; otherwise throughput."""
    if request.gpus is None and request.deadline_days:
        return "cost"
    if request.gpus is None and request.budget_usd:
        return "time"
    return OBJECTIVE


def _evaluate(config: dict, job: dict, timeline: bool = False) -> dict:
    """The estimate of a config for the job's model/gpu names, tokens, price and goodput."""
    kwargs = estimate_kwargs(config)
    kwargs.update(model=job["model"], gpu=job["gpu"])
    return estimate(**kwargs, tokens=job["tokens"], price=job["price"], goodput=job["goodput"],
                    timeline=timeline).model_dump(mode="json")


def _search(job: dict, top_k: int, with_limits: bool = True, headroom_gib: float = 0.0,
            max_gpus: int | None = None, engine: str | None = None) -> SearchResult:
    from trainplan.tools.search.driver import search

    kwargs: dict[str, Any] = {pin: job[pin] for pin in PINS if job[pin] is not None}
    kwargs.update({k: job[k] for k in FINE_TUNING_KNOBS if job.get(k) is not None})   # fixed knobs
    if with_limits:
        kwargs.update({k: job[k] for k in ("deadline_days", "budget_usd") if job[k] is not None})
    return search(job["model"], job["gpu"], job["gpus"], gbs=job["gbs"], seq=job["seq"], tokens=job["tokens"],
                  price=job["price"], precision=job["precision"], objective=job["objective"], top_k=top_k,
                  goodput=job["goodput"], headroom_gib=headroom_gib, gpus_per_node=job["gpus_per_node"],
                  max_gpus=max_gpus, engine=engine, **kwargs)


def _search_summary(result: SearchResult) -> dict:
    """The report's `search` section (agent/report.py PlanReport.search)."""
    return {"objective": result.objective, "evaluated": result.evaluated, "feasible": result.feasible,
            "rejected": dict(result.rejected), "wall_s": result.wall_s, "evidence_margin": result.evidence_margin,
            "evidence": result.evidence}


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
            out.append({**_evaluate(alt.candidate["config"], job), "family": alt.family})
    runners = [_evaluate(c["config"], job) for c in result.candidates[1:]]
    out = _distinct(out + runners, recommended)[:max(ALTERNATIVES, len(out))]
    return out, notes


def _distinct(results: list[dict], exclude: dict | None) -> list[dict]:
    seen = [] if exclude is None else [exclude["config"]]
    out = []
    for result in results:
        if result["config"] not in seen:
            seen.append(result["config"])
            out.append(result)
    return out


def plan_offline(request: PlanRequest, request_text: str = "", engine: str | None = None) -> PlanReport:
    """Parse, search, re-evaluate the winner with its timeline, and report.

    A request that leaves the GPU count open (an upper bound, a deadline or a budget) gets the count
    agent/sizing.py chooses. The search first asks for layouts that leave PLAN_HEADROOM of the GPU's
    memory free and meet the deadline and budget; when none does, it drops the deadline and budget (a
    risk, with the GPU count that would meet them), then half the headroom, then all of it (an
    assumption), and reports the best that fits. With an engine, only layouts it runs."""
    engine = engine or request.engine  # an explicit engine (trainplan plan --engine) wins over the text
    job, assumptions = complete_request(request)
    capacity = catalog.load_gpu(job["gpu"]).memory_gib
    headroom = PLAN_HEADROOM * capacity
    risks = []

    def search_fn(j: dict, top_k: int, with_limits: bool, headroom_gib: float, max_gpus: int | None) -> SearchResult:
        return _search(j, top_k, with_limits=with_limits, headroom_gib=headroom_gib, max_gpus=max_gpus, engine=engine)

    counted = job["gpus"] is not None
    table = tradeoffs.Table(job, sizing.best_at(search_fn, headroom))
    trade = None
    if not counted:
        gpus, how, met, trade = sizing.choose_count(search_fn, job, headroom, table)
        (assumptions if met else risks).append(how)
        job = sizing.at_count(job, gpus)
        if not job["gbs_given"]:
            params = count_params(catalog.load_model(job["model"])).total
            assumptions.append(_default_gbs_note(job["seq"], job["gpus"], params, is_fine_tune(request)))
    limited = bool(job["deadline_days"] or job["budget_usd"])
    if engine is not None:
        assumptions.append(f"only layouts {engine} can run were searched")
    result = None
    if not counted and job["deadline_days"]:
        # The count was sized to finish DEADLINE_MARGIN early: the layout keeps that margin where one does
        # (the search's own ranking may otherwise pick a slower layout that only meets the deadline).
        result = _search({**job, "deadline_days": job["deadline_days"] * (1 - DEADLINE_MARGIN)}, SEARCH_TOP_K,
                         headroom_gib=headroom, engine=engine)
    if result is None or not result.candidates:
        result = _search(job, SEARCH_TOP_K, headroom_gib=headroom, engine=engine)
    if not result.candidates and limited:
        # a count chosen for a budget was the cheapest already: choose_count said so
        would = sizing.what_would_meet(search_fn, job, headroom) if counted or job["deadline_days"] else None
        risks.append(f"no layout on {job['gpus']:,} GPUs meets {sizing.limits_text(job)}: the plan below is the best "
                     f"without it" + (f"; {would}" if would else ""))
        limited = False
        result = _search(job, SEARCH_TOP_K, with_limits=False, headroom_gib=headroom, engine=engine)
    if result.candidates:
        assumptions.append(f"layouts keep at least {PLAN_HEADROOM:.0%} of GPU memory free ({headroom:.2f} of "
                           f"{capacity:.2f} GiB) for fragmentation and spikes")
    else:  # keep what headroom the GPUs allow: half of it, else none (a layout at 98% of memory is the last resort)
        for fraction in (PLAN_HEADROOM / 2, 0.0):
            result = _search(job, SEARCH_TOP_K, with_limits=limited, headroom_gib=fraction * capacity, engine=engine)
            if result.candidates:
                assumptions.append(f"no layout leaves {PLAN_HEADROOM:.0%} of GPU memory free: the plan uses the best "
                                   + (f"that leaves {fraction:.0%} ({fraction * capacity:.2f} GiB)" if fraction
                                      else "that fits at all"))
                break
    if result.chosen:
        assumptions.append(f"chosen by the search where the request left it open: {result.chosen}")
    search = _search_summary(result)
    candidates = result.candidates
    shown = _shown(job)
    if not candidates:
        rejected = ", ".join(f"{reason}: {count}" for reason, count in search["rejected"].items()) or "none evaluated"
        would = sizing.what_would_meet(search_fn, {**job, "deadline_days": None, "budget_usd": None}, headroom)
        shorter = sizing.shorter_seq_that_fits(search_fn, job, headroom)
        adapters = None
        if request.fine_tuning and not is_lora(job["method"] or "full"):
            adapters = sizing.adapters_that_fit(job)
        would = "; ".join(w for w in (adapters, shorter, would) if w) or None
        risks.append(f"no layout fits in {job['gpus']} x {job['gpu']} memory (rejected: {rejected}); "
                     + (f"{would}; else use" if would else "use more GPUs,") + " GPUs with more memory"
                     + ("" if shorter else " or a shorter sequence"))
        return build_report(backend="offline", request_text=request_text, request=shown, recommended=None,
                            alternatives=[], rationale="", assumptions=assumptions, search=search,
                            extra_risks=risks, not_understood=request.unparsed or [])
    recommended = _evaluate(candidates[0]["config"], job, timeline=True)
    alternatives, choice_notes = _alternatives(result, job, recommended)
    rows = []
    constrained = not counted or bool(job["deadline_days"] or job["budget_usd"] or job["max_gpus"])
    if recommended.get("training") and (constrained or request.tokens is not None):
        top = job["max_gpus"] or max(job["gpus"] * 4, sizing.DEFAULT_MAX_GPUS if not counted else 0)
        rows = tradeoffs.plan_rows(table, job, constrained, sizing.ladder(job, top)[0], top)
        alternatives += tradeoffs.neighbours(rows, job["gpus"], ALTERNATIVES - len(alternatives))
    return build_report(backend="offline", request_text=request_text, request=shown, recommended=recommended,
                        alternatives=alternatives,
                        rationale=_rationale(recommended, search, alternatives, choice_notes),
                        assumptions=assumptions, search=search, extra_risks=risks, objective=job["objective"],
                        not_understood=request.unparsed or [], limit=_limit_of(request, recommended),
                        tradeoffs=tradeoffs.shown(rows), tradeoff_note=trade)


# --- the LLM backend -------------------------------------------------------------------------------

_CONFIG_TOOLS = ("estimate_step_time", "calculate_memory", "search_configs", "submit_plan")


def _configs_in(calls: list[dict]) -> list[tuple[int, str, dict]]:
    """(order, tool, config) of every layout the tools evaluated in a conversation, latest last."""
    out = []
    for i, call in enumerate(calls):
        result = call.get("result")
        if call["name"] not in _CONFIG_TOOLS or not isinstance(result, dict) or "error" in result:
            continue
        if call["name"] == "search_configs":
            for rank, candidate in enumerate(result.get("candidates", [])):
                out.append((i - rank * 1e-3, "search_configs", candidate["config"]))
        elif result.get("fits", True) and "config" in result:
            out.append((i, call["name"], result["config"]))
    return out


def _job_from_submission(partial: PlanRequest, config: dict, arguments: dict) -> PlanRequest:
    """The request as the submission settled it: the submitted layout's job; tokens and price from the
    request, else from the submission."""
    given: dict[str, Any] = {"model": partial.model or config["model"], "gpu": partial.gpu or config["gpu"],
                             "gpus": config["gpus"], "seq": config["seq"], "gbs": config["gbs"],
                             "precision": config["precision"]}
    if partial.model and catalog.load_model(partial.model).name != config["model"]:
        given["model"] = config["model"]
    if partial.gpu and catalog.load_gpu(partial.gpu).name != config["gpu"]:
        given["gpu"] = config["gpu"]
    for key in ("tokens", "price"):
        if arguments.get(key) is not None and getattr(partial, key) is None:
            given[key] = parse_tokens(arguments[key]) if key == "tokens" else arguments[key]
    data = partial.model_dump()
    data.update({k: v for k, v in given.items() if v is not None})
    return PlanRequest(**data)


def calls_from_messages(messages: list[dict]) -> list[dict]:
    """Tool calls of a conversation, each with its result: {id, name, arguments, result}."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    calls = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            content = results.get(call["id"])
            try:
                result = (safe_json.loads(content, "a tool result", safe_json.TRANSCRIPT)
                          if isinstance(content, str) else content)
            except InputError:
                result = None
            calls.append({"id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"], "result": result})
    return calls


def grounding_of(report: Any, reasked: bool = False, called_tools: bool = True) -> Grounding:
    """A Grounding from agent.grounding's GroundingReport; not ok when the LLM called no tool."""
    status = ("no_tool_calls" if not called_tools else "empty_answer" if report.empty
              else "grounded" if report.ok else "ungrounded")
    share = report.share_grounded
    if not called_tools and share is not None:
        share = 0.0  # no tool result grounds anything: numbers echoed from the request check nothing
    return Grounding(ok=report.ok and called_tools, status=status, share_grounded=share,
                     grounded=len(report.grounded), weak=[neutralise_line(g.mention.text) for g in report.weak],
                     from_request=[neutralise_line(g.mention.text) for g in report.from_request],
                     ungrounded=[neutralise_line(m.text) for m in report.ungrounded], reasked=reasked)


def _parsed_arguments(arguments: Any) -> dict:
    try:
        parsed = (safe_json.loads(arguments or "{}", "the arguments", safe_json.ARGUMENTS)
                  if isinstance(arguments, str) else arguments)
    except InputError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def report_from_conversation(request_text: str, partial: PlanRequest, *, text: str, calls: list[dict],
                             grounding: Grounding | None, llm_model: str | None, truncated: bool = False,
                             engine: str | None = None) -> PlanReport:
    """The report of an LLM conversation, built from its last accepted submit_plan call and re-evaluated
    with the tools. Without one, the offline planner's layout, and the report says so. When the tools
    refuse the submitted layout on re-evaluation (its model, a value) or fail on it, the plan is not lost:
    the offline planner's (for `engine`), labelled with the failure (offline_after_llm_failure)."""
    tool_calls = [{"name": c["name"], "arguments": _parsed_arguments(c["arguments"])} for c in calls]
    submitted = submitted_layout(calls)
    if submitted is None:
        require_complete(partial)
        report = offline_report(partial, request_text, engine)
        status = "no_submission" if calls else "no_tool_calls"
        said = ("the LLM called no tool, so it gave no grounded plan" if not calls else
                "the LLM did not submit a layout with submit_plan")
        return report.model_copy(update={
            "backend": "openai", "llm_model": neutralise_line(llm_model) or None, "llm_status": status,
            "llm_answer": neutralise(text),
            "grounding": grounding, "tool_calls": tool_calls, "truncated": truncated,
            "assumptions": [*report.assumptions, f"{said}: the recommended layout and every number in this "
                            "report are the offline planner's (search + estimate)"]})
    try:
        return _report_of_submission(request_text, partial, submitted, text=text, calls=calls, tool_calls=tool_calls,
                                     grounding=grounding, llm_model=llm_model, truncated=truncated)
    except Exception as exc:   # whatever the tools refuse or break on, the request still gets its plan
        return _offline_after_submission(request_text, partial, exc, text=text, tool_calls=tool_calls,
                                         grounding=grounding, llm_model=llm_model, engine=engine)


def failure_text(exc: Exception) -> str:
    """An exception as a report states it: the message, and the kind when it is not an input error."""
    message = str(exc).strip() or type(exc).__name__
    return message if isinstance(exc, InputError) else f"{type(exc).__name__}: {message}"


def _offline_after_submission(request_text: str, partial: PlanRequest, exc: Exception, *, text: str,
                              tool_calls: list[dict], grounding: Grounding | None, llm_model: str | None,
                              engine: str | None) -> PlanReport:
    """The labelled offline plan of a request whose submitted layout the tools could not re-evaluate; a request
    the offline planner cannot complete raises the original refusal (an InputError: one line)."""
    try:
        require_complete(partial)
    except InputError:
        if isinstance(exc, InputError):
            raise exc from None
        raise InputError(f"the LLM's plan could not be re-evaluated ({failure_text(exc)}), and the request "
                         "lacks what the offline planner needs: name the model, the GPU and the GPU count") from None
    error = f"the tools refused the layout it submitted: {failure_text(exc)}"
    report = offline_after_llm_failure(partial, request_text, InputError(error), llm_model, engine)
    return report.model_copy(update={"llm_answer": text, "grounding": grounding, "tool_calls": tool_calls})


def _report_of_submission(request_text: str, partial: PlanRequest, submitted: tuple[dict, dict], *, text: str,
                          calls: list[dict], tool_calls: list[dict], grounding: Grounding | None,
                          llm_model: str | None, truncated: bool) -> PlanReport:
    """The report of an accepted submit_plan call, its layout re-evaluated with the tools."""
    arguments, result = submitted
    config = result["config"]
    job, assumptions = complete_request(_job_from_submission(partial, config, arguments))
    recommended = _evaluate(config, job, timeline=True)
    others = []
    for _, _, other in _configs_in(calls):
        if other != config and all(other.get(k) == job[k] for k in ("seq", "gbs")):
            try:
                others.append(_evaluate(other, job))
            except InputError:
                continue
    others = _distinct(sorted(others, key=lambda r: -r.get("time", {}).get("tokens_per_s", 0.0)), recommended)
    report = build_report(backend="openai", llm_model=neutralise_line(llm_model) or None, request_text=request_text,
                          request=_shown(job), recommended=recommended, alternatives=others[:ALTERNATIVES],
                          rationale=neutralise(text),
                          assumptions=assumptions, grounding=grounding, tool_calls=tool_calls)
    return report.model_copy(update={"llm_status": "submitted", "truncated": truncated})


def run_llm(request_text: str, *, llm_model: str | None = None, client: Any = None, stream: bool = False,
            on_event: Callable[[str, dict], None] | None = None, history: list[dict] | None = None,
            max_turns: int = 16, require_submit: bool = True, settings: Any = None) -> Any:
    """One run of the function-calling loop with the system prompt and the registry's tools."""
    from .config import load_settings
    from .llm import run_agent

    settings = settings or load_settings()
    # The LLM's tool calls may open the files the user's own words named (this request and earlier
    # turns); any other file only under the allowed roots (tools/core/file_access.py).
    user_text = [request_text, *(m.get("content") for m in history or ()
                                 if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str))]
    with user_named_files([path for text in user_text for path in json_paths_in(text)]):
        return run_agent(request_text, system_prompt=system_prompt(), tools=agent_tools(strict=True),
                         dispatch=dispatch, client=client, model=llm_model or settings.model,
                         max_turns=max_turns, stream=stream, on_event=on_event, history=history, settings=settings,
                         require_tool=SUBMIT_PLAN if require_submit else None,
                         small_context_tools=lean_agent_tools(strict=True), small_context_view=lean_result)


def plan_openai(request_text: str, partial: PlanRequest, *, llm_model: str | None = None, client: Any = None,
                stream: bool = False, on_event: Callable[[str, dict], None] | None = None,
                history: list[dict] | None = None, engine: str | None = None) -> tuple[PlanReport, Any]:
    """Run the agent and build the report from its submit_plan call; returns (report, AgentResult). engine: the
    offline plan's, should the tools refuse the submitted layout."""
    result = run_llm(request_text, llm_model=llm_model, client=client, stream=stream, on_event=on_event,
                     history=history)
    grounding = grounding_of(result.grounding, result.reasked, called_tools=bool(result.tool_calls))
    report = report_from_conversation(request_text, partial, text=result.text, calls=result.tool_calls,
                                      grounding=grounding, llm_model=result.model, truncated=result.truncated,
                                      engine=engine)
    return report, result


def offline_after_llm_failure(request: PlanRequest, request_text: str, error: Exception,
                              llm_model: str | None, engine: str | None = None) -> PlanReport:
    """The offline plan of a complete request whose LLM run failed, labelled with the LLM's error."""
    report = offline_report(request, request_text, engine)
    return report.model_copy(update={"llm_model": neutralise_line(llm_model) or None, "llm_status": "failed",
                                     "llm_error": neutralise_line(str(error))})


def plan(request_text: str | None = None, *, backend: str = "auto", llm_model: str | None = None,
         client: Any = None, stream: bool = False, on_event: Callable[[str, dict], None] | None = None,
         request: PlanRequest | None = None, engine: str | None = None, **fields: Any) -> PlanReport:
    """Plan a training run from plain language (and/or the contract's fields, tools/config/contract.py: model=, gpu=, gpus=, ...).

    backend: 'offline', 'openai' or 'auto' (openai when an LLM is configured). engine (megatron,
    deepspeed, torchtitan, accelerate): the offline search keeps only layouts it runs, and the report
    carries its launch settings; None: any layout, DEFAULT_ENGINE's launch settings (a LoRA/QLoRA
    request: ADAPTER_ENGINE's layouts when one fits). Raises InputError when
    the request lacks a model or the hardware (checked before the LLM is asked), AgentError when the
    LLM is not configured or unreachable. When the LLM fails after that (a server error, a context
    overflow, the deadline), the offline planner answers and the report carries the LLM's error.
    """
    from .llm import AgentError

    chosen = resolve_backend(backend, client)
    parsed = require_complete(_request_from(request_text, request, fields))  # before any time goes to the LLM
    text = request_text or _describe(parsed)
    engine = engine or parsed.engine  # an explicit engine (trainplan plan --engine) wins over the text
    adapters = engine is None and parsed.method is not None and is_lora(parsed.method)

    def step(line: str) -> None:
        if on_event:
            on_event("step", {"text": line})

    if chosen == "offline":   # the LLM path's first line is its own (a configuration error is the only line)
        step(f"understood the request: {_describe(parsed)}")
        step("searching layouts (offline planner)")
    if chosen == "offline":
        report = offline_report(parsed, text, engine)
    else:
        if client is None:
            _settings_model()   # the LLM's configuration (environment values) is checked first: one line
        failure: Exception | None = None
        try:
            report, _ = plan_openai(text, parsed, llm_model=llm_model, client=client, stream=stream,
                                    on_event=on_event, engine=engine)
            if report.recommended:
                _add_launch(report, engine, adapters)   # a launch failing on the LLM's layout falls back too
        except AgentError as exc:
            if exc.kind == "config":
                raise
            failure = exc
        except Exception as exc:   # a tool failing on the LLM's plan after the request was understood
            failure = InputError(f"the tools failed on its plan: {failure_text(exc)}")
        if failure is not None:
            if on_event:
                on_event("fallback", {"error": str(failure)})
            report = offline_after_llm_failure(parsed, text, failure, llm_model or _settings_model(), engine)
    if report.search:
        step(f"searched {report.search['evaluated']:,} layouts, {report.search['feasible']:,} feasible")
    if report.recommended:
        if report.launch is None:
            _add_launch(report, report.engine or engine, adapters)
        step(f"recommended {report.layout}; writing {report.launch.engine} launch settings")
    else:
        step("no layout fits: the report says what would")
    return report


def offline_report(request: PlanRequest, text: str, engine: str | None = None) -> PlanReport:
    """The offline planner's plan, as every path makes it (plan, the LLM's fallbacks, the chat), with
    the engine it is scored and launched for: the named one; for LoRA/QLoRA naming none, ADAPTER_ENGINE's
    layouts when one fits; else the PLAN_ENGINES engine whose best layout wins."""
    engine = engine or request.engine
    if engine is None and request.method is not None and is_lora(request.method):
        report = plan_offline(request, text, engine=ADAPTER_ENGINE)
        return report.model_copy(update={"engine": ADAPTER_ENGINE}) if report.recommended else plan_offline(request, text)
    if engine is None:
        report, engine = _best_engine_plan(request, text)
        return report.model_copy(update={"engine": engine})
    return plan_offline(request, text, engine=engine).model_copy(update={"engine": engine})


def _best_engine_plan(parsed: PlanRequest, text: str) -> tuple[PlanReport, str | None]:
    """The plan of the PLAN_ENGINES engine whose recommended layout wins by the request's objective,
    and that engine; when none fits, the plan over every engine's layouts (and None)."""
    from trainplan.tools.core.enums import Objective
    from trainplan.tools.search.rank import result_objective

    plans = {engine: plan_offline(parsed, text, engine=engine) for engine in PLAN_ENGINES}
    fitting = {engine: report for engine, report in plans.items() if report.recommended}
    if not fitting:
        return plan_offline(parsed, text), None

    def score(report: PlanReport) -> float:
        request = report.request
        tokens = request.get("tokens")
        return result_objective(Objective(request.get("objective") or OBJECTIVE), report.recommended,
                                request.get("price") or 0.0, tokens)

    winner = min(fitting, key=lambda engine: score(fitting[engine]))
    report = fitting[winner]
    others = [f"{engine}'s best {_objective_phrase(plans[engine])}" if plans[engine].recommended
              else f"{engine} fits no layout" for engine in PLAN_ENGINES if engine != winner]
    report.assumptions.append(
        f"no engine named: planned for {', '.join(PLAN_ENGINES)}, each with its own kernels and limits; {winner}'s "
        f"best layout wins ({_objective_phrase(report)}; {'; '.join(others)}), so the plan is scored and launched "
        f"as {winner} runs it")
    return report, winner


def _objective_phrase(report: PlanReport) -> str:
    r = report.recommended
    objective = report.request.get("objective") or OBJECTIVE
    if objective == "cost" and r.get("training"):
        return f"${r['training']['cost_usd']:,.0f}"
    if objective == "time" and r.get("training"):
        return f"{r['training']['days']:.1f} days"
    return f"{r['time']['tokens_per_s']:,.0f} tokens/s, MFU {r['time']['mfu']:.1%}"


def _add_launch(report: PlanReport, engine: str | None, adapters: bool) -> None:
    """The launch settings of the recommended layout: `engine`'s, else ADAPTER_ENGINE's for adapters, else
    launch_engine's."""
    launcher = engine or (ADAPTER_ENGINE if adapters else launch_engine(report.request["model"],
                                                                       report.recommended["config"]))
    report.launch = launch_settings(report.request["model"], report.recommended["config"], launcher)


def launch_engine(model: str, config: dict) -> str:
    """The engine whose launch settings a plan that names none carries: DEFAULT_ENGINE when it runs the
    layout, else the first of LAUNCH_FALLBACK that does, else DEFAULT_ENGINE (whose refusal the report
    then states)."""
    from trainplan.tools.config.contract import Layout
    from trainplan.tools.engines.support import knobs_of, runs
    from trainplan.tools.config.layout import resolve_config

    spec = catalog.load_model(model)
    knobs = knobs_of(resolve_config(spec, config["gpus"], **{k: config.get(k) for k in Layout.model_fields}))
    return next((e for e in (DEFAULT_ENGINE, *LAUNCH_FALLBACK) if bool(runs(e, spec, knobs))), DEFAULT_ENGINE)


def _settings_model() -> str:
    from .config import load_settings

    return load_settings().model


def _describe(request: PlanRequest) -> str:
    """A request written out from fields, for the report and the LLM."""
    given = request.given()
    head = f"Plan training {given.pop('model', '?')} on {given.pop('gpus', '?')} x {given.pop('gpu', '?')}"
    rest = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in given.items())
    return f"{head}{', ' + rest if rest else ''}"
