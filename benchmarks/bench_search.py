"""Time the layout search: layouts evaluated per second end to end (enumeration, masks, memory,
vectorised time, exact re-score), the ratio to Calculon's 143/s (Turing-530B on 5,128 A100: 8,112
layouts in 57 s) and to our own scalar path (resolve_config + evaluate per layout, timed on a
sample of the same space), then the quality checks on the published layouts.
Run: python benchmarks/bench_search.py [--repeats 3]"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from trainplan.tools.search.driver import (
    CALCULON_LAYOUTS_PER_S, KNOBS, enumerate_space, exact, label, prepare, search, validity,
)

CASES = [
    ("Llama 3 405B, 16,384 H100, seq 8K, gbs 2048", dict(model="llama3-405b", gpu="h100", gpus=16384, gbs=2048, seq=8192)),
    ("DeepSeek-V3, 2,048 H800, seq 4K, gbs 15360, fp8",
     dict(model="deepseek-v3", gpu="h800", gpus=2048, gbs=15360, seq=4096, precision="fp8")),
    ("GPT-3 175B, 1,024 A100, seq 2K, gbs 1536", dict(model="gpt3-175b", gpu="a100-sxm-80gb", gpus=1024, gbs=1536, seq=2048)),
    ("Llama 3 70B, 64-1,024 H100 (max_gpus), 15T tokens",
     dict(model="llama3-70b", gpu="h100", gpus=64, max_gpus=1024, gbs=512, seq=8192, tokens="15T", pareto=True)),
]
SCALAR_SAMPLE = 60


def scalar_rate(kwargs: dict, sample: int = SCALAR_SAMPLE) -> float:
    """Layouts per second of the exact scalar path on a random sample of the valid layouts."""
    kw = {k: v for k, v in kwargs.items() if k not in ("max_gpus", "pareto")}
    job, _, _ = prepare(SearchRequest.of(**kw))
    space = enumerate_space(job.model, kw["gpus"], job.gbs, job.seq, job.node, False, job.pins)
    reason, _, _ = validity(job.model, space, job.gbs, job.seq, job.node, False)
    valid = np.nonzero(reason < 0)[0]
    picks = np.random.default_rng(0).choice(valid, size=min(sample, valid.size), replace=False)
    start = time.perf_counter()
    for i in picks:
        exact(job, {k: int(space[k][i]) for k in KNOBS})
    return len(picks) / (time.perf_counter() - start)


def quality() -> None:
    print("\nQuality checks (exact re-scored figures)")
    job = dict(model="llama3-405b", gpu="h100", gpus=16384, gbs=2048, seq=8192)
    top = search(**job, top_k=100)
    best = top.candidates[0]["time"]["tokens_per_s"]
    meta = search(**job, tp=8, pp=16, cp=1, top_k=1).candidates[0]
    rank = 1 + sum(c["time"]["tokens_per_s"] > meta["time"]["tokens_per_s"] for c in top.candidates)
    print(f"  405B best: {label(top.candidates[0]['config'])}  {best:,.0f} tokens/s")
    print(f"  Meta TP8 PP16 CP1, best variant: {label(meta['config'])}  {meta['time']['tokens_per_s']:,.0f} "
          f"tokens/s = {meta['time']['tokens_per_s'] / best:.3f} of the best, rank {rank}"
          + ("+" if rank > len(top.candidates) else "") + " (ZeRO twins collapsed)")
    job = dict(model="deepseek-v3", gpu="h800", gpus=2048, gbs=15360, seq=4096, precision="fp8")
    top = search(**job, top_k=1).candidates[0]
    print(f"  DeepSeek-V3 best: {label(top['config'])}  {top['time']['tokens_per_s']:,.0f} tokens/s")
    for name, pins in (("DeepSeek's TP1 PP16 EP64", dict(tp=1, pp=16, ep=64)), ("best TP2", dict(tp=2)),
                       ("best TP4", dict(tp=4)), ("best TP8", dict(tp=8))):
        c = search(**job, **pins, top_k=1).candidates[0]
        print(f"  {name:<25} {label(c['config']):<48} {c['time']['tokens_per_s'] / top['time']['tokens_per_s']:.3f} "
              f"of the best, MFU {c['time']['mfu']:.1%}, {c['memory_gib']['total']:.1f} GiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-quality", action="store_true")
    args = parser.parse_args()
    print(f"{'case':<52}{'layouts':>9}{'feasible':>9}{'wall s':>8}{'layouts/s':>11}{'x Calculon':>11}"
          f"{'scalar/s':>10}{'x scalar':>9}")
    for name, kwargs in CASES:
        runs = [search(**kwargs) for _ in range(args.repeats)]
        wall = statistics.median(r.wall_s for r in runs)
        result = runs[0]
        rate = result.evaluated / wall
        scalar = scalar_rate(kwargs)
        print(f"{name:<52}{result.evaluated:>9,}{result.feasible:>9,}{wall:>8.2f}{rate:>11,.0f}"
              f"{rate / CALCULON_LAYOUTS_PER_S:>11,.0f}{scalar:>10,.0f}{rate / scalar:>9,.0f}")
        print(f"{'':<4}winner: {label(result.candidates[0]['config'])}"
              + (f" on {result.candidates[0]['config']['gpus']} GPUs" if kwargs.get("max_gpus") else "")
              + f", MFU {result.candidates[0]['time']['mfu']:.1%}")
    if not args.no_quality:
        quality()


if __name__ == "__main__":
    main()
