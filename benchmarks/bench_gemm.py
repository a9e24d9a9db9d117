"""Print the modelled GEMM efficiency (compute.gemm_efficiency: share of the dense peak one GEMM kernel
reaches) over shapes, so the curve the step model uses is visible:

- square GEMMs from 64 to 16K: launch floor, then the memory roofline, then eta_max;
- training-shaped GEMMs (M tokens x 4096 x 4096) over M;
- the wave sawtooth: a grid of tiles widened around one and two full waves;
- one batched kernel against the same GEMMs launched one by one (unfused attention's bmm).

Run: python benchmarks/bench_gemm.py [--gpu h100-sxm-80gb ...] [--precision bf16|fp8]"""

from __future__ import annotations

import argparse

from trainplan.tools.perf import compute
from trainplan.tools.hardware.catalog import load_gpu
from trainplan.tools.core.enums import Precision

DEFAULT_GPUS = ("a100-sxm-80gb", "h100-sxm-80gb", "b200")


def _row(label: str, values: list[float], spec: str = ".1%") -> str:
    return f"  {label:<28}" + "".join(f"{v:>8{spec}}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", nargs="+", default=list(DEFAULT_GPUS))
    parser.add_argument("--precision", choices=[p.value for p in Precision], default="bf16")
    args = parser.parse_args()
    precision = Precision(args.precision)
    for name in args.gpu:
        gpu = load_gpu(name)
        print(f"\n{gpu.name}: eta_max {gpu.gemm_efficiency:.0%} ({gpu.efficiency_basis}), {gpu.sm_count} SMs, "
              f"{compute.GEMM_TILE_M}x{compute.GEMM_TILE_N} tiles, launch {compute.KERNEL_LAUNCH_S * 1e6:g} us, "
              f"{precision.value} peak {gpu.peak_tflops(precision):g} TFLOP/s")

        sizes = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
        print("  square n x n x n            " + "".join(f"{n:>8}" for n in sizes))
        print(_row("efficiency", [compute.gemm_efficiency(n, n, n, gpu, precision) for n in sizes]))

        tokens = [128, 512, 1024, 2048, 4096, 8192, 16384, 65536]
        print("  M x 4096 x 4096, M =       " + "".join(f"{m:>8}" for m in tokens))
        print(_row("efficiency", [compute.gemm_efficiency(m, 4096, 4096, gpu, precision) for m in tokens]))

        # A 4-tile-high grid (M = 512, compute-bound with K = 8192), widened one column of 4 tiles at a
        # time around one and two full waves: one column past a full wave costs a whole second wave.
        columns = [gpu.sm_count // 4 - 1, gpu.sm_count // 4, gpu.sm_count // 4 + 1, gpu.sm_count // 2,
                   gpu.sm_count // 2 + 1]
        print("  tiles (512 x 128c x 8192)  " + "".join(f"{4 * c:>8}" for c in columns))
        print(_row("efficiency", [compute.gemm_efficiency(4 * compute.GEMM_TILE_M, c * compute.GEMM_TILE_N, 8192,
                                                          gpu, precision) for c in columns]))
        print(_row("wave efficiency", [compute.wave_efficiency(4 * compute.GEMM_TILE_M, c * compute.GEMM_TILE_N, gpu)
                                       for c in columns]))

        # Unfused attention of a 2K sequence, 24 heads of 96: the context GEMM (2048 x 96 x 2048).
        heads = 24
        one_kernel = compute.gemm_time_s(2048, 96, 2048, gpu, Precision.bf16, batch=heads)
        one_by_one = compute.gemm_time_s(2048, 96, 2048, gpu, Precision.bf16, count=heads)
        print(f"  2048x96x2048 x {heads} heads: one batched kernel {one_kernel * 1e6:.0f} us, "
              f"{heads} separate kernels {one_by_one * 1e6:.0f} us")

        # A LoRA adapter's x A (tokens x rank 64 x width 4096): a few output tiles, split along K (split-K).
        print("  LoRA x A, M x 64 x 4096, M =" + "".join(f"{m:>8}" for m in tokens[:6]))
        print(_row("split-K slices", [compute.split_k_slices(m, 64, 4096, gpu) for m in tokens[:6]], "d"))
        print(_row("time (us)", [compute.gemm_time_s(m, 64, 4096, gpu, precision) * 1e6 for m in tokens[:6]], ".1f"))


if __name__ == "__main__":
    main()
