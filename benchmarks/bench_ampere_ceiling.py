"""The Ampere GEMM efficiency each A100 eval case implies, grouped by family, and what separates them.

1. Per case: the family's gemm_efficiency (eta_max, tools/core/calibration.py) solved by bisection so that
   the case's throughput figure (step time, tokens/s, TFLOP/s or HFU: the first it publishes) matches
   exactly, every other constant as in the calibration table. Printed with the error at the table's
   value, the published HFU in the model's own count (the FLOPs the kernels run: causal under flash,
   plus recompute), the layout traits that could matter (recompute, tokens per micro-batch, hidden
   per TP rank) and, at the table's value, how a block's compute splits into GEMMs, the attention
   core and memory-bound elementwise work, and the step's shares that are not compute; then the
   cases whose published HFU is above the model's efficiency ceiling (compute.efficiency_ceiling).
2. Korthikanti et al. 2022 Table 4 measured one 22B layer (no step-level overheads: no pipeline, data
   parallelism or optimizer) three ways: the eta_max each implies, and the recompute's cost.
3. Korthikanti et al. 2022 Table 5 ran each model with full recompute without sequence parallelism and
   with selective recompute and sequence parallelism, the same TP, PP and batch: the eta_max at which
   the model's gap equals the published one if all of the gap were GEMM time.

--family hopper (or blackwell) prints the table of part 1 for that family's cases instead: the MPT rows that
ran on both A100 and H100 show whether a pattern belongs to the GPU or to the runs.

Run: python benchmarks/bench_ampere_ceiling.py [--family ampere|hopper|blackwell] [--case ID-PREFIX] [--pairs-only]"""

from __future__ import annotations

import argparse
import re
import statistics

import trainplan
from trainplan.evals.cases import evaluate_prediction
from trainplan.evals.dataset import load_dataset
from trainplan.tools.core import calibration
from trainplan.tools.hardware import catalog
from trainplan.tools.perf import compute, layer_compute, recompute, step
from trainplan.tools.perf.collectives import collective_time_s, group_layout
from trainplan.tools.config.contract import Layout
from trainplan.tools.config.layout import resolve_with_batch
from trainplan.tools.hardware.specs import ClusterSpec

import fit_calibration   # benchmarks/, next to this script

FAMILY = "ampere"
# The figure solved for: the first of these a case publishes, else its first published figure that is
# neither a size nor a memory. Figures that grow with time (the rest grow with speed):
PREFERRED = ("step_s", "tokens_per_s_per_gpu", "hardware_tflops_per_gpu")
NOT_SPEED = ("params_b", "peak_memory_gib")
TIME_LIKE = ("step_s", "gpu_hours", "cost_usd", "days")
# Labels of the run files (evals/runs file id -> label); other files print under their id.
GROUPS = (("megatron-sc21", "SC21 2021 Megatron (eager)"),
          ("megatron-gpt3-175b", "Megatron GPT-3 175B README (eager)"),
          ("korthikanti-2022", "Korthikanti 2022 (eager, SP)"),
          ("bloom-176b", "BLOOM 176B (Megatron-DeepSpeed)"),
          ("mpt-llm-foundry", "MPT 125M-3B (FSDP, Triton flash)"),
          ("mpt-llm-foundry-large", "MPT 7B-70B (FSDP, Triton flash)"),
          ("flash-attention-gpt3", "FlashAttention GPT-3 rows"),
          ("ibm-fsdp-llama2", "IBM FSDP Llama 2"))
PAIR_SIZES = ("22b", "175b", "530b", "1t")
ETA_GRID = [x / 200 for x in range(100, 200)]   # 0.500 ... 0.995


def set_eta(value: float) -> None:
    """Replace FAMILY's gemm_efficiency in the calibration table, as the refit does."""
    fit_calibration._apply(FAMILY, {"gemm_efficiency": value})


def figure(case) -> tuple[str, bool] | None:
    """(quantity, True when larger means faster) of the figure solved for; None if the case has none."""
    names = [q for q in PREFERRED if q in case.published] + [q for q in case.published if q not in NOT_SPEED]
    return (names[0], names[0] not in TIME_LIKE) if names else None


def speed(case, dataset) -> float:
    """Predicted speed over published speed (> 1: the model is too fast)."""
    quantity, faster = figure(case)
    error = evaluate_prediction(case, dataset).error[quantity]
    return (1 + error) if faster else 1 / (1 + error)


def implied_eta(case, dataset, low: float = 0.3, high: float = 1.0, steps: int = 14) -> float | None:
    """eta_max at which the case's figure is matched; None outside [low, high]."""
    set_eta(high)
    if speed(case, dataset) < 1:
        return None
    set_eta(low)
    if speed(case, dataset) > 1:
        return None
    for _ in range(steps):
        mid = (low + high) / 2
        set_eta(mid)
        low, high = (low, mid) if speed(case, dataset) > 1 else (mid, high)
    return (low + high) / 2


def block_shares(case) -> dict[str, float]:
    """Shares of one block's compute (forward + backward, layer 0) by kind, at the current constants."""
    kwargs = case.kwargs()
    model = catalog.load_model(kwargs["model"])
    gpu = catalog.load_gpu(kwargs["gpu"])
    knobs = {k: v for k, v in kwargs.items() if k in Layout.model_fields}   # as tools/perf/estimate.py splits them
    cfg, _ = resolve_with_batch(model, kwargs["gpus"], fp8_supported=gpu.fp8_tflops is not None, **knobs)
    times = layer_compute.layer_times(model, cfg, gpu, 0)
    total = times.forward + times.backward_input + times.backward_weight
    by_key: dict[str, float] = {}
    for part in (times.forward_s, times.backward_input_s, times.backward_weight_s):
        for key, seconds in part.items():
            kind = "attn" if key == "attention/core" else "elem" if key == "elementwise" else "gemm"
            by_key[kind] = by_key.get(kind, 0.0) + seconds / total
    return by_key


def family_tables(dataset, prefix: str) -> None:
    table = calibration.FAMILY_EFFICIENCY[FAMILY]["gemm_efficiency"].value
    cases = [c for c in dataset.cases if c.kind == "prediction" and c.id.startswith(prefix)
             and catalog.load_gpu(c.kwargs()["gpu"]).architecture == FAMILY and figure(c)]
    print(f"{FAMILY} prediction cases: {len(cases)}; calibration table eta_max = {table:g}")
    summary, above = [], []
    labels = dict(GROUPS)
    for run in [r.id for r in dataset.runs]:
        label = labels.get(run, run)
        group = [c for c in cases if c.run == run]
        if not group:
            continue
        print(f"\n## {label}")
        print(f"{'case':<31} {'err@table':>9} {'eta*':>5} {'HFUpub':>6} {'rc':<4} {'tok/mb':>6} {'h/tp':>5} "
              f"{'set':<4} block: gemm/attn/elem   step: not-compute shares")
        implied = []
        for case in group:
            set_eta(table)
            quantity, _ = figure(case)
            error = evaluate_prediction(case, dataset).error[quantity]
            result = trainplan.estimate(**case.kwargs())
            hfu_published = result.time.hfu / speed(case, dataset)
            config = result.config
            shares = block_shares(case)
            others = ", ".join(f"{k} {v:.0%}" for k, v in result.time.shares.items()
                               if k != "compute" and v >= 0.005)
            ceiling = compute.efficiency_ceiling(catalog.load_gpu(case.kwargs()["gpu"]))
            if hfu_published > ceiling:
                above.append((case.id, hfu_published, ceiling))
            eta = implied_eta(case, dataset)
            if eta is not None:
                implied.append(eta)
            hidden = catalog.load_model(case.kwargs()["model"]).hidden_size
            recompute = str(getattr(config.recompute, "value", config.recompute))
            print(f"{case.id:<31} {error:>+9.1%} {'n/a' if eta is None else f'{eta:.3f}':>5} {hfu_published:>6.1%} "
                  f"{recompute[:4]:<4} {config.mbs * config.seq // config.cp:>6} "
                  f"{hidden // config.tp:>5} {'cal' if case.used_for_calibration else 'held':<4} "
                  f"{shares.get('gemm', 0):.0%}/{shares.get('attn', 0):.0%}/{shares.get('elem', 0):.0%}   {others}")
        if implied:
            summary.append((label, statistics.median(implied), min(implied), max(implied), len(implied)))
            print(f"implied eta_max: median {summary[-1][1]:.3f}, range {summary[-1][2]:.3f}-{summary[-1][3]:.3f} "
                  f"over {len(implied)} cases")
    set_eta(table)
    print("\n## Summary: implied eta_max per family (median, range)")
    for label, median, low, high, n in summary:
        print(f"{label:<40} {median:.3f}  {low:.3f}-{high:.3f}  ({n} cases)")
    print(f"\n## Published HFU (the model's count) above the model's efficiency ceiling: {len(above)} cases")
    for case_id, hfu, ceiling in above:
        print(f"{case_id:<34} {hfu:.1%} > {ceiling:.0%}")


def layer_ms(case, **override) -> tuple[float, float]:
    """(ms, forward TP-collective ms) of one block, forward + backward + recompute + exposed TP comm, for one
    micro-batch of the case's layout with `override` applied: what a per-layer profile measures."""
    kwargs = {**case.kwargs(), **override}
    model, gpu = catalog.load_model(kwargs["model"]), catalog.load_gpu(kwargs["gpu"])
    cluster = ClusterSpec.build(gpu, kwargs["gpus"], inter_node_bw=kwargs.get("inter_node_bw"))
    cfg, _ = resolve_with_batch(model, kwargs["gpus"], **{k: v for k, v in kwargs.items() if k in Layout.model_fields})
    groups = group_layout(cfg, cluster.gpus_per_node)
    layer = layer_compute.layer_times(model, cfg, gpu, 0)
    attention = (layer.forward_s["attention/core"], layer.backward_input_s["attention/core"])
    total = layer.forward + layer.backward_input + layer.backward_weight
    comm = step._layer_comm_s(model, cfg, cluster, groups, 0, attention, total, 0.0,
                              step.column_parallel_backward_s(layer, model, False))
    rerun = recompute.recomputed_forward_s(model, cfg, gpu, layer, [0])
    activation = 2 * cfg.mbs * cfg.seq / cfg.cp * model.hidden_size
    forward_tp = (2 * collective_time_s("all_reduce", activation, groups["tp"], cluster)
                  if cfg.tp > 1 and not cfg.sequence_parallel else 0.0)
    return 1e3 * (total + rerun + sum(comm.values())), 1e3 * forward_tp


def per_layer_times(dataset) -> None:
    """Korthikanti 2022 Table 4: one 22B layer's measured time, no step-level overheads in it."""
    table = calibration.FAMILY_EFFICIENCY[FAMILY]["gemm_efficiency"].value
    run = next(r for r in dataset.runs if r.id == "korthikanti-2022")
    text = next(f.value for f in run.context if f.name == "per_layer_times_22b")
    published = {label: float(re.search(rf"([\d.]+) ms {pattern}", text).group(1)) for label, pattern in
                 (("none", "no recompute"), ("full", "full recompute"), ("sel+sp", "selective"))}
    case = dataset.case("korthikanti-22b-full")
    variants = {"none": {"recompute": "none", "sequence_parallel": False},
                "full": {"recompute": "full", "sequence_parallel": False},
                "sel+sp": {"recompute": "selective", "sequence_parallel": True}}
    print("\n## Korthikanti 2022 Table 4: one 22B layer (TP8, 4 x 2048 tokens), forward + backward, measured")
    print(f"{'variant':<8} {'published':>9} {'model at table':>14} {'eta* for the layer':>18}")
    set_eta(table)
    model_ms = {label: layer_ms(case, **over) for label, over in variants.items()}
    for label, over in variants.items():
        low, high = 0.4, 1.0
        for _ in range(14):
            mid = (low + high) / 2
            set_eta(mid)
            low, high = (low, mid) if layer_ms(case, **over)[0] < published[label] else (mid, high)
        print(f"{label:<8} {published[label]:>7.1f}ms {model_ms[label][0]:>12.1f}ms {(low + high) / 2:>18.3f}")
    set_eta(table)
    rerun = model_ms["full"][1]
    print(f"full minus none: published {published['full'] - published['none']:.1f} ms, model "
          f"{model_ms['full'][0] - model_ms['none'][0]:.1f} ms; the model's recompute reruns no TP collective: "
          f"rerunning the forward all-reduces, as Megatron's checkpointed forward does, adds {rerun:.1f} ms")


def recompute_pairs(dataset) -> None:
    """Korthikanti 2022 Table 5: full recompute without SP against selective recompute with SP."""
    table = calibration.FAMILY_EFFICIENCY[FAMILY]["gemm_efficiency"].value
    print("\n## Korthikanti 2022 Table 5: full recompute (no SP) minus selective recompute + SP, same TP/PP/batch")
    print("(the gap is one forward of recomputed work plus the SP/no-SP difference; eta* is the value that would")
    print(" close it if all of it were GEMM time, and the selective step then lacks the last column)")
    print(f"{'model':<6} {'published gap':>13} {'model gap at table':>18} {'eta*':>6} {'selective step then lacks':>27}")
    for size in PAIR_SIZES:
        selective = dataset.case(f"korthikanti-{size}-selective")
        full = dataset.case(f"korthikanti-{size}-full")
        published = (full.published["step_s"].value, selective.published["step_s"].value)

        def steps() -> tuple[float, float]:
            return (trainplan.estimate(**full.kwargs()).time.step_s,
                    trainplan.estimate(**selective.kwargs()).time.step_s)

        set_eta(table)
        at_table = steps()
        best = None
        for eta in ETA_GRID:
            set_eta(eta)
            full_s, selective_s = steps()
            gap = (full_s - selective_s) - (published[0] - published[1])
            if best is None or abs(gap) < abs(best[1]):
                best = (eta, gap, selective_s)
        eta, _, selective_s = best
        lacks = published[1] - selective_s
        print(f"{size:<6} {published[0] - published[1]:>12.2f}s {at_table[0] - at_table[1]:>17.2f}s {eta:>6.3f} "
              f"{lacks:>+12.2f}s ({lacks / published[1]:+.0%} of it)")
    set_eta(table)


def main() -> None:
    global FAMILY
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--family", choices=sorted(calibration.FAMILY_EFFICIENCY), default=FAMILY,
                        help="the GPU family whose gemm_efficiency is solved for (the Korthikanti checks: ampere)")
    parser.add_argument("--case", default="", help="only cases whose id starts with this")
    parser.add_argument("--pairs-only", action="store_true", help="only the Korthikanti 2022 layer and pair checks")
    args = parser.parse_args()
    FAMILY = args.family
    dataset = load_dataset()
    if not args.pairs_only:
        family_tables(dataset, args.case)
    if FAMILY == "ampere":
        per_layer_times(dataset)
        recompute_pairs(dataset)


if __name__ == "__main__":
    main()
