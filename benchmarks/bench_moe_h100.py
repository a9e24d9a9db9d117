"""Why the DGX-H100 Qwen3-30B-A3B rows are too fast in the model: the checks behind their case notes.

Run: python benchmarks/bench_moe_h100.py

Prints, for the Qwen3-30B-A3B rows of evals/runs (DGX-H100, DGX-B200, DGX-GB200):
1. Per MoE layer and micro-batch on one GPU, the published time (step time over micro-batches x layers
   per stage, all-in: bubble and optimizer included), the model's GPU time and its host term
   (moe.HOST_S_PER_EXPERT_GEMM), and the token-layers each virtual-pipeline chunk runs. A cost fixed
   per layer shows as the same time per layer at any micro-batch size; a cost fixed per chunk-step,
   as the same time per chunk at equal token-layers per chunk.
2. The step-time errors of the DGX-H100 MoE rows (Qwen3-30B-A3B and Qwen3-235B-A22B, 25.11 and 26.02)
   for host costs per expert GEMM from the fitted value up: one value that fixed both 30B rows would
   have to keep the 235B rows, whose expert GEMMs the same host issues, within tolerance.
3. The two other forms a missing cost could take, sized on each H100 30B row (its published step time
   minus the model's) and carried to the H100 235B rows, which run the same engine, dispatcher and FP8
   recipe on the same machines: a cost per virtual-pipeline chunk-step (forward + backward), and a cost
   per routed token copy and MoE layer.
Published figures come from the eval dataset; nothing here is fitted or written anywhere.
"""

from __future__ import annotations

from trainplan.evals.cases import evaluate_prediction
from trainplan.evals.dataset import load_dataset
from trainplan.tools.perf import layer_compute, moe
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.perf.estimate import resolve_with_batch

QWEN3_30B_ROWS = ("mbridge-h100-qwen3-30b-a3b-fp8", "mbridge-2602-h100-qwen3-30b-a3b-fp8",
                  "mbridge-b200-qwen3-30b-a3b-fp8", "mbridge-2602-b200-qwen3-30b-a3b-fp8",
                  "mbridge-gb200-qwen3-30b-a3b-fp8", "mbridge-2602-gb200-qwen3-30b-a3b-fp8")
H100_MOE_ROWS = ("mbridge-h100-qwen3-30b-a3b-fp8", "mbridge-2602-h100-qwen3-30b-a3b-fp8",
                 "mbridge-h100-qwen3-235b-a22b-fp8", "mbridge-2602-h100-qwen3-235b-a22b-fp8")
HOST_SCAN_US = (100, 120, 167, 230)
"""host costs per expert GEMM tried after the fitted one (moe.HOST_S_PER_EXPERT_GEMM)"""


def _shape(case):
    """(resolved layout, micro-batches per step, layers per stage, routed copies per MoE layer and micro-batch)."""
    kwargs = case.kwargs()
    model, gpu = load_model(kwargs["model"]), load_gpu(kwargs["gpu"])
    knobs = {k: v for k, v in kwargs.items() if k not in ("model", "gpu", "gpus")}
    cfg, _ = resolve_with_batch(model, kwargs["gpus"], fp8_supported=gpu.fp8_tflops is not None, **knobs)
    return cfg, cfg.gbs // (cfg.dp * cfg.mbs), model.num_layers / cfg.pp, moe.routed_rows(model, cfg)


def per_layer_table(dataset) -> None:
    print("Per MoE layer and micro-batch, one GPU (ms):")
    print(f"  {'case':<38} {'mbs':>3} {'layers/chunk':>12} {'token-layers/chunk':>18} {'published':>9} "
          f"{'model GPU':>9} {'model host':>10}")
    cases = {c.id: c for c in dataset.cases}
    for case_id in QWEN3_30B_ROWS:
        case = cases[case_id]
        cfg, microbatches, layers_per_stage, _ = _shape(case)
        model, gpu = load_model(case.kwargs()["model"]), load_gpu(case.kwargs()["gpu"])
        times = layer_compute.layer_times(model, cfg, gpu, model.moe_layers[0])
        host = times.forward_s.get("moe/host", 0.0) + times.backward_input_s.get("moe/host", 0.0)
        total = times.forward + times.backward_input + times.backward_weight
        layers_per_chunk = layers_per_stage / (cfg.vpp or 1)
        published = case.published["step_s"].value / (microbatches * layers_per_stage)
        token_layers = cfg.mbs * cfg.seq * layers_per_chunk
        print(f"  {case_id:<38} {cfg.mbs:>3} {layers_per_chunk:>12g} {token_layers:>18,.0f} {published * 1e3:>9.1f} "
              f"{(total - host) * 1e3:>9.1f} {host * 1e3:>10.1f}")


def host_scan(dataset) -> None:
    print("\nStep-time error of the DGX-H100 MoE rows against the host cost per expert GEMM:")
    cases = [c for c in dataset.cases if c.id in H100_MOE_ROWS]
    fitted = moe.HOST_S_PER_EXPERT_GEMM
    try:
        for us in (round(fitted * 1e6), *HOST_SCAN_US):
            moe.HOST_S_PER_EXPERT_GEMM = us * 1e-6
            errors = "; ".join(f"{c.id.removeprefix('mbridge-')} {evaluate_prediction(c, dataset).error['step_s']:+.1%}"
                               for c in cases)
            print(f"  {us:>4} us: {errors}")
    finally:
        moe.HOST_S_PER_EXPERT_GEMM = fitted


def carried_costs(dataset) -> None:
    print("\nA missing cost sized on each H100 30B row, carried to the H100 235B rows (step-time error after):")
    cases = {c.id: c for c in dataset.cases}
    for source_id in H100_MOE_ROWS[:2]:
        source = cases[source_id]
        cfg, microbatches, layers, rows = _shape(source)
        gap = source.published["step_s"].value - evaluate_prediction(source, dataset).predicted["step_s"]
        per_chunk = gap / (microbatches * (cfg.vpp or 1))
        per_copy = gap / (microbatches * layers * rows)
        print(f"  from {source_id}: {per_chunk * 1e3:.1f} ms per chunk-step, {per_copy * 1e9:.0f} ns per routed copy")
        for target_id in H100_MOE_ROWS[2:]:
            target = cases[target_id]
            t_cfg, t_micro, t_layers, t_rows = _shape(target)
            predicted = evaluate_prediction(target, dataset).predicted["step_s"]
            published = target.published["step_s"].value
            chunk = (predicted + per_chunk * t_micro * (t_cfg.vpp or 1)) / published - 1
            copy = (predicted + per_copy * t_micro * t_layers * t_rows) / published - 1
            print(f"    {target_id:<38} per chunk-step {chunk:+.1%}, per routed copy {copy:+.1%}")


def main() -> None:
    dataset = load_dataset()
    per_layer_table(dataset)
    host_scan(dataset)
    carried_costs(dataset)


if __name__ == "__main__":
    main()
