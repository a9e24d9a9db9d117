"""The job a plan request becomes: every field the tools need, the request's defaults filled in, each
default stated as an assumption of the report.

Defaults when the request does not say: seq: the model's default capped at 8192; gbs:
tools/config/plan_defaults.py default_gbs; tokens: 20 per parameter; a fine-tune (is_fine_tune) instead: seq
FINETUNE_SEQ (the recipes' length) where a layout fits on the request's GPUs, else the longest of
plan_defaults.finetune_seqs at which one does (probe_fine_tune_seq with the planner's search, agent/sizing.py
longest_seq_that_fits), gbs default_finetune_gbs, and no token count (no cost) unless given; precision: bf16;
price: the GPU's catalog price; goodput: tools/config/plan_defaults.py DEFAULT_GOODPUT; the GPU of a solve=gpu
request: the cheapest catalog GPU per token (by the evidence rule) on which its leanest layout fits. A seq the
request gives is never changed.
"""

from __future__ import annotations

from trainplan.prompts import DEFAULT_SEQ_CAP, DEFAULT_TOKENS_PER_PARAM
from trainplan.tools.hardware import catalog
from trainplan.tools.config.plan_defaults import COST_SLACK, DEFAULT_GOODPUT, leanest_layout
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.resolve import DEFAULT_LORA_RANK, is_lora
from trainplan.tools.core.enums import LoraTargets, Method, Objective
from trainplan.tools.config.contract import default_seq
from trainplan.tools.config.plan_defaults import (FINETUNE_SEQ, FINETUNE_SOURCE, default_gbs_reason, default_gbs,
                                                  finetune_seqs)

from . import sizing
from .request import PINS, PlanRequest, require_complete, resolve_gbs

__all__ = ["OBJECTIVE", "at_count_bound", "complete_request", "is_fine_tune", "default_gbs_note", "probe_fine_tune_seq", "shown_job"]

OBJECTIVE = "throughput"
"""The objective of a request that names none and leaves no limit open to optimise (_default_objective)."""


def probe_fine_tune_seq(request: PlanRequest, search: sizing.Search) -> tuple[int, str] | None:
    """The seq a fine-tune that gives none on a given GPU count is planned at, when not the recipes' FINETUNE_SEQ,
    and the assumption that says so: the longest of plan_defaults.finetune_seqs at which a layout fits
    (sizing.longest_seq_that_fits with the planner's search), the shortest when none does; a count left open up to a
    bound ("up to 2 RTX 4090s") is probed at its bound, the most GPUs it allows. None when the recipe length fits,
    or the request gives its seq (never changed), is no fine-tune or leaves the GPU count open without a bound
    (the count is then chosen for the recipe length): complete_request's own default then holds."""
    if request.seq is not None or not is_fine_tune(request) or (request.gpus is None and request.max_gpus is None):
        return None
    request, where = at_count_bound(request)
    job, _ = complete_request(request)
    seqs = finetune_seqs(catalog.load_model(job["model"]).max_seq_len)
    found = sizing.longest_seq_that_fits(search, job, seqs)
    if found is not None and found[0] == seqs[0]:
        return None
    if found is None:
        return seqs[-1], (f"seq not given: planned at {seqs[-1]:,} tokens, the shortest fine-tuning recipe length "
                          f"tried: no layout fits at {_or(seqs)} (recipes use {seqs[0]:,}: "
                          f"{FINETUNE_SOURCE})")
    return found[0], (f"seq not given: planned at {found[0]:,} tokens, the longest that fits {where} (recipes "
                      f"use {seqs[0]:,}: {FINETUNE_SOURCE})")


def at_count_bound(request: PlanRequest) -> tuple[PlanRequest, str]:
    """The request on its GPU count, a count left open up to a bound taken at that bound (the most GPUs it allows),
    and where that is in words ('on these GPUs', 'on 8 GPUs, the most the request allows')."""
    if request.gpus is not None or request.max_gpus is None:
        return request, "on these GPUs"
    return (request.model_copy(update={"gpus": request.max_gpus, "max_gpus": None}),
            f"on {request.max_gpus:,} GPUs, the most the request allows")


def _or(seqs: list[int]) -> str:
    """'2,048, 1,024 or 512'."""
    names = [f"{s:,}" for s in seqs]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def complete_request(request: PlanRequest, fine_tune_seq: tuple[int, str] | None = None) -> tuple[dict, list[str]]:
    """Every field the tools need, defaults filled in, and the assumptions that names them. fine_tune_seq: a
    fine-tune's default seq and the assumption that states it, when probe_fine_tune_seq chose one."""
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
    if request.packing and request.document_tokens is None:
        assumptions.append("packing read: samples are packed into each sequence, and attention is timed causal over the "
                           "whole sequence; where the stack masks attention to each sample (TRL's padding_free, "
                           "Axolotl's sample_packing, LLaMA-Factory's neat_packing, torchtune's packed datasets) give the "
                           "samples' mean length ('documents of 300 tokens') to time it within each")
    fine_tune = is_fine_tune(request)
    seq = request.seq
    if seq is None and fine_tune and fine_tune_seq is not None:
        seq = fine_tune_seq[0]
        assumptions.append(fine_tune_seq[1])
    elif seq is None and fine_tune:
        seq = default_seq(spec.max_seq_len, fine_tune=True)
        how = (f"the model's maximum (fine-tuning recipes use {FINETUNE_SEQ:,}" if seq < FINETUNE_SEQ else
               "as fine-tuning recipes set it (")
        assumptions.append(f"seq not given: {seq:,} tokens, {how}{FINETUNE_SOURCE})")
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
        assumptions.append(default_gbs_note(seq, request.gpus, params, fine_tune))
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
                           " say 'attention only' for the attention projections, 'q and v' for those two")
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


def gpus_that_fit(request: PlanRequest) -> dict:
    """tools/search/limits.py's solve=gpu answer for the request's job with its leanest layout (data parallel with
    ZeRO-3 across the GPUs, full recompute, micro-batch 1; the request's own pins of those knobs kept): the catalog
    GPUs it fits on, each with its dollars per million tokens, and the layout in words."""
    from trainplan.tools.search.limits import solve

    gpus = request.gpus or 1
    lean = leanest_layout(gpus)
    lean.update({k: getattr(request, k) for k in lean if getattr(request, k, None) is not None})
    fields = {k: getattr(request, k) for k in ("seq", "precision", "method", "lora_rank", "lora_targets")
              if getattr(request, k) is not None}
    answer = solve("gpu", request.model, gpus=gpus, **fields, **lean)
    answer["layout"] = ("the leanest layout: " + (f"ZeRO-{lean['zero']} across the GPUs, " if gpus > 1 else "")
                        + f"recompute {lean['recompute']}, micro-batch {lean['mbs']}")
    return answer


def _cheapest_gpu(request: PlanRequest, assumptions: list[str]) -> str:
    """The catalog GPU a solve=gpu request runs on: the cheapest per token (by the evidence rule) of those on which its
    leanest layout fits (gpus_that_fit)."""
    gpus = request.gpus or 1
    answer = gpus_that_fit(request)
    if not answer["fits_on"]:
        raise InputError(f"{request.model} fits on no catalog GPU with {gpus} GPU(s), even with ZeRO-3, full "
                         "recompute and micro-batch 1: use more GPUs, LoRA or QLoRA, or a shorter sequence")
    row = next(r for r in answer["fits_on"] if r["gpu"] == answer["cheapest"])
    why = f"; {answer['cheapest_why']}" if answer["cheapest_why"] else ""
    assumptions.append(f"GPU not given: the cheapest catalog GPU per token with the leanest layout that fits, "
                       f"{answer['cheapest']} (${row['usd_per_million_tokens']:.3f} per million tokens at "
                       f"{row['tokens_per_s']:,.0f} tokens/s{why}; lowest price per hour: {answer['lowest_price']}; "
                       f"smallest: {answer['smallest']}; {len(answer['fits_on'])} fit)")
    return answer["cheapest"]


def shown_job(job: dict) -> dict:
    """The job as the report shows it (without the planner's own bookkeeping)."""
    return {k: v for k, v in job.items() if k not in ("gbs_given", "fine_tune")}


def is_fine_tune(request: PlanRequest) -> bool:
    """A fine-tune (PlanRequest.is_fine_tune): it gets the fine-tuning defaults of tools/config/plan_defaults.py,
    not the pre-training ones."""
    return request.is_fine_tune()


def bound_open_fine_tune(request: PlanRequest) -> tuple[PlanRequest, str | None]:
    """A fine-tune that names its GPU but no count, bound, deadline or budget ('QLoRA Llama 3 70B on A100s for 100M
    tokens'): planned on up to one node of that GPU, by cost where the request names no objective (the cheapest
    count within COST_SLACK, tools/config/plan_defaults.py), and the assumption that says so; the request as it
    is otherwise."""
    if not (request.count_open() and request.gpu is not None and request.is_fine_tune()):
        return request, None
    node = request.gpus_per_node or catalog.load_gpu(request.gpu).gpus_per_node
    objective = request.objective or Objective.cost.value
    bounded = request.model_copy(update={"max_gpus": node, "objective": objective})
    return bounded, (f"GPU count not given: a fine-tune is planned on up to one node ({node} x {request.gpu})"
                     + (f", by cost (the fastest count within {COST_SLACK:.0%} of the cheapest)"
                        if request.objective is None else "")
                     + "; say 'on N GPUs' to fix the count")


def default_gbs_note(seq: int, gpus: int, params: float, fine_tune: bool = False) -> str:
    return f"gbs not given: {default_gbs_reason(seq, gpus, params, fine_tune)}"


def _default_objective(request: PlanRequest) -> str:
    """With the GPU count open: a deadline asks for the cheapest plan that meets it (the fewest GPUs), a
    budget alone for the fastest it buys; otherwise throughput."""
    if request.gpus is None and request.deadline_days:
        return "cost"
    if request.gpus is None and request.budget_usd:
        return "time"
    return OBJECTIVE

