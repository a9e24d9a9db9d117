"""The one check of a request's numbers (check_job_numbers), shared by estimate, search and the tools: the Job,
Layout and search fields' values as callers give them, untyped from the Python API, bounded before any use."""

from __future__ import annotations

import functools
import math
import numbers
import typing
from typing import Any

from trainplan.tools.config.contract import (MAX_GPUS, MAX_SEQUENCES_OR_TOKENS, MIN_LINK_GB_S, PARALLEL_SIZES,
                                             POSITIVE_JOB_NUMBERS, Job, Layout, SearchOptions)
from trainplan.tools.core.bounds import MAX_PRICE_PER_GPU_HOUR, MIN_GOODPUT
from trainplan.tools.core.errors import InputError


def _whole_numbers(value: Any) -> list[Any]:
    """A pin may be one value or a list of them (search); estimate gives one."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


@functools.cache
def real_number_fields() -> frozenset[str]:
    """The Job, Layout and SearchOptions fields typed as real numbers (float or float | None, not text): price,
    goodput, the bandwidths, headroom_gib, lora_dropout, lora_alpha, capacity_factor, ..."""
    out = set()
    for model in (Job, Layout, SearchOptions):
        for name, info in model.model_fields.items():
            kinds = typing.get_args(info.annotation) or (info.annotation,)
            if float in kinds and str not in kinds:
                out.add(name)
    return frozenset(out)


def check_job_numbers(values: dict[str, Any], capacity_gib: float) -> None:
    """The one check of a request's numbers, shared by estimate, search and the tools: a number where one goes
    (real_number_fields; the Python API takes keywords untyped), no NaN or
    infinity anywhere, no bool where a number goes, counts within MAX_GPUS and MAX_SEQUENCES_OR_TOKENS
    (a parallel size no larger than the GPU count), positive prices, bandwidths, deadlines and budgets,
    a goodput in (0, 1], and a headroom that leaves some of the GPU's `capacity_gib` to use."""
    for name, value in values.items():
        if value is not None and name in real_number_fields() and (isinstance(value, bool)
                                                                   or not isinstance(value, numbers.Real)):
            raise InputError(f"{name}={value!r} must be a number")
    gpus = max((g for g in (values.get("gpus"), values.get("max_gpus")) if isinstance(g, int)), default=MAX_GPUS)
    for name, value in values.items():
        for item in _whole_numbers(value):
            if not isinstance(item, int) or isinstance(item, bool):
                continue
            if name in ("gpus", "max_gpus") and item > MAX_GPUS:
                raise InputError(f"{name}={item:,} is more GPUs than any cluster (at most {MAX_GPUS:,}): check the count")
            if name in PARALLEL_SIZES and item > gpus:
                raise InputError(f"{name}={item:,} is larger than the {gpus:,} GPUs: a parallel size divides the GPU count")
            if name in ("seq", "mbs", "gbs", "vpp", "ramp_start_gbs", "document_tokens") and item > MAX_SEQUENCES_OR_TOKENS:
                raise InputError(f"{name}={item:,} is past any published run (at most {MAX_SEQUENCES_OR_TOKENS:,}): "
                                 "check the number")
    for name, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{name}={value} is not a finite number: give a real value")
        if isinstance(value, bool) and name in POSITIVE_JOB_NUMBERS + ("headroom_gib", "goodput"):
            raise InputError(f"{name}={value} is a true/false value, not a number")
    for name in POSITIVE_JOB_NUMBERS:
        value = values.get(name)
        if value is not None and not value > 0:
            raise InputError(f"{name}={value} must be a positive number")
    for name in ("intra_node_bw", "inter_node_bw"):
        value = values.get(name)
        if value is not None and value < MIN_LINK_GB_S:
            raise InputError(f"{name}={value} GB/s is slower than any training link (1 Gb Ethernet carries 0.125 "
                             f"GB/s): give GB/s per GPU per direction, at least {MIN_LINK_GB_S}, e.g. 50 for 400 Gb/s")
    price = values.get("price")
    if isinstance(price, (int, float)) and price > MAX_PRICE_PER_GPU_HOUR:
        raise InputError(f"price={price:g} dollars per GPU-hour is over {MAX_PRICE_PER_GPU_HOUR:,.0f}: give dollars "
                         "per GPU-hour, e.g. 2.5")
    goodput = values.get("goodput")
    if goodput is not None and 0 < goodput < MIN_GOODPUT:
        raise InputError(f"goodput={goodput} is below {MIN_GOODPUT:.0%}: it is the share of wall-clock time that "
                         "trains, e.g. 0.9 for 90%")
    if goodput is not None and not 0 < goodput <= 1:
        raise InputError(f"goodput={goodput} must be in (0, 1]: e.g. 0.9 for 90% effective training time")
    headroom = values.get("headroom_gib")
    if headroom is not None and not 0 <= headroom < capacity_gib:
        raise InputError(f"headroom_gib={headroom} must be at least 0 and below the GPU's {capacity_gib:g} GiB: "
                         "it is the memory to keep free, e.g. 4")


# --- what to train and on what --------------------------------------------------------------------
