"""Cost arithmetic and token parsing."""

import math

import pytest

from trainplan.tools.perf.cost import BatchRamp, parse_tokens, ramp_cost, training_cost
from trainplan.tools.core.errors import InputError


@pytest.mark.parametrize("text, tokens", [("15.6T", 15.6e12), ("15.6e12", 15.6e12), ("300B", 3e11),
                                          ("2M", 2e6), ("1,000", 1000.0), (15e12, 15e12)])
def test_parse_tokens(text, tokens):
    assert parse_tokens(text) == pytest.approx(tokens)


@pytest.mark.parametrize("bad", ["lots", "-5T", "0", "nan", ""])
def test_parse_tokens_rejects(bad):
    with pytest.raises(InputError):
        parse_tokens(bad)


def test_training_cost_arithmetic():
    # 1e12 tokens at 4M tokens per step = 238,419 steps (ceil); 10 s per step on 1000 GPUs at 90% goodput.
    cost = training_cost(1e12, 4 * 2**20, 10.0, 1000, price=2.0, goodput=0.9)
    assert cost.steps == math.ceil(1e12 / (4 * 2**20))
    wall_s = cost.steps * 10.0 / 0.9
    assert cost.days == pytest.approx(wall_s / 86400)
    assert cost.gpu_hours == pytest.approx(1000 * wall_s / 3600)
    assert cost.cost_usd == pytest.approx(cost.gpu_hours * 2.0)


def test_goodput_validated():
    with pytest.raises(InputError):
        training_cost(1e12, 1e6, 1.0, 8, 2.0, goodput=1.5)


def test_ramp_costs_more_when_small_batches_are_slower_per_token():
    # Step time with a fixed overhead: small batches pay it more often per token.
    def step_s(gbs):
        return 1.0 + gbs * 0.01

    flat = training_cost(1e9, 1024 * 2048, step_s(1024), 8, 2.0)
    ramped = ramp_cost(1e9, 2048, BatchRamp(start_gbs=128, final_gbs=1024, tokens=2e8), step_s, 8, 2.0)
    assert ramped.gpu_hours > flat.gpu_hours
    assert ramped.steps > flat.steps


def test_estimate_with_a_batch_ramp_costs_more_than_the_flat_batch():
    import trainplan

    job = dict(model="llama3-8b", gpu="h100", gpus=64, tp=2, pp=4, gbs=512, seq=4096, tokens="100B")
    flat = trainplan.estimate(**job).training
    ramped = trainplan.estimate(**job, ramp_start_gbs=64, ramp_tokens="50B").training
    assert ramped.steps > flat.steps
    assert ramped.gpu_hours > flat.gpu_hours
    with pytest.raises(InputError, match="ramp"):
        trainplan.estimate(**job, ramp_start_gbs=64)
    with pytest.raises(InputError, match="ramp_start_gbs"):
        trainplan.estimate(**job, ramp_start_gbs=4096, ramp_tokens="50B")
