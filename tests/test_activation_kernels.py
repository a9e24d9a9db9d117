"""Which tensors the kernels keep for the backward: the fused SwiGLU that recomputes its product
(save_mlp_act_output=false, xformers.ops.swiglu), checked by hand on Llama 3 405B's rank 1, and its
timed rewrite."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.tools.perf import compute
from trainplan.tools.perf.activations import activation_bytes_per_layer, chunk_inflight
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import GIB, memory_breakdown
from trainplan.tools.perf.recompute import recomputed_forward_s

H100 = load_gpu("h100-sxm-80gb")
LLAMA_405B = dict(gpus=8192, tp=8, pp=16, vpp=8, zero=2, gbs=2048, mbs=1, seq=8192, recompute="none")


@pytest.mark.parametrize("precision, byte", [("bf16", 2), ("fp8", 1)])
def test_fused_swiglu_keeps_no_down_projection_input(precision, byte):
    """Only the fc2 input, silu(gate) * up (s b f / t elements in the GEMM's input precision), goes."""
    model = load_model("llama3-8b")
    s, t = 4096, 2
    kw = dict(gpus=8, tp=t, seq=s, gbs=8, recompute="none", precision=precision)
    saved = activation_bytes_per_layer(model, resolve_config(model, **kw), 0)
    fused = activation_bytes_per_layer(model, resolve_config(model, save_mlp_act_output=False, **kw), 0)
    assert saved["mlp/fc2_input"] == byte * s * model.intermediate_size / t
    assert fused == {k: v for k, v in saved.items() if k != "mlp/fc2_input"}


def test_llama3_405b_rank1_by_hand():
    """Rank 1 of TP8 PP16 V8 at 32 micro-batches holds 2(p-2) + (v-1)p + 1 = 141 one-layer chunks
    (Megatron's interleaved warm-up), each s(4h/t + 2h/t + 2d(a + 2 max(g, t))/t + 4a/t + 2ad/t
    + 2h/t + 4f/t + 2f/t) bytes with sequence parallelism; the fused SwiGLU drops the 2f/t term and
    keeps one layer's product in flight during its backward."""
    model = load_model("llama3-405b")
    s, h, f, a, g, d, t = 8192, 16384, 53248, 128, 8, 128, 8
    per_layer = s * (4 * h + 2 * h + 2 * d * (a + 2 * max(g, t)) + 4 * a + 2 * a * d + 2 * h + 4 * f + 2 * f) / t
    product = 2 * s * f / t
    p, v, m, i = 16, 8, 32, 1
    chunks = 2 * (p - i - 1) + (v - 1) * p + 1
    assert chunks == 141 == chunk_inflight(p, m, v, i, np.arange(v)).sum()
    for save, layer_bytes, working in ((True, per_layer, 0.0), (False, per_layer - product, product)):
        r = memory_breakdown(model, resolve_config(model, save_mlp_act_output=save, **LLAMA_405B), H100)
        rank1 = r.per_stage[1]
        assert rank1["num_layers"] == 8 and r.worst_stage == 1
        assert r.breakdown.get("activations/recompute_working_set", 0.0) * GIB == pytest.approx(working)
        assert rank1["activations"] * GIB == pytest.approx(chunks * layer_bytes + working, rel=1e-12)
    assert not memory_breakdown(model, resolve_config(model, **LLAMA_405B), H100).fits


def test_fused_swiglu_rewrite_is_timed_once_per_dense_layer():
    """The backward writes the product again: 2 s b f / t bytes per dense layer and micro-batch, in
    the SwiGLU backward kernel (no launch); a recompute that reruns the MLP already recomputes it."""
    model = load_model("llama3-8b")
    kw = dict(gpus=8, tp=2, seq=4096, gbs=8)
    layers = list(range(4))
    times = compute.OpTimes()
    rewrite = compute.memory_bound_time_s(2 * 4096 * model.intermediate_size / 2, H100, kernels=0)
    for recompute, extra in (("none", len(layers) * rewrite), ("selective", len(layers) * rewrite), ("full", 0.0)):
        saved = recomputed_forward_s(model, resolve_config(model, recompute=recompute, **kw), H100, times, layers)
        fused = recomputed_forward_s(model, resolve_config(model, recompute=recompute, save_mlp_act_output=False,
                                                           **kw), H100, times, layers)
        assert fused - saved == pytest.approx(extra)
    mlp = resolve_config(model, recompute="selective", recompute_modules="mlp", save_mlp_act_output=False, **kw)
    assert recomputed_forward_s(model, mlp, H100, times, layers) == pytest.approx(0.0)


def test_fused_swiglu_needs_a_dense_mlp():
    model = load_model("qwen3-30b-a3b")   # every layer MoE: moe_act recompute is the experts' counterpart
    with pytest.raises(InputError, match="no dense MLP"):
        resolve_config(model, gpus=8, save_mlp_act_output=False)


@pytest.mark.parametrize("engine", ["megatron", "torchtitan"])
def test_exports_say_the_engine_keeps_the_product(engine):
    """No exported engine has a setting for the fused SwiGLU's recompute: the export says what it costs."""
    from trainplan.tools.engines import export

    model = load_model("llama3-8b")
    kw = dict(gpus=8, tp=2, seq=4096, gbs=8, zero=1)
    fused = export(engine, model, resolve_config(model, save_mlp_act_output=False, **kw), model_ref="llama3-8b")
    plain = export(engine, model, resolve_config(model, **kw), model_ref="llama3-8b")
    assert any("save_mlp_act_output=false" in note for note in fused.notes)
    assert not any("save_mlp_act_output" in note for note in plain.notes)


def test_eager_ops_keep_the_fp32_norm_input_and_silu_output():
    """fused_kernels=false (PyTorch eager, as Hugging Face's LlamaRMSNorm and LlamaMLP): each RMSNorm
    keeps its fp32 copy (pow and the rsqrt multiply) beside the bf16 normalized tensor, 4 B per
    element more than the fused kernel's bf16 input, and silu(gate) stays for the multiply, 2 s f / t.
    LayerNorm (one ATen kernel even in eager mode) and a GeLU MLP keep what the fused kernels keep."""
    s, t = 4096, 2
    llama = load_model("llama3-8b")
    kw = dict(gpus=8, tp=t, seq=s, gbs=8, recompute="none")
    fused = activation_bytes_per_layer(llama, resolve_config(llama, **kw), 0)
    eager = activation_bytes_per_layer(llama, resolve_config(llama, fused_kernels=False, **kw), 0)
    assert eager.pop("norm/eager_fp32") == 4 * 2 * s * llama.hidden_size / t   # two norms, sequence parallel
    assert eager.pop("mlp/eager_silu_output") == 2 * s * llama.intermediate_size / t
    assert eager == fused
    gpt = load_model("gpt3-175b")
    assert activation_bytes_per_layer(gpt, resolve_config(gpt, fused_kernels=False, **kw), 0) == \
        activation_bytes_per_layer(gpt, resolve_config(gpt, **kw), 0)
    mlp_recompute = resolve_config(llama, fused_kernels=False, **{**kw, "recompute": "selective"},
                                   recompute_modules="mlp")
    assert "mlp/eager_silu_output" not in activation_bytes_per_layer(llama, mlp_recompute, 0)
