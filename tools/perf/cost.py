"""Training cost: steps, wall-clock days, GPU-hours and dollars.

    steps      = ceil(tokens / (gbs * seq))
    days       = steps * step_s / goodput / 86400
    gpu_hours  = gpus * steps * step_s / goodput / 3600
    cost_usd   = gpu_hours * price

Goodput is the share of wall-clock time that trains: real runs lose time to failures, restarts,
checkpointing and evaluation. Llama 3 405B reports "more than 90% effective training time"
(Llama 3 paper §3.3.4) with 466 interruptions in 54 days; we default to 0.9.

An optional batch-size ramp (gbs grows linearly from ramp_start_gbs over ramp_tokens) is costed by
integrating the step time over the ramp, since small batches run with more pipeline bubble.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT
from trainplan.tools.core.bounds import MAX_PRICE_PER_GPU_HOUR, MIN_GOODPUT
from trainplan.tools.core.errors import InputError

SECONDS_PER_DAY = 86400.0
MAX_STEP_S = 1e6
"""Longest step time a cost may use (11.6 days per step): past it the input is not a step time."""


@dataclass
class CostResult:
    tokens: float
    steps: int
    days: float
    gpu_hours: float
    cost_usd: float
    goodput: float
    price: float

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "days": self.days,
            "gpu_hours": self.gpu_hours,
            "cost_usd": self.cost_usd,
            "goodput": self.goodput,
            "price_per_gpu_hour": self.price,
        }


MAX_TRAINING_TOKENS = 1e15
"""Most training tokens a job may name (1,000T; the largest published runs train on tens of T)."""


def parse_tokens(value: str | float | int | None) -> float | None:
    """'15.6T', '15.6e12', '300B', '2M' or a number -> tokens as a float; InputError otherwise."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        tokens = float(value)
    else:
        text = str(value).strip().replace(",", "").replace("_", "")
        multipliers = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
        scale = 1.0
        if text and text[-1].lower() in multipliers:
            scale = multipliers[text[-1].lower()]
            text = text[:-1]
        try:
            tokens = float(text) * scale
        except ValueError:
            raise InputError(f"tokens='{value}' is not a number: write e.g. 15.6T, 15.6e12 or 300B") from None
    if not math.isfinite(tokens) or tokens <= 0:
        raise InputError(f"tokens={value} must be a positive number of training tokens")
    if tokens > MAX_TRAINING_TOKENS:
        raise InputError(f"tokens={value} is {tokens:.3g} tokens, more than {MAX_TRAINING_TOKENS:.0e} (the largest "
                         "published runs train on tens of T): check the number and its unit, e.g. 15.6T")
    return tokens


def training_cost(tokens: float, tokens_per_step: float, step_s: float, gpus: int, price: float,
                  goodput: float = DEFAULT_GOODPUT) -> CostResult:
    """Steps, days, GPU-hours and dollars to train `tokens` at a fixed batch and step time."""
    check_cost_inputs(price, goodput, step_s)
    steps = math.ceil(tokens / tokens_per_step)
    wall_s = steps * step_s / goodput
    gpu_hours = gpus * wall_s / 3600
    return _finite(CostResult(tokens=tokens, steps=steps, days=wall_s / SECONDS_PER_DAY, gpu_hours=gpu_hours,
                              cost_usd=gpu_hours * price, goodput=goodput, price=price))


def check_cost_inputs(price: float, goodput: float, step_s: float | None = None) -> None:
    """The price, goodput and step time a cost may use: finite, goodput in [MIN_GOODPUT, 1], a price in
    [0, MAX_PRICE_PER_GPU_HOUR], a positive step time (the CLI, the tools and MCP all come through here)."""
    for name, value in (("price", price), ("goodput", goodput), ("step_s", step_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise InputError(f"{name}={value!r} is not a finite number: give a real value")
    if not 0 < goodput <= 1:
        raise InputError(f"goodput={goodput} must be in (0, 1]: e.g. 0.9 for 90% effective training time")
    if goodput < MIN_GOODPUT:
        raise InputError(f"goodput={goodput} is below {MIN_GOODPUT:.0%}: it is the share of wall-clock time that "
                         "trains, e.g. 0.9 for 90%")
    if price < 0:
        raise InputError(f"price={price} must not be negative")
    if price > MAX_PRICE_PER_GPU_HOUR:
        raise InputError(f"price={price:g} dollars per GPU-hour is over {MAX_PRICE_PER_GPU_HOUR:,.0f}: give dollars "
                         "per GPU-hour, e.g. 2.5")
    if step_s is not None and not 0 < step_s <= MAX_STEP_S:
        raise InputError(f"step_s={step_s:g} must be positive and at most {MAX_STEP_S:.0e} seconds (11.6 days per "
                         "step): give the seconds of one training step")


def _finite(cost: CostResult) -> CostResult:
    """A cost whose every figure is a finite number; else the one line that says which input is too large."""
    if not all(math.isfinite(v) for v in (cost.days, cost.gpu_hours, cost.cost_usd)):
        raise InputError("the training cost overflows a float: check tokens, step_s, gpus and price "
                         f"(tokens={cost.tokens:g}, price={cost.price:g})")
    return cost


@dataclass(frozen=True)
class BatchRamp:
    """A batch-size ramp: gbs grows linearly from start_gbs to final_gbs over the run's first `tokens`."""

    start_gbs: int
    final_gbs: int
    tokens: float


@dataclass(frozen=True)
class TrainingRun:
    """What a training cost needs besides the step: the token budget, dollars per GPU-hour (None: the GPU's
    catalog price), goodput (None: DEFAULT_GOODPUT) and an optional batch ramp (start gbs, ramp tokens)."""

    tokens: float | None
    price: float | None = None
    goodput: float | None = None
    ramp_start_gbs: int | None = None
    ramp_tokens: float | None = None


def ramp_cost(tokens: float, seq: int, ramp: BatchRamp, step_s_for_gbs: Callable[[int], float], gpus: int,
              price: float, goodput: float = DEFAULT_GOODPUT, points: int = 8) -> CostResult:
    """Cost with a linear batch ramp: integrate step time per token over `points` ramp segments."""
    check_cost_inputs(price, goodput)
    final_gbs, ramp_start_gbs, ramp_tokens = ramp.final_gbs, ramp.start_gbs, ramp.tokens
    if ramp_tokens > tokens:
        raise InputError(f"ramp_tokens={ramp_tokens:g} exceeds tokens={tokens:g}: the batch ramp is the start of "
                         "the run, so give fewer ramp tokens (Llama 3 405B ramped over 2.87T of 15.6T) or more tokens")
    seconds = 0.0
    steps = 0
    segment = ramp_tokens / points
    for i in range(points):
        gbs = round(ramp_start_gbs + (final_gbs - ramp_start_gbs) * (i + 0.5) / points)
        n = math.ceil(segment / (gbs * seq))
        steps += n
        seconds += n * step_s_for_gbs(gbs)
    n = math.ceil((tokens - ramp_tokens) / (final_gbs * seq))
    steps += n
    seconds += n * step_s_for_gbs(final_gbs)
    wall_s = seconds / goodput
    gpu_hours = gpus * wall_s / 3600
    return _finite(CostResult(tokens=tokens, steps=steps, days=wall_s / SECONDS_PER_DAY, gpu_hours=gpu_hours,
                              cost_usd=gpu_hours * price, goodput=goodput, price=price))
