"""The largest HFU over a seeded sweep of random valid layouts (evals/sweep.py): dense 7B-175B on A100,
H100 and B200, seq 2K-512K, flash and eager attention. HFU counts the FLOPs the kernels run, so it can
never pass the GPU's efficiency ceiling. Run: python benchmarks/bench_flops_ceiling.py [--count 200]"""

from __future__ import annotations

import argparse
import time

from trainplan.evals.sweep import sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    worst, over, n = None, 0, 0
    for layout, result, ceiling in sweep(args.count, args.seed):
        t, n = result.time, n + 1
        over += t.hfu > ceiling
        if worst is None or t.hfu > worst[1].hfu:
            worst = (layout, t, ceiling)
    layout, t, ceiling = worst
    print(f"{n} layouts in {time.perf_counter() - start:.1f} s; above the ceiling: {over}")
    print(f"max HFU {t.hfu:.1%} (ceiling {ceiling:.0%} on {layout['gpu']}); mfu {t.mfu:.1%}, "
          f"mfu_full_attention {t.mfu_full_attention:.1%}")
    print(f"  layout: {layout}")


if __name__ == "__main__":
    main()
