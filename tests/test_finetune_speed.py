"""Fine-tuning speed mechanisms (tools/perf/finetune.py adapt_layer_times, tools/perf/host.py): relations, not timings.

The figures against published runs are in evals/runs/qwen-finetune-speed.yaml and torchtune-finetune-speed.yaml
(trainplan eval's fine-tuning speed section; benchmarks/bench_finetune_speed.py prints them)."""

from __future__ import annotations

import pytest

from trainplan.evals.cases import CaseResult
from trainplan.evals.dataset import load_dataset
from trainplan.evals.runner import THROUGHPUT_QUANTITIES, _fine_tuning_speed, _throughput_held_out, is_fine_tuning
from trainplan.tools.perf import finetune, host, layer_compute
from trainplan.tools.core.calibration import fitted_case_ids
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.core.enums import Launch
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.recompute import recomputed_forward_s


@pytest.fixture(scope="module")
def llama():
    return load_model("llama3-8b")


def _cfg(model, method, **kw):
    extra = {"lora_rank": 16, "lora_targets": "all-linear"} if method != "full" else {}
    return resolve_config(model, 1, method=method, seq=1024, gbs=1, mbs=1, **{**extra, **kw})


def test_adapters_and_dequantisation_are_host_ops(llama):
    full, lora, qlora = (_cfg(llama, m) for m in ("full", "lora", "qlora"))
    adapted = finetune.adapted_linears_per_block(llama, lora, False)
    assert adapted == 7                                   # q, k, v, o, gate, up, down
    assert finetune.adapted_linears_per_block(llama, full, False) == 0
    base = host.host_ops_forward(llama, full, False)
    assert host.host_ops_forward(llama, lora, False) == base + host.LORA_OPS_PER_ADAPTED_LINEAR * adapted
    quantised = len(finetune.frozen_linears(llama, False))
    assert host.host_ops_forward(llama, qlora, False) == (host.host_ops_forward(llama, lora, False)
                                                          + host.DEQUANT_OPS_PER_4BIT_LINEAR * quantised)
    attention_only = _cfg(llama, "lora", lora_targets="attention")
    assert host.host_ops_forward(llama, attention_only, False) == base + host.LORA_OPS_PER_ADAPTED_LINEAR * 4


def test_compiled_and_graphed_launches_issue_fewer_fine_tuning_ops(llama):
    eager = _cfg(llama, "qlora")
    compiled = _cfg(llama, "qlora", launch=Launch.compile)
    graphed = _cfg(llama, "qlora", launch=Launch.cuda_graphs)
    assert 0 < host.fine_tuning_ops_forward(llama, compiled, False) < host.fine_tuning_ops_forward(llama, eager, False)
    assert host.host_ops_forward(llama, graphed, False) == 1.0


def test_an_unfused_chain_pays_the_bare_pointwise_price_beyond_its_fused_kernels(llama):
    """fused_kernels=false adds the unfused elementwise kernels beyond the fused ones as host ops, each priced as a
    bare pointwise aten call (HOST_S_PER_POINTWISE_OP), below the module-level HOST_S_PER_OP; torch.compile fuses
    them again."""
    from trainplan.tools.perf.compute import ELEMENTWISE_PASSES

    fused, unfused = _cfg(llama, "lora"), _cfg(llama, "lora", fused_kernels=False)
    extra = ELEMENTWISE_PASSES[False]["kernels"] - ELEMENTWISE_PASSES[True]["kernels"]
    assert extra > 0 and host.pointwise_ops_forward(unfused) == extra and host.pointwise_ops_forward(fused) == 0
    assert host.host_ops_forward(llama, unfused, False) - host.host_ops_forward(llama, fused, False) == extra
    (forward_fused, backward_fused), (forward, backward) = (host.host_pass_s(llama, c, False) for c in (fused, unfused))
    assert forward - forward_fused == pytest.approx(extra * host.HOST_S_PER_POINTWISE_OP)
    per_op = host.HOST_S_PER_POINTWISE_OP
    assert backward - backward_fused == pytest.approx(host.BACKWARD_OPS_PER_FORWARD_OP * extra * per_op)
    assert 0 < host.HOST_S_PER_POINTWISE_OP < host.HOST_S_PER_OP
    assert host.pointwise_ops_forward(_cfg(llama, "lora", fused_kernels=False, launch=Launch.compile)) == 0


def test_frozen_base_keeps_only_the_adapters_weight_gradients(llama):
    gpu = load_gpu("a100-sxm-80gb")
    for method in ("lora", "qlora"):
        cfg = _cfg(llama, method)
        layer = finetune.adapt_layer_times(layer_compute.layer_times(llama, cfg, gpu, 0), llama, cfg, gpu, False)
        weights = {k: v for k, v in layer.backward_weight_s.items() if v > 0}
        assert set(weights) == {finetune.ADAPTER_KEY}
        assert layer.forward_s["lora/scale_add"] > 0 and layer.backward_input_s["lora/scale_add"] > 0


def test_nf4_dequantisation_runs_in_the_forward_the_backward_and_the_recompute(llama):
    gpu = load_gpu("a100-sxm-80gb")
    qlora = _cfg(llama, "qlora", recompute="full")
    layer = finetune.adapt_layer_times(layer_compute.layer_times(llama, qlora, gpu, 0), llama, qlora, gpu, False)
    dequant = layer.forward_s["qlora/dequant"]
    assert dequant > 0 and layer.backward_input_s["qlora/dequant"] == dequant
    # the NF4 weights are read and the bf16 weights written: at least their bytes at the HBM bandwidth
    frozen = sum(lin.d_in * lin.d_out for lin in finetune.frozen_linears(llama, False))
    streamed = float(finetune.nf4_bytes(True)) + 2.0   # the packed weight in, the bf16 weight out
    assert dequant >= streamed * frozen / (gpu.hbm_bandwidth_gb_s * 1e9)
    rerun = recomputed_forward_s(llama, qlora, gpu, layer, [0])
    assert rerun >= layer.forward                          # a checkpointed decoder layer reruns its dequantisation
    lora = _cfg(llama, "lora")
    assert "qlora/dequant" not in finetune.adapt_layer_times(layer_compute.layer_times(llama, lora, gpu, 0),
                                                             llama, lora, gpu, False).forward_s


def test_host_floor_of_a_small_lora_layer_counts_the_adapters():
    """A tiny model on a fast GPU waits on the host: the LoRA block's backward is at least its host ops, adapters and
    all, after the frozen weights' gradients are gone."""
    from trainplan.tools.hardware.specs import ClusterSpec
    from trainplan.tools.perf.step import group_layout, stage_work

    model = load_model("llama3-8b").model_copy(update={"hidden_size": 256, "intermediate_size": 512,
                                                       "num_attention_heads": 4, "num_kv_heads": 4,
                                                       "head_dim": 64, "num_layers": 2})
    gpu = load_gpu("h100-sxm-80gb")
    cfg = resolve_config(model, 1, method="lora", lora_rank=8, lora_targets="all-linear", seq=128, gbs=1, mbs=1,
                         recompute="none")
    cluster = ClusterSpec(gpu=gpu, num_gpus=1, gpus_per_node=8, intra_node_bw=450.0, inter_node_bw=50.0)
    work = stage_work(model, cfg, cluster, group_layout(cfg, 8), 0, [0, 1])
    _, host_backward = host.host_pass_s(model, cfg, False)
    assert work.backward_s >= 2 * host_backward
    full = resolve_config(model, 1, seq=128, gbs=1, mbs=1, recompute="none")
    assert host.host_pass_s(model, cfg, False)[1] > host.host_pass_s(model, full, False)[1]


def test_fine_tuning_speed_rows_are_sourced_held_out_and_kept_out_of_the_pre_training_pool():
    dataset = load_dataset()
    rows = [c for c in dataset.cases if c.kind == "prediction" and is_fine_tuning(dataset, c.id)
            and any(q in c.published for q in THROUGHPUT_QUANTITIES)]
    assert len(rows) >= 15
    assert not {c.id for c in rows} & fitted_case_ids()
    dense = next(c for c in dataset.cases if c.kind == "prediction" and not is_fine_tuning(dataset, c.id)
                 and any(q in c.published for q in THROUGHPUT_QUANTITIES) and not c.used_for_calibration
                 and not load_model(str(c.kwargs()["model"])).is_moe)
    results = []
    for case, error in ((rows[0], 0.5), (dense, 0.1)):
        quantity = next(q for q in THROUGHPUT_QUANTITIES if q in case.published)
        results.append(CaseResult(id=case.id, kind="prediction", run=case.run, error={quantity: error},
                                  checks={quantity: error < 0.2}))
    speed = _fine_tuning_speed(results, dataset)
    assert speed["cases"] == [rows[0].id] and speed["mape"] == pytest.approx(0.5)
    assert _throughput_held_out(results, dataset, moe=False)["n"] == 1
