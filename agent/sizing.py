"""How many GPUs: the count a request leaves open, and the count that would meet it when its own does not.

A request may leave the GPU count open and bound it instead:
- a deadline ("2T tokens in 30 days on H100s"): the fewest GPUs whose best layout meets it with
  plan_defaults.DEADLINE_MARGIN to spare (30 days: 27; the deadline itself when no count meets the
  tighter date, which the plan then says), bisecting the ladder of counts (more GPUs finish sooner),
  then refining between the last count that misses and the first that meets among the standard
  counts (agent/tradeoffs.standard_counts: 768 between 512 and 1,024, never 896). When that count meets
  the date only with a layout outside the evals' evidence (tools/search/evidence.py), the cheapest
  standard count up to 4x whose best layout is inside it and meets the date is taken instead, unless the
  outside one is cheaper by plan_defaults.EVIDENCE_MARGIN (_inside_evidence: the trade is stated);
- a budget alone ("under $2M"): the most GPUs whose best layout stays within it (more GPUs cost
  more, through lower efficiency at scale), for the fastest plan the budget buys, by bisection;
- an upper bound alone ("up to 512 H100s"): every count of the ladder up to it, and the best by
  the objective (throughput and time: most tokens per second; cost: the fastest standard count
  within plan_defaults.COST_SLACK of the cheapest, agent/tradeoffs.cheapest, which states the trade).

The ladder is tools.search.gpu_counts: whole nodes from the bound down by halves, to the fewest GPUs
that could hold the model states (search.min_gpus). Without a bound, DEFAULT_MAX_GPUS.
Each count is searched with the default global batch for that count (plan_defaults.default_gbs;
default_finetune_gbs for a fine-tune) unless the request gives one, so a plan on 1,024 GPUs gets the
batch of a 1,024-GPU run.

The same searches tell a request whose own count fails what would meet it: "1,024 GPUs meet the
30-day deadline", "256 GPUs meet the $2M budget", "64 GPUs fit it in memory".
"""

from __future__ import annotations

from collections.abc import Callable

from trainplan.tools.hardware import catalog
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.perf.finetune import frozen_bytes_per_param
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.config.plan_defaults import (DEADLINE_MARGIN, EVIDENCE_MARGIN, default_finetune_gbs, default_gbs,
                                                  leanest_layout,
                                                  halvings)
from trainplan.tools.search.evidence import departures_of, shape_of
from trainplan.tools.search.explain import label
from trainplan.tools.search.driver import gpu_counts, min_gpus
from trainplan.tools.search.results import SearchResult
from trainplan.tools.search.space import R_BUDGET, R_DEADLINE, R_MEMORY

from trainplan.prompts import duration, usd
from trainplan.tools.core.errors import InputError

from . import tradeoffs

SIZING_PREFIX = "gpus not given: "
"""How the assumption that states the GPU count the planner chose begins (the short report reads it back)."""

DEFAULT_MAX_GPUS = 16384
"""Most GPUs tried when a request bounds the count only by a deadline or a budget: the largest
published dense run (Llama 3 405B on 16,384 H100s, Llama 3 paper §3.3)."""
BEYOND = 4
"""What would meet a deadline is looked for up to BEYOND x max(DEFAULT_MAX_GPUS, the request's count)."""

Search = Callable[[dict, int, bool, float, int | None], SearchResult]
"""agent/plan_search.py search_job: (job, top_k, with_limits, headroom_gib, max_gpus) -> search result; with max_gpus
the search tries the ladder of counts below it itself (tools.search.gpu_counts)."""


def at_count(job: dict, gpus: int) -> dict:
    """The job on `gpus` GPUs, with the default global batch for that count unless the request set one."""
    if job.get("gbs_given"):
        return {**job, "gpus": gpus}
    if job.get("fine_tune"):
        return {**job, "gpus": gpus, "gbs": default_finetune_gbs(gpus)}
    params = count_params(catalog.load_model(job["model"])).total
    gbs = default_gbs(job["seq"], gpus, params)
    return {**job, "gpus": gpus, "gbs": gbs}


def ladder(job: dict, top: int) -> list[int]:
    """GPU counts worth trying up to `top`, ascending (tools.search.gpu_counts)."""
    spec, gpu = catalog.load_model(job["model"]), catalog.load_gpu(job["gpu"])
    per_node = job.get("gpus_per_node") or gpu.gpus_per_node
    method = job.get("method") or "full"
    floor = min(min_gpus(spec, gpu, frozen_bytes_per_param(method)) if is_lora(method)
                else min_gpus(spec, gpu), top)
    return sorted(gpu_counts(top, top, per_node, floor))


def _best(search: Search, job: dict, gpus: int, headroom_gib: float, with_limits: bool = True) -> dict | None:
    candidates = search(at_count(job, gpus), 1, with_limits, headroom_gib, None).candidates
    return candidates[0] if candidates else None


def best_at(search: Search, headroom_gib: float) -> Callable[[dict, int], dict | None]:
    """(job, gpus) -> the best layout on that count (the count's default batch), limits as the job has them."""
    return lambda job, gpus: _best(search, job, gpus, headroom_gib)


def _first_meeting(search: Search, job: dict, counts: list[int], headroom_gib: float
                   ) -> tuple[int, tuple[int, dict] | None]:
    """Bisection over `counts` (ascending; meeting the limits assumed monotone in the count): the
    index of the first count that meets them (len(counts) when none does) and its (count, best). A count
    with no layout at all that misses the limits or the memory (its batch cannot spread over that many
    GPUs: a fine-tune's 16 sequences on 128) has too many GPUs, as a count that meets them does."""
    lo, hi, found = -1, len(counts), None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        result = search(at_count(job, counts[mid]), 1, True, headroom_gib, None)
        if result.candidates:
            hi, found = mid, (counts[mid], result.candidates[0])
        elif any(result.rejected.get(reason) for reason in (R_DEADLINE, R_BUDGET, R_MEMORY)):
            lo = mid    # too slow, too dear or too little memory: more GPUs
        else:
            hi = mid    # too many GPUs for the batch: fewer
    return hi, found


def _fewest(search: Search, job: dict, counts: list[int], headroom_gib: float, refine: bool) -> tuple[int, dict] | None:
    """The fewest of `counts` (ascending) whose best layout meets the job's limits; then, with
    refine, the standard counts (tradeoffs.standard_counts) between it and the count below."""
    index, found = _first_meeting(search, job, counts, headroom_gib)
    if found is None or not refine or index == 0:
        return found
    per_node = job.get("gpus_per_node") or catalog.load_gpu(job["gpu"]).gpus_per_node
    between = [c for c in tradeoffs.standard_counts(counts[index - 1] + 1, found[0] - 1, per_node)]
    return _first_meeting(search, job, between, headroom_gib)[1] or found


def _most(search: Search, job: dict, counts: list[int], headroom_gib: float) -> tuple[int, dict] | None:
    """The most of `counts` (ascending) whose best layout stays within the job's budget, by bisection:
    a count with layouts over budget, or with no layout at all, is too many GPUs; one with none that fit in
    memory, too few. The cost of a job is not monotone in the count where the best layout changes with it (a
    LoRA over $100 on 1 and 2 A100s, $97.64 on 4), so up to BUDGET_LOOKAHEAD counts past the last one within
    budget are tried too; where the bisection finds none, choose_count tries the cheapest plan's count."""
    lo, hi, found = 0, len(counts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        result = search(at_count(job, counts[mid]), 1, True, headroom_gib, None)
        if result.candidates:
            lo, found = mid + 1, (counts[mid], result.candidates[0])
        elif result.rejected.get(R_BUDGET) or not result.rejected.get(R_MEMORY):
            hi = mid - 1   # over budget, or no layout at all (the batch cannot spread so far): too many GPUs
        else:
            lo = mid + 1
    index, misses = (counts.index(found[0]) + 1 if found else len(counts)), 0
    while index < len(counts) and misses < BUDGET_LOOKAHEAD:
        result = search(at_count(job, counts[index]), 1, True, headroom_gib, None)
        if result.candidates:
            found, misses = (counts[index], result.candidates[0]), 0
        elif not (result.rejected.get(R_BUDGET) or result.rejected.get(R_MEMORY)):
            break   # no layout at all: past the counts the batch spreads over
        else:
            misses += 1
        index += 1
    return found


BUDGET_LOOKAHEAD = 2
"""Counts past the budget bisection's answer that _most tries before it takes it (its docstring says why)."""


def _by_objective(search: Search, job: dict, top: int, headroom_gib: float) -> tuple[int, dict] | None:
    """The count up to `top` whose best layout is best by the job's objective, from one search over
    the ladder (cost: fewest dollars; throughput and time: most tokens per second), with the global
    batch of the top count."""
    candidates = search(at_count(job, top), 1, True, headroom_gib, top).candidates
    return (candidates[0]["config"]["gpus"], candidates[0]) if candidates else None


def _cheapest(search: Search, job: dict, counts: list[int], headroom_gib: float) -> tuple[int, dict] | None:
    """The count of `counts` with the cheapest layout, the job's limits dropped."""
    plain = {**job, "deadline_days": None, "budget_usd": None, "objective": "cost"}
    return _by_objective(search, plain, max(counts), headroom_gib) if counts else None


def _largest_usable(search: Search, job: dict, counts: list[int], headroom_gib: float) -> tuple[int, dict] | None:
    """The largest of `counts` (ascending) with a layout that fits, the job's limits dropped. More GPUs
    are not always usable: a data-parallel-only engine needs a batch of at least one sequence per GPU,
    and the default batch grows slower than the count."""
    plain = {**job, "deadline_days": None, "budget_usd": None}
    for gpus in reversed(counts):
        best = _best(search, plain, gpus, headroom_gib, with_limits=False)
        if best is not None:
            return gpus, best
    return None


def limits_text(job: dict) -> str:
    """'the 30-day deadline and the $2,000,000 budget'."""
    parts = []
    if job.get("deadline_days"):
        parts.append(f"the {job['deadline_days']:g}-day deadline")
    if job.get("budget_usd"):
        parts.append(f"the ${job['budget_usd']:,.0f} budget")
    return " and ".join(parts)


def _outcome(best: dict) -> str:
    training = best.get("training") or {}
    if training.get("days") is None:
        return f"{best['time']['tokens_per_s']:,.0f} tokens/s"
    return f"{duration(training['days'], 1)}, {usd(training['cost_usd'])}"


def choose_count(search: Search, job: dict, headroom_gib: float, table: tradeoffs.Table | None = None
                 ) -> tuple[int, str, bool, str | None]:
    """The GPU count for a request that leaves it open, the sentence that says how it was chosen,
    whether it meets the request, and the trade it makes (cheapest: tradeoffs.cheapest; else None).
    When no count up to the bound does, the sentence says so and the count is the one to plan on
    anyway: the cheapest for a budget, the bound otherwise. table: the per-count bests (the cost
    objective reads it)."""
    top = job.get("max_gpus") or DEFAULT_MAX_GPUS
    counts = ladder(job, top)
    bound = "the requested bound" if job.get("max_gpus") else "the largest published dense run"
    tried = f"tried {counts[0]:,} to {top:,} GPUs ({top:,}: {bound})"
    largest = None
    note = None
    if job.get("deadline_days"):
        early = {**job, "deadline_days": job["deadline_days"] * (1 - DEADLINE_MARGIN)}
        chosen = _fewest(search, early, counts, headroom_gib, refine=True)
        how = (f"the fewest GPUs that finish {DEADLINE_MARGIN:.0%} inside {limits_text(job)} (by "
               f"{early['deadline_days']:.3g} days: restarts and the model's error need the margin)")
        if chosen is None:
            early = job
            chosen = _fewest(search, job, counts, headroom_gib, refine=True)
            how = (f"the fewest GPUs that meet {limits_text(job)}, with less than the {DEADLINE_MARGIN:.0%} margin "
                   "a deadline plan keeps (none meets the earlier date)")
        if chosen is None:
            largest = _largest_usable(search, job, counts, headroom_gib)
            if largest and largest[0] < counts[-1]:  # the bisection assumed every larger count usable
                chosen = _fewest(search, job, [c for c in counts if c <= largest[0]], headroom_gib, refine=True)
        if chosen is not None and table is not None:
            fewest = chosen[0]
            chosen, note = _inside_evidence(table, job, chosen, early["deadline_days"], top)
            if chosen[0] != fewest:
                how = (f"the cheapest count whose best layout is inside the evals' evidence and finishes by "
                       f"{early['deadline_days']:.3g} days (the fewest that do, {fewest:,}, need a layout outside it)")
    elif job.get("budget_usd"):
        chosen = _most(search, job, counts, headroom_gib)
        how = f"the most GPUs that stay within {limits_text(job)}, for the fastest plan it buys"
        if chosen is None:   # cost is not monotone in the count: the bisection can miss a cheap count between dear ones
            cheapest = _cheapest(search, job, counts, headroom_gib)
            within = cheapest and _best(search, job, cheapest[0], headroom_gib)   # at the count's own batch
            if within:
                chosen = cheapest[0], within
                how = (f"the count of the cheapest plan, the one found within {limits_text(job)} (the counts "
                       "around it cost more)")
    elif job["objective"] == "cost" and table is not None:
        per_node = job.get("gpus_per_node") or catalog.load_gpu(job["gpu"]).gpus_per_node
        found = tradeoffs.cheapest(table.rows(tradeoffs.standard_counts(counts[0], top, per_node), None))
        chosen = (found[0]["gpus"], found[0]["result"]) if found else None
        how, note = "the fastest count within the cheapest plan's cost slack", found[1] if found else None
    else:
        chosen = _by_objective(search, job, top, headroom_gib)
        how = {"cost": "the count with the cheapest plan", "time": "the count with the fastest plan",
               "throughput": "the count with the highest throughput"}[job["objective"]]
    if chosen is None:
        fallback = top
        if largest:
            return largest[0], (f"{SIZING_PREFIX}{tried}, and none meets {limits_text(job)}; the plan uses "
                                f"{largest[0]:,}, the most GPUs a layout can use at this batch ({_outcome(largest[1])})"), False, None
        if job.get("budget_usd") and not job.get("deadline_days"):
            cheapest = _cheapest(search, job, counts, headroom_gib)
            fallback = cheapest[0] if cheapest else top
            if cheapest:
                return fallback, (f"{SIZING_PREFIX}{tried}, and none meets {limits_text(job)}; the plan uses "
                                  f"{fallback:,}, the count of the cheapest plan"), False, None
        memory = (f"a layout that keeps {headroom_gib:.2f} GiB of memory free" if headroom_gib > 0
                  else "the memory the model needs")
        return fallback, (f"{SIZING_PREFIX}{tried}, and none meets {limits_text(job) or memory}; "
                          f"the plan uses {fallback:,}"), False, None
    gpus, best = chosen
    return gpus, f"{SIZING_PREFIX}{gpus:,} GPU{'s' if gpus != 1 else ''}, {how} ({_outcome(best)}); {tried}", True, note


def _inside_evidence(table: tradeoffs.Table, job: dict, chosen: tuple[int, dict], days: float, top: int
                     ) -> tuple[tuple[int, dict], str | None]:
    """A deadline's count against the evidence rule (module doc): `chosen` (count, its best layout meeting the date,
    `days`) kept, or the cheapest standard count up to 4x whose best layout (table: the job's limits dropped) is
    inside the evals' evidence and finishes by `days`; and the sentence that states the trade (None: the chosen
    layout is inside the evidence)."""
    gpus, best = chosen
    config = best["config"]
    outside = departures_of(config, shape_of(catalog.load_model(job["model"]), config["seq"], config["gpus_per_node"]),
                            cite=False)
    if not outside or not best.get("training"):
        return chosen, None
    per_node = job.get("gpus_per_node") or catalog.load_gpu(job["gpu"]).gpus_per_node
    where = (f"on {gpus:,} GPUs the layout that finishes by {days:.3g} days, {label(config)}, is outside the evals' "
             f"evidence ({'; '.join(outside)})")
    rows = table.rows(tradeoffs.standard_counts(gpus, min(top, 4 * gpus), per_node), None)
    inside = [r for r in rows if r["departures"] == 0 and r["days"] <= days]
    if not inside:
        return chosen, f"{where}, and no standard count up to {min(top, 4 * gpus):,} GPUs finishes by then inside it"
    alt = min(inside, key=lambda r: (r["cost_usd"], r["days"]))
    gain = alt["cost_usd"] / best["training"]["cost_usd"] - 1
    than = f"{alt['gpus']:,} GPUs with {alt['layout']} ({alt['days']:.1f} days, ${alt['cost_usd']:,.0f})"
    if gain < 0:
        return (alt["gpus"], alt["result"]), f"{where}, and {than}, inside it, costs {-gain:.1%} less: the plan takes them"
    if gain < EVIDENCE_MARGIN:
        return (alt["gpus"], alt["result"]), (
            f"{where} and only {gain:.1%} cheaper than {than}, inside it: a layout outside the evidence must win by at "
            f"least {EVIDENCE_MARGIN:.0%}, so the plan takes {alt['gpus']:,} GPUs")
    return chosen, (f"{where}: it is {gain:.1%} cheaper than the cheapest count that finishes by then with a layout "
                    f"inside it, {than}, over the {EVIDENCE_MARGIN:.0%} margin such a layout must clear; a risk")


def what_would_meet(search: Search, job: dict, headroom_gib: float) -> str | None:
    """When the job's own count fails its limits or memory: the count that would meet them, as a sentence."""
    gpus = job["gpus"]
    limits = limits_text(job)
    if limits and _best(search, job, gpus, headroom_gib, with_limits=False) is not None:
        if job.get("deadline_days"):
            top = BEYOND * max(DEFAULT_MAX_GPUS, gpus)
            above = [c for c in ladder(job, top) if c > gpus]
            chosen = _fewest(search, job, [gpus, *above], headroom_gib, refine=True) if above else None
            if chosen is None:
                return f"no GPU count up to {top:,} meets {limits}"
        else:  # a budget: fewer GPUs cost less
            below = [c for c in ladder(job, gpus) if c < gpus]
            chosen = _most(search, job, below, headroom_gib)
            if chosen is None:
                cheapest = _cheapest(search, job, [*below, gpus], headroom_gib)
                return (f"no GPU count up to {gpus:,} meets {limits}" + (
                    f": the cheapest plan found, on {cheapest[0]:,} GPUs, costs "
                    f"${cheapest[1]['training']['cost_usd']:,.0f}" if cheapest and cheapest[1].get("training") else ""))
        return f"{chosen[0]:,} GPUs meet {limits} ({_outcome(chosen[1])})"
    above = [c for c in ladder(job, BEYOND * max(DEFAULT_MAX_GPUS, gpus)) if c > gpus]
    plain = {**job, "deadline_days": None, "budget_usd": None}
    chosen = _fewest(search, plain, above, headroom_gib, refine=False) if above else None
    if chosen is None:
        return None
    return f"{chosen[0]:,} GPUs fit it in memory ({_outcome(chosen[1])})"


def adapters_that_fit(job: dict) -> str | None:
    """For a fine-tune whose full training does not fit: whether LoRA, else QLoRA, fits on the same GPUs,
    on the leanest layout (data parallel, ZeRO-3 across GPUs, full recompute, micro-batch 1), as a sentence."""
    from trainplan.tools.perf.estimate import estimate

    for method, what in (("lora", "LoRA (adapters beside a frozen bf16 base)"),
                         ("qlora", "QLoRA (adapters beside a frozen 4-bit NF4 base)")):
        lean = leanest_layout(job["gpus"])
        try:
            result = estimate(model=job["model"], gpu=job["gpu"], gpus=job["gpus"], method=method, seq=job["seq"],
                              gbs=job["gbs"], precision=job["precision"], **lean)
        except InputError:   # the lean shape cannot take the job's batch (gbs under the data-parallel size)
            continue
        if result.fits:
            memory = result.memory_gib
            return (f"with {what} it fits: {memory.total:.2f} of {memory.capacity:.2f} GiB per GPU at ZeRO-"
                    f"{lean['zero']}, full recompute, micro-batch 1 (trainplan estimate --model {job['model']} --gpu "
                    f"{job['gpu']} --gpus {job['gpus']} --method {method} --zero {lean['zero']} --recompute full)")
    return None


SHORTEST_SEQ_TRIED = 256
"""The shortest sequence `shorter_seq_that_fits` tries (halving from the job's)."""


def longest_seq_that_fits(search: Search, job: dict, seqs: list[int]) -> tuple[int, dict] | None:
    """The first of `seqs` (longest first) at which a layout fits on the job's GPUs, and its best layout; None
    when none does. It fits as the plan at that sequence would: with the memory headroom the planner's last
    rung relaxes to (none; agent/plan_search.py search_relaxing), so a sequence it names never gets a plan that
    then finds no layout. The job's deadline and budget are not asked (fitting in memory is)."""
    for seq in seqs:
        result = search({**job, "seq": seq}, 1, False, 0.0, None)
        if result.candidates:
            return seq, result.candidates[0]
    return None


def shorter_seq_that_fits(search: Search, job: dict) -> str | None:
    """When no layout fits on the job's GPUs: the longest sequence, halving from the job's down to
    SHORTEST_SEQ_TRIED, at which one does (activations shrink with the sequence; the model states do
    not), as a sentence (longest_seq_that_fits); None when none does."""
    found = longest_seq_that_fits(search, job, halvings(job["seq"] // 2, SHORTEST_SEQ_TRIED))
    if found is None:
        return None
    return f"at seq {found[0]} it fits on the same {job['gpus']:,} GPUs ({_outcome(found[1])})"
