"""The collective cost model printed as nccl-tests prints a measurement: time, algbw and busbw per size
(nccl-tests doc/PERFORMANCE.md: algbw = S/t, busbw = algbw x (n-1)/n for all-gather and reduce-scatter,
x 2(n-1)/n for all-reduce), for one node and for groups spanning nodes, so the model can be set beside
an all_gather_perf / reduce_scatter_perf / all_reduce_perf run on a real cluster. Across nodes a ring's
busbw tends to k x the per-GPU NIC bandwidth (k ranks per node) and small sizes are latency-bound.
Run: python benchmarks/bench_collectives.py [--gpu h100] [--kind all_gather] [--ranks-per-node 8]"""

from __future__ import annotations

import argparse

import numpy as np

from trainplan.tools.hardware import catalog
from trainplan.tools.perf.collectives import KINDS, Group, bus_bytes_per_rank, collective_time_s
from trainplan.tools.hardware.specs import ClusterSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--kind", default="all_gather", choices=[k for k in KINDS if k != "p2p"])
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 16, 128])
    args = parser.parse_args()
    gpu = catalog.load_gpu(args.gpu)
    k = args.ranks_per_node
    sizes = 2.0 ** np.arange(10, 34, 3)
    for nodes in args.nodes:
        n = k * nodes
        cluster = ClusterSpec.build(gpu, n)
        times = collective_time_s(args.kind, sizes, Group(n, k), cluster)
        algbw = sizes / times / 1e9
        busbw = bus_bytes_per_rank(args.kind, sizes, n) / times / 1e9
        print(f"{args.kind} on {gpu.name}, {n} ranks ({k} per node, {nodes} node{'s' if nodes > 1 else ''})")
        print(f"{'size (B)':>14} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
        for size, t, a, b in zip(sizes, times, algbw, busbw):
            print(f"{int(size):>14} {t * 1e6:>12.1f} {a:>13.2f} {b:>13.2f}")
        print()


if __name__ == "__main__":
    main()
