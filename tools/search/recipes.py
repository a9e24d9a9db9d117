"""What the search chooses beyond the parallel sizes when the request leaves it open: the module sets
of selective recompute, and the low-precision storage of an FP8 run.

Recompute modules (recompute.py; Megatron-Core --recompute-modules). A layout recomputes as little as
it needs to fit: the space enumerates it once, and memory scoring climbs a ladder, none, then
selective with ever more modules, and keeps the first step that fits. Each step only adds recompute
seconds and frees memory, so for every objective (all grow with the step time) that step is the best
of the ladder. The ladder's modules are those the model has, ordered by the seconds their recompute
adds per GiB of activations it frees, cheapest first; a module that frees memory at a higher price
than full recompute's average is left out (full recompute, tried on its own, frees it more
cheaply), as is one that frees nothing. The prices are the scalar model's own, measured once per
job on a probe layout (one GPU, mbs 1, the job's seq, precision and fixed knobs; time: step.stage_work
through search_score.work_pieces over the model's dense and MoE layers; memory:
search_score.vector_memory). Memory-bound recomputes (norms, activations) free their outputs for a
few memory passes, so they come first: the choice DeepSeek-V3 made, "all RMSNorm operations and MLA
up-projections" and the SwiGLU output (DeepSeek-V3 report §3.2.3, §3.3.3). Selective recompute with
Megatron's default set (core_attn) and full recompute are enumerated beside the ladder. A request's
recompute_modules is the only selective set tried. Only an engine that selects modules (Megatron) climbs the
ladder: the others checkpoint whole layers (tools/config/engines.py, recompute granularity).

Low-precision storage (DeepSeek-V3 report §3.3.3, part of its FP8 training framework): BF16 Adam
moments (bf16_moments) and FP8 caching of the SwiGLU inputs (fp8_activations). Both change memory;
fp8_activations also recomputes the MoE SwiGLU outputs, which the step time counts. With precision
fp8 and full training, each knob the request leaves open is chosen per layout: the first of
STORAGE_ORDER that fits is kept, so a layout that fits without them runs without them. With bf16,
or when the request sets them, they are as given.
"""

from __future__ import annotations

import numpy as np

from trainplan.tools.config.codes import RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.config.engines import selects_recompute_modules
from trainplan.tools.hardware.counting import is_moe_layer
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.perf.recompute import DEFAULT_MASK, MODULE_BITS, mask_of
from trainplan.tools.config.resolve import module_applies
from trainplan.tools.search.explain import label
from trainplan.tools.search.score import vector_memory, work_pieces
from trainplan.tools.search.space import STORAGE_KNOBS, SearchJob
from trainplan.tools.core.enums import Precision, Recompute, RecomputeModule, Schedule

STORAGE_ORDER = ((), (("bf16_moments", True), ("fp8_activations", True)))
"""Storage settings tried in order: as the engines default, then DeepSeek-V3's low-precision storage
(both knobs, as the report used them together); the first that fits is kept."""

_NONE, _SELECTIVE, _FULL = (RECOMPUTE_CODES[mode] for mode in (Recompute.none, Recompute.selective, Recompute.full))


def recompute_costs(job: SearchJob) -> dict[RecomputeModule | Recompute, tuple[float, float]]:
    """Per module the model has, and for full recompute: (seconds the recompute adds to the backward
    of one micro-batch through every layer, GiB of activations it frees), on the probe layout (module doc)."""
    model = job.model
    modules = [m for m in RecomputeModule if module_applies(model, m)]
    choices = [(_NONE, 0), (_FULL, 0), *((_SELECTIVE, MODULE_BITS[m]) for m in modules)]
    n = len(choices)
    one = np.ones(n, dtype=np.int64)
    rows = {"gpus": one, "tp": one, "pp": one, "cp": one, "ep": one, "dp": one, "vpp": one, "zero": one,
            "mbs": one, "m": one, "recompute": np.array([c for c, _ in choices]),
            "modules": np.array([mask for _, mask in choices]),
            "schedule": np.full(n, SCHEDULE_CODES[Schedule.one_f_one_b])}
    memory = vector_memory(job, rows)["total"]
    moe_layers = sum(1 for i in range(model.num_layers) if is_moe_layer(model, i))
    layers = np.array([model.num_layers - moe_layers, moe_layers], dtype=float)
    cluster, cache = job.cluster(1), {}
    backward = [work_pieces(model, cluster, job, (1, 1, 1, 1, code, mask, 0), cache)[:2, 1] @ layers
                for code, mask in choices]
    return {key: (float(backward[i] - backward[0]), float(memory[0] - memory[i]))
            for i, key in enumerate([Recompute.full, *modules], start=1)}


def module_ladder(job: SearchJob) -> tuple[int, ...]:
    """Masks of the cheapest-first order's prefixes (module doc): the modules that free memory at
    fewer seconds per GiB than full recompute does on average (beyond them, full recompute frees
    memory more cheaply and is tried on its own), by seconds per GiB."""
    costs = recompute_costs(job)
    seconds, freed = costs.pop(Recompute.full)
    full_rate = seconds / freed if freed > 0 else float("inf")
    rate = {m: s / f for m, (s, f) in costs.items() if f > 0}
    order = sorted((m for m in rate if rate[m] < full_rate), key=rate.get)
    return tuple(mask_of(order[:k]) for k in range(1, len(order) + 1))


def recompute_choices(job: SearchJob, given_modules) -> tuple[tuple, tuple]:
    """(ladder, options) of (recompute code, module mask) pairs for SearchJob.recompute_ladder and
    .recompute_options, over the recompute modes the job allows (its pins).

    ladder: none, then selective with each prefix of the cheapest-first order (or with the request's
    modules); each step adds recompute seconds and frees memory, so for every objective (all grow
    with the step time) the first step that fits is the best of them. options: the ladder's first
    step, selective with Megatron's default set (core_attn; unless the request names modules), full.
    A request that names modules and leaves recompute open gets selective recompute of those modules. A job
    whose engine selects no modules (tools/config/engines.py selects_recompute_modules) climbs no module ladder."""
    allowed = job.pins.recompute or tuple(RECOMPUTE_CODES.values())
    if given_modules is not None and not job.pins.recompute:
        allowed = (_SELECTIVE,)   # naming modules asks for selective recompute of them, as estimate reads it
    ladder = [(_NONE, 0)] if _NONE in allowed else []
    if _SELECTIVE in allowed:
        if given_modules is not None:
            masks = (mask_of(given_modules),)
        else:   # an engine that checkpoints whole layers runs no module set but the attention core (options)
            masks = module_ladder(job) if selects_recompute_modules(job.engine) else ()
        ladder += [(_SELECTIVE, mask) for mask in masks]
    options = ladder[:1]
    if _SELECTIVE in allowed and given_modules is None:
        options.append((_SELECTIVE, DEFAULT_MASK))
    if _FULL in allowed:
        options.append((_FULL, 0))
    return tuple(ladder), tuple(dict.fromkeys(options))


def storage_variants(job: SearchJob, given: dict) -> tuple[tuple[tuple[str, bool], ...], ...]:
    """The STORAGE_KNOBS settings each layout tries, in order (module doc); ((),) keeps the job's."""
    if job.precision is not Precision.fp8 or is_lora(job.method):
        return ((),)
    free = {k for k in STORAGE_KNOBS if given.get(k) is None}
    variants = [tuple(kv for kv in variant if kv[0] in free) for variant in STORAGE_ORDER]
    return tuple(dict.fromkeys(variants))


def chosen_note(job: SearchJob, config: dict) -> str | None:
    """What the search chose for a layout among the knobs the request left open (module doc), or None."""
    parts = []
    if "recompute_modules" in job.chosen and config["recompute"] == Recompute.selective.value \
            and config["recompute_modules"]:
        parts.append(f"recomputes {', '.join(config['recompute_modules'])} (the fewest modules that fit, cheapest "
                     f"seconds per GiB first)")
    stored = [k for k in STORAGE_KNOBS if k in job.chosen and config[k] and len(job.storage_variants) > 1]
    if stored:
        parts.append(f"needs DeepSeek-V3's low-precision storage to fit ({', '.join(stored)}; report §3.3.3)")
    return f"{label(config)} " + "; ".join(parts) if parts else None
