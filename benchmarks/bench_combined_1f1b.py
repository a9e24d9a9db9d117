"""Where the expert all-to-all goes under Megatron's combined 1F1B (moe_a2a_overlap) for the eval rows that
run it: the checks behind the DGX-H100 26.02 Qwen3-235B case note.

Run: python benchmarks/bench_combined_1f1b.py

Prints, for every prediction case with moe_a2a_overlap:
1. One MoE layer's nodes for one micro-batch (combined_1f1b.LayerNodes, ms): the compute nodes and
   the communication nodes Megatron issues beside them (TransformerLayerSchedulePlan.run): combine
   backward beside the forward's attention, dispatch forward beside the expert backward, dispatch
   backward beside the expert wgrad and the expert forward, combine forward beside the attention
   backward. A phase whose all-to-all outlasts its compute shows the difference.
2. One chunk's combined step replayed (combined_1f1b.replay_s) against the same nodes run apart, and a
   backward alone (a cool-down backward).
3. The critical rank's chunks: how many run as combined steps and how many alone (pipeline
   warmup_forwards), and the step time with the overlap, without it, and with the all-to-all made
   free (the floor no overlap can pass), against the published step.
Nothing here is fitted or written anywhere.
"""

from __future__ import annotations

import trainplan
from trainplan.evals.dataset import load_dataset
from trainplan.tools.perf import layer_compute, step
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.perf.collectives import group_layout
from trainplan.tools.perf.combined_1f1b import chunk_layers, replay_s
from trainplan.tools.perf.estimate import resolve_with_batch
from trainplan.tools.perf.pipeline import combined_steps
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.core.enums import Schedule


def _ms(x: float) -> str:
    return f"{1e3 * x:8.3f}"


def report(case) -> None:
    kwargs = case.kwargs()
    model, gpu = load_model(kwargs["model"]), load_gpu(kwargs["gpu"])
    knobs = {k: v for k, v in kwargs.items() if k not in ("model", "gpu", "gpus")}
    cfg, _ = resolve_with_batch(model, kwargs["gpus"], fp8_supported=gpu.fp8_tflops is not None, **knobs)
    cluster = ClusterSpec.build(gpu, kwargs["gpus"])
    groups = group_layout(cfg, cluster.gpus_per_node)
    index = model.moe_layers[0]
    layer = layer_compute.layer_times(model, cfg, gpu, index)
    comm = step._layer_comm_s(model, cfg, cluster, groups, index, (0.0, 0.0), 0.0)
    nodes = step.combined_nodes(model, cfg, cluster, groups, index, layer, comm)
    print(f"{case.id}: {model.name}, tp {cfg.tp} pp {cfg.pp} vpp {cfg.vpp} ep {cfg.ep}, "
          f"{cfg.num_microbatches} micro-batches")
    print("  one MoE layer, one micro-batch (ms):   all-to-all   beside   compute")
    for name, a2a, window in (("combine backward | attention forward", nodes.combine_b_comm, nodes.attn_f),
                              ("dispatch forward | expert backward", nodes.dispatch_f_comm, nodes.mlp_b),
                              ("dispatch backward | expert wgrad + forward", nodes.dispatch_b_comm,
                               nodes.mlp_dw + nodes.mlp_f),
                              ("combine forward | attention backward", nodes.combine_f_comm,
                               nodes.attn_b + nodes.attn_dw)):
        print(f"    {name:<44} {_ms(a2a)} {_ms(window)}")
    stage = step.stage_layers(model, cfg.pp)[0]
    chunk = chunk_layers([nodes] * len(stage), cfg.vpp)[0]
    apart = sum(n.forward_s + n.backward_s for n in chunk)
    paired, hidden = replay_s(chunk, chunk)
    alone, alone_hidden = replay_s([], chunk)
    print(f"  one chunk ({len(chunk)} MoE layers): apart {_ms(apart)} ms, combined step {_ms(paired)} ms "
          f"({_ms(hidden)} hidden); backward alone {_ms(alone)} ms of {_ms(sum(n.backward_s for n in chunk))} "
          f"({_ms(alone_hidden)} hidden)")
    schedule = cfg.schedule if cfg.pp > 1 else Schedule.one_f_one_b
    total = cfg.num_microbatches * cfg.vpp
    pairs = combined_steps(schedule, cfg.pp, cfg.num_microbatches, cfg.vpp, 0)
    print(f"  rank 0: {pairs} of {total} chunks as combined steps, {total - pairs} forwards and as many "
          "backwards alone")
    with_overlap = trainplan.estimate(**kwargs).time.step_s
    without = trainplan.estimate(**{**kwargs, "moe_a2a_overlap": False}).time.step_s
    published = case.published["step_s"].value if "step_s" in case.published else None
    free = with_overlap - trainplan.estimate(**kwargs).time.breakdown["comm/ep"]
    line = f"  step: overlap {with_overlap:.1f} s, none {without:.1f} s, all-to-all free about {free:.1f} s"
    if published:
        line += f"; published {published:.1f} s ({with_overlap / published - 1:+.1%} with the overlap)"
    print(line)


def main() -> None:
    dataset = load_dataset()
    for case in dataset.cases:
        if case.kind == "prediction" and case.kwargs().get("moe_a2a_overlap"):
            report(case)


if __name__ == "__main__":
    main()
