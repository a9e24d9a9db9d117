"""Kernel times (compute.py): the GEMM model's wave quantisation, eta_max ceiling, memory
roofline and launch floor, and the launches of flash attention, on the catalog's A100, H100 and B200."""

import random

import pytest

from trainplan.tools.perf import compute
from trainplan.tools.hardware.catalog import load_gpu
from trainplan.tools.core.enums import Precision

GPUS = ("a100-sxm-80gb", "h100-sxm-80gb", "b200")
TM, TN = compute.GEMM_TILE_M, compute.GEMM_TILE_N


@pytest.mark.parametrize("name", GPUS)
def test_one_column_of_tiles_past_a_full_wave_costs_a_second_wave(name):
    gpu = load_gpu(name)
    rows = 4                                    # every catalog SM count (108, 132, 148) divides by 4
    full = gpu.sm_count // rows                 # columns that fill exactly one wave
    depth = 65536                               # deep enough that the launch is under 2% of a wave
    one_wave = compute.gemm_time_s(rows * TM, full * TN, depth, gpu, Precision.bf16)
    spilled = compute.gemm_time_s(rows * TM, full * TN + 1, depth, gpu, Precision.bf16)
    assert compute.wave_efficiency(rows * TM, full * TN, gpu) == 1.0
    assert compute.wave_efficiency(rows * TM, full * TN + 1, gpu) < 0.55
    # One more column of tiles adds 1/128 of a tile column of work but a whole wave of time (the
    # nearly empty tiles of the second wave are charged their useful share, hence a little under 2).
    assert 1.9 < spilled / one_wave <= 2.0


@pytest.mark.parametrize("name", GPUS)
def test_full_wave_shapes_climb_towards_eta_max(name):
    gpu = load_gpu(name)
    sizes = [1, 2, 4, 8, 16, 64, 256]
    # M spans `waves` full waves of 4-tile-wide rows (N = 512): no partial wave, only size changes.
    efficiencies = [compute.gemm_efficiency(TM * gpu.sm_count // 4 * w, 4 * TN, 4096, gpu, Precision.bf16)
                    for w in sizes]
    assert efficiencies == sorted(efficiencies)
    assert efficiencies[-1] == pytest.approx(gpu.gemm_efficiency, rel=0.01)
    assert efficiencies[0] < efficiencies[-1]


@pytest.mark.parametrize("name", GPUS)
@pytest.mark.parametrize("precision", [Precision.bf16, Precision.fp8])
def test_no_shape_runs_above_the_ceiling(name, precision):
    gpu = load_gpu(name)
    if precision is Precision.fp8 and gpu.fp8_tflops is None:
        pytest.skip(f"{name} has no FP8 tensor cores")
    rng = random.Random(7)
    for _ in range(300):
        m, n, k = (rng.randint(1, 1 << rng.randint(1, 17)) for _ in range(3))
        batch = rng.choice([1, 1, 2, 24, 96])
        efficiency = compute.gemm_efficiency(m, n, k, gpu, precision, batch=batch)
        assert 0 < efficiency <= gpu.gemm_efficiency * (1 + 1e-12), (m, n, k, batch)


@pytest.mark.parametrize("name", GPUS)
def test_the_launch_floor_sets_tiny_gemms(name):
    gpu = load_gpu(name)
    tiny = compute.gemm_time_s(16, 16, 16, gpu, Precision.bf16)
    assert compute.KERNEL_LAUNCH_S < tiny < 1.01 * compute.KERNEL_LAUNCH_S
    # Ten launches cost ten floors; ten GEMMs batched in one kernel cost about one.
    assert compute.gemm_time_s(16, 16, 16, gpu, Precision.bf16, count=10) == pytest.approx(10 * tiny)
    assert compute.gemm_time_s(16, 16, 16, gpu, Precision.bf16, batch=10) < 1.01 * compute.KERNEL_LAUNCH_S
    # A large GEMM barely notices it.
    big = compute.gemm_time_s(8192, 8192, 8192, gpu, Precision.bf16)
    assert compute.KERNEL_LAUNCH_S / big < 0.01


@pytest.mark.parametrize("name", GPUS)
def test_a_thin_gemm_is_memory_bound(name):
    gpu = load_gpu(name)
    m, n, k = 16, 8192, 8192                   # 16 tokens through an 8K x 8K weight: reads the weight
    slices = compute.split_k_slices(m, n, k, gpu)   # 64 output tiles: split along K where they fill under a wave
    assert slices == max(1, gpu.sm_count // 64)
    bytes_moved = 2 * (m * k + k * n + m * n) + (compute.split_k_partial_bytes(m, n, slices) if slices > 1 else 0)
    weight_read_s = bytes_moved / (gpu.hbm_bandwidth_gb_s * 1e9 * compute.MEMORY_BOUND_EFFICIENCY)
    assert compute.gemm_time_s(m, n, k, gpu, Precision.bf16) == pytest.approx(
        weight_read_s + compute.KERNEL_LAUNCH_S, rel=1e-9)


@pytest.mark.parametrize("name", GPUS)
def test_a_gemm_with_few_output_tiles_is_split_along_k(name):
    """A LoRA adapter's x A (256 tokens, rank 64, width 5120) has two 128x128 output tiles: unsplit it would run on
    two SMs at 2/sm_count of the peak; split along K it fills the SMs and falls to the memory roofline."""
    gpu = load_gpu(name)
    m, n, k = 256, 64, 5120
    slices = compute.split_k_slices(m, n, k, gpu)
    assert slices == min(gpu.sm_count // 2, k // compute.SPLIT_K_MIN_DEPTH) > 1
    assert compute.wave_efficiency(m, n, gpu, slices=slices) > 10 * compute.wave_efficiency(m, n, gpu)
    unsplit_s = 2.0 * m * n * k / (gpu.bf16_tflops * 1e12 * gpu.gemm_efficiency * compute.wave_efficiency(m, n, gpu))
    assert compute.gemm_time_s(m, n, k, gpu, Precision.bf16) - compute.KERNEL_LAUNCH_S < unsplit_s / 3
    # a GEMM whose tiles fill a wave, or whose K is shallower than one slice, is not split
    assert compute.split_k_slices(8192, 8192, 8192, gpu) == 1
    assert compute.split_k_slices(256, 64, compute.SPLIT_K_MIN_DEPTH - 1, gpu) == 1


@pytest.mark.parametrize("name", GPUS)
def test_a_batched_kernel_shares_its_waves(name):
    gpu = load_gpu(name)
    heads = 24                                  # unfused attention's context GEMM, one per head
    batched = compute.gemm_time_s(2048, 96, 2048, gpu, Precision.bf16, batch=heads)
    one_by_one = compute.gemm_time_s(2048, 96, 2048, gpu, Precision.bf16, count=heads)
    assert batched < one_by_one / 2
    # Batching never beats the ceiling: its tiles fill the waves at best.
    flops = 2 * 2048 * 96 * 2048 * heads
    assert flops / batched <= gpu.bf16_tflops * 1e12 * gpu.gemm_efficiency


def test_non_positive_dimensions_cost_nothing():
    gpu = load_gpu("h100-sxm-80gb")
    assert compute.gemm_time_s(0, 4096, 4096, gpu, Precision.bf16) == 0.0
    assert compute.gemm_time_s(4096, 4096, 0, gpu, Precision.bf16, batch=8) == 0.0


def test_flash_attention_pays_one_launch_forward_and_three_backward():
    gpu = load_gpu("h100-sxm-80gb")
    forward, backward = compute.attention_time_s(16, 16, 1, 64, 64, gpu)
    assert forward == pytest.approx(compute.KERNEL_LAUNCH_S, rel=0.01)
    assert backward == pytest.approx(compute.FLASH_BACKWARD_KERNELS * compute.KERNEL_LAUNCH_S, rel=0.01)
    # A long sequence is compute-bound: backward / forward -> 2.5 (five matmuls against two).
    forward, backward = compute.attention_time_s(65536, 65536, 8, 128, 128, gpu)
    assert backward / forward == pytest.approx(2.5, rel=1e-3)
