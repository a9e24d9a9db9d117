"""Estimate calls per second (median of repeated batches). Run: python benchmarks/bench_estimate.py"""

import statistics
import time

import trainplan

JOBS = {
    "llama3-8b 64xH100 tp2 pp2": dict(model="llama3-8b", gpu="h100", gpus=64, tp=2, pp=2, gbs=256, seq=4096),
    "llama3-405b 16384xH100 tp8 pp16 vpp8": dict(model="llama3-405b", gpu="h100", gpus=16384, tp=8, pp=16, vpp=8,
                                                 zero=2, gbs=2048, seq=8192, recompute="none"),
    "deepseek-v3 2048xH800 dualpipe": dict(model="deepseek-v3", gpu="h800", gpus=2048, pp=16, ep=64,
                                           schedule="dualpipe", precision="fp8", gbs=15360, seq=4096),
}


def main() -> None:
    for name, job in JOBS.items():
        trainplan.estimate(**job)  # warm the catalog caches
        rates = []
        for _ in range(5):
            start, n = time.perf_counter(), 0
            while time.perf_counter() - start < 0.5:
                trainplan.estimate(**job)
                n += 1
            rates.append(n / (time.perf_counter() - start))
        print(f"{name:40s} {statistics.median(rates):8.1f} estimates/s (median of 5)")


if __name__ == "__main__":
    main()
