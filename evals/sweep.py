"""A seeded sweep of random valid layouts (dense 7B-175B; A100, H100, B200; seq 2K-512K), for the
FLOPs-convention invariants: 0 < mfu <= hfu <= the GPU's efficiency ceiling, and the hardware
TFLOP/s never above that share of the peak (tests/test_flops_convention.py checks them on a small
sweep; benchmarks/bench_flops_ceiling.py prints the largest HFU of a large one)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import trainplan
from trainplan.tools.hardware.catalog import load_gpu
from trainplan.tools.perf.compute import efficiency_ceiling
from trainplan.tools.config.results import Estimate
from trainplan.tools.core.errors import InputError

MODELS = ("llama3-8b", "mistral-7b", "qwen2.5-7b", "llama3-70b", "qwen2.5-72b", "gpt3-175b")
GPUS = ("a100-sxm-80gb", "h100-sxm-80gb", "b200")
SEQS = (2048, 4096, 8192, 32768, 131072, 524288)


def random_layout(rng: random.Random) -> dict:
    """Keyword arguments of one random layout (it may still be invalid for its model)."""
    gpus = rng.choice((8, 16, 64, 256, 1024))
    tp = rng.choice((1, 2, 4, 8))
    pp = rng.choice((1, 2, 4, 8))
    cp = rng.choice((1, 2, 4, 8, 16))
    layout = dict(model=rng.choice(MODELS), gpu=rng.choice(GPUS), gpus=gpus, tp=tp, pp=pp, cp=cp,
                  seq=rng.choice(SEQS), mbs=rng.choice((1, 2)), zero=rng.choice((0, 1, 2, 3)),
                  recompute=rng.choice(("none", "selective", "full")),
                  attention=rng.choice(("flash", "flash", "eager", "flash1", "flash2")), fused_kernels=rng.random() < 0.7)
    if layout["gpu"] != "a100-sxm-80gb" and rng.random() < 0.3:
        layout["precision"] = "fp8"
    dp = gpus // max(1, tp * pp * cp)
    layout["gbs"] = max(1, dp) * layout["mbs"] * rng.choice((1, 4, 16))
    return layout


def sweep(count: int, seed: int = 0) -> Iterator[tuple[dict, Estimate, float]]:
    """(layout, estimate result, efficiency ceiling) for `count` valid random layouts."""
    rng = random.Random(seed)
    found = 0
    while found < count:
        layout = random_layout(rng)
        try:
            result = trainplan.estimate(**layout)
        except InputError:
            continue
        found += 1
        yield layout, result, efficiency_ceiling(load_gpu(layout["gpu"]))
