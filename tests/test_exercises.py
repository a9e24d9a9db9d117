"""The lesson's exercises, answered by the tools."""

import numpy as np
import pytest

import trainplan
from trainplan.tools.perf.collective_sim import simulate_accumulate
from trainplan.tools.perf.pipeline import simulate

JOB = dict(model="llama3-8b", gpu="h100-sxm-80gb", gpus=64, tp=2, pp=2, seq=8192, gbs=256)


def test_activation_checkpointing_trade_off():
    """Full recompute cuts activation memory several-fold for about a third more compute."""
    none = trainplan.estimate(**JOB, recompute="none")
    full = trainplan.estimate(**JOB, recompute="full")
    assert none.memory_gib.activations / full.memory_gib.activations > 5
    slowdown = full.time.step_s / none.time.step_s
    assert 1.15 < slowdown < 1.40


def test_1f1b_versus_naive_pipeline():
    """Same bubble as GPipe for equal stages, but stage 0 holds p micro-batches instead of m."""
    p, m = 8, 32
    gpipe = simulate("gpipe", p, m)
    one_f_one_b = simulate("1f1b", p, m)
    assert gpipe.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert one_f_one_b.bubble_fraction == pytest.approx(gpipe.bubble_fraction)
    assert gpipe.peak_inflight_microbatches[0] == m
    assert one_f_one_b.peak_inflight_microbatches[0] == p


def test_gradient_accumulation_matches_the_large_batch():
    result = simulate_accumulate(ranks=4, micro_batches=8)
    assert result["max_abs_error"] < 1e-10
    assert result["all_reduces"] * 8 == result["all_reduces_without_accumulation"]
    assert result["bytes_sent_per_rank"] * 8 == pytest.approx(result["bytes_sent_per_rank_without_accumulation"])


def test_zero_offload_trains_70b_on_fewer_gpus_with_a_slower_optimizer_step():
    """16 H100 cannot hold Llama 3 70B's Adam states with ZeRO-1; ZeRO-Offload moves them to the CPU."""
    job = dict(model="llama3-70b", gpu="h100-sxm-80gb", gpus=16, tp=8, gbs=16, seq=4096, recompute="full")
    on_gpu = trainplan.estimate(**job, zero=1)
    offloaded = trainplan.estimate(**job, zero=1, optimizer_offload=True)
    assert not on_gpu.fits
    assert offloaded.fits
    assert offloaded.memory_gib.optimizer == 0
    assert offloaded.time.breakdown["optimizer"] > 10 * on_gpu.time.breakdown["optimizer"]


def test_cost_scales_with_price_and_tokens():
    base = trainplan.estimate(**JOB, tokens="1T", price=2.0).training
    double = trainplan.estimate(**JOB, tokens="2T", price=4.0).training
    assert double.cost_usd == pytest.approx(4 * base.cost_usd, rel=1e-3)
    assert np.isclose(double.gpu_hours, 2 * base.gpu_hours, rtol=1e-3)
