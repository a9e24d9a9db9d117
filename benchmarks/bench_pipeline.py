"""Time the pipeline simulator: median of a few runs per schedule at (pp, m, vpp) =
(8, 64, 1), (16, 1024, 1), (16, 1024, 4). vpp applies to the interleaved schedule only (it needs
vpp >= 2, so it runs with 2 where the case says 1). Run: python benchmarks/bench_pipeline.py"""

from __future__ import annotations

import statistics
import time

from trainplan.tools.perf.pipeline import simulate

CASES = [(8, 64, 1), (16, 1024, 1), (16, 1024, 4)]
SCHEDULES = ["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"]
REPEATS = 5


def bench(schedule: str, pp: int, m: int, vpp: int, record_timeline: bool) -> tuple[float, float]:
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = simulate(schedule, pp, m, vpp=vpp, record_timeline=record_timeline)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result.bubble_fraction


def main() -> None:
    print(f"{'schedule':<12}{'pp':>4}{'m':>6}{'vpp':>5}{'timeline ms':>13}{'no-timeline ms':>16}{'bubble':>9}")
    for pp, m, vpp in CASES:
        for schedule in SCHEDULES:
            v = max(vpp, 2) if schedule == "interleaved" else 1
            if schedule != "interleaved" and vpp > 1:
                continue  # vpp > 1 is only meaningful for the interleaved schedule
            with_tl, bubble = bench(schedule, pp, m, v, True)
            without, _ = bench(schedule, pp, m, v, False)
            print(f"{schedule:<12}{pp:>4}{m:>6}{v:>5}{with_tl * 1e3:>13.1f}{without * 1e3:>16.1f}{bubble:>9.4f}")


if __name__ == "__main__":
    main()
