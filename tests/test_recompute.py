"""Named-module selective recompute (Megatron --recompute-modules): the memory each module frees,
the work it repeats (time and hardware FLOPs), its validation, and the vectorised path."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.tools.perf.activations import activation_bytes_per_layer, knob_arrays
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.hardware.counting import flops_per_token
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import memory_breakdown, memory_totals_vectorised
from trainplan.tools.perf import compute
from trainplan.tools.perf.recompute import DROPS, recomputed_forward_s
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.core.enums import RecomputeModule
from trainplan.tools.perf.step import step_time
from trainplan.tools.perf.step_flops import model_flops_per_step

H100 = load_gpu("h100-sxm-80gb")
DSV2 = load_model("deepseek-v2-lite")   # MLA, one dense layer then MoE layers


def _cfg(model, modules, **kw):
    kw = {"gpus": 8, "ep": 8, "seq": 4096, "gbs": 64, **kw}
    return resolve_config(model, recompute="selective", recompute_modules=modules, **kw)


@pytest.mark.parametrize("module", list(RecomputeModule))
def test_each_module_drops_exactly_its_tensors(module):
    base = {"core_attn"} if module is not RecomputeModule.core_attn else {"layernorm"}
    for layer in (0, 1):   # the dense layer and an MoE layer
        without = activation_bytes_per_layer(DSV2, _cfg(DSV2, sorted(base)), layer)
        with_it = activation_bytes_per_layer(DSV2, _cfg(DSV2, sorted(base | {module.value})), layer)
        gone = set(without) - set(with_it)
        assert gone == {k for k in DROPS[module] if k in without}
        if module is RecomputeModule.mlp and "mlp/fc1_input" in without:   # the checkpoint keeps its bf16 input
            assert with_it["mlp/fc1_input"] == 2 * 4096 * DSV2.hidden_size


def test_more_modules_never_use_more_memory_and_cost_more_time():
    cluster = ClusterSpec.build(H100, 8)
    sets = [["core_attn"], ["core_attn", "layernorm"], ["core_attn", "layernorm", "mla_up_proj"],
            ["core_attn", "layernorm", "mla_up_proj", "moe_act"]]
    totals, steps = [], []
    for modules in sets:
        cfg = _cfg(DSV2, modules)
        totals.append(memory_breakdown(DSV2, cfg, H100).activations)
        result = step_time(DSV2, cfg, cluster)
        steps.append(result.step_s)
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == len(totals)
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    full = resolve_config(DSV2, 8, ep=8, seq=4096, gbs=64, recompute="full")
    assert memory_breakdown(DSV2, full, H100).activations < totals[-1]
    assert step_time(DSV2, full, cluster).step_s > steps[-1]


def test_recomputed_flops_follow_the_modules():
    """mla_up_proj adds the up-projection GEMMs, core_attn the (causal, flash) scores, full the whole
    forward as executed; layernorm is memory-bound and adds no FLOPs."""
    m, seq = DSV2, 4096
    tokens = 64 * seq
    base = model_flops_per_step(m, _cfg(m, ["layernorm"])).hardware
    assert base == model_flops_per_step(m, resolve_config(m, 8, ep=8, seq=seq, gbs=64, recompute="none")).hardware
    a = m.num_attention_heads
    up = m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
    up += (m.q_lora_rank or 0) * a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    with_up = model_flops_per_step(m, _cfg(m, ["mla_up_proj"])).hardware
    assert with_up - base == pytest.approx(2 * up * m.num_layers * tokens, rel=1e-9)
    executed = flops_per_token(m, seq, causal=True, include_mtp=True)
    core = model_flops_per_step(m, _cfg(m, ["core_attn"])).hardware
    assert core - base == pytest.approx(executed.breakdown["attention/scores"] * tokens, rel=1e-9)
    full = model_flops_per_step(m, resolve_config(m, 8, ep=8, seq=seq, gbs=64, recompute="full")).hardware
    assert full - base == pytest.approx((executed.forward - executed.breakdown["lm_head"]) * tokens, rel=1e-9)


def test_default_modules_are_megatrons_and_text_is_split_at_commas():
    assert _cfg(DSV2, None).recompute_modules == (RecomputeModule.core_attn,)
    cfg = _cfg(DSV2, "moe_act, layernorm")
    assert cfg.recompute_modules == (RecomputeModule.layernorm, RecomputeModule.moe_act)
    assert resolve_config(DSV2, 8, recompute="none").recompute_modules is None


@pytest.mark.parametrize("kwargs,needle", [
    (dict(model="llama3-8b", recompute="selective", recompute_modules=["mla_up_proj"]), "no mla_up_proj"),
    (dict(model="llama3-8b", recompute="selective", recompute_modules=["moe_act"]), "no moe_act"),
    (dict(model="deepseek-v2-lite", recompute="full", recompute_modules=["layernorm"]), "needs recompute=selective"),
    (dict(model="deepseek-v2-lite", recompute="selective", recompute_modules=["attention"]), "not one of"),
    (dict(model="deepseek-v2-lite", recompute="selective", recompute_modules=[]), "empty"),
])
def test_bad_modules_are_input_errors(kwargs, needle):
    model = load_model(kwargs.pop("model"))
    with pytest.raises(InputError, match=needle):
        resolve_config(model, 8, **kwargs)


def test_vectorised_masks_equal_the_scalar_path():
    sets = [None, ["layernorm", "mla_up_proj", "moe_act"], ["moe"], ["mlp", "core_attn"]]
    cfgs = [_cfg(DSV2, s) for s in sets]
    arrays = {k: np.concatenate([knob_arrays(c)[k] for c in cfgs]).ravel() for k in knob_arrays(cfgs[0])}
    vec = memory_totals_vectorised(DSV2, H100, arrays)
    for i, cfg in enumerate(cfgs):
        assert vec["total"][i] == pytest.approx(memory_breakdown(DSV2, cfg, H100).total, rel=1e-12)
    del arrays["recompute_modules"]    # the default mask: core_attn where selective
    assert memory_totals_vectorised(DSV2, H100, arrays)["total"][0] == pytest.approx(vec["total"][0], rel=1e-12)


# --- DeepSeek-V3's other documented memory techniques (§3.3.3) -------------------------------------


def test_bf16_moments_store_eight_bytes_per_parameter():
    m = load_model("llama3-8b")
    plain = memory_breakdown(m, resolve_config(m, 8, zero=0), H100)
    moments = memory_breakdown(m, resolve_config(m, 8, zero=0, bf16_moments=True), H100)
    assert moments.optimizer == pytest.approx(plain.optimizer * 8 / 12, rel=1e-12)
    assert moments.weights == plain.weights and moments.gradients == plain.gradients


def test_fp8_activations_store_fp8_tiles_one_e5m6_output_and_no_swiglu_output():
    """DeepSeek-V3 §3.3.3: SwiGLU inputs in FP8, the attention output in 12-bit E5M6, the SwiGLU
    outputs recomputed; every cached FP8/E5M6 activation carries one fp32 scale per 1x128 tile (§3.3.2)."""
    m = load_model("deepseek-v3")
    kw = dict(gpus=64, ep=64, seq=4096, recompute="none", precision="fp8")
    plain = activation_bytes_per_layer(m, resolve_config(m, **kw), 3)
    low = activation_bytes_per_layer(m, resolve_config(m, fp8_activations=True, **kw), 3)
    s, a, dv, h, k = 4096, m.num_attention_heads, m.v_head_dim, m.hidden_size, m.experts_per_token
    fe, fs = m.moe_intermediate_size, m.shared_expert_intermediate_size
    tiled = 1 + 4 / 128                                       # FP8 byte + its share of an fp32 tile scale
    assert plain["moe/expert_act_input"] == 2 * 2 * s * k * fe   # bf16 gate and up outputs
    assert low["moe/expert_act_input"] == 2 * tiled * s * k * fe
    assert low["moe/shared_act_input"] == 2 * tiled * s * fs
    assert plain["attention/context"] == 3 * s * a * dv     # bf16 O + TE's fp8 copy
    assert low["attention/context"] == (1.5 + 4 / 128) * s * a * dv   # one packed E5M6 copy
    assert plain["moe/dispatched"] == s * k * h                # TE: one fp8 byte, one scale per tensor
    assert low["moe/dispatched"] == tiled * s * k * h
    for key in ("moe/expert_fc2_input", "moe/shared_fc2_input"):   # recomputed from the SwiGLU inputs
        assert plain[key] > 0 and key not in low
    assert low["norm/inputs"] == plain["norm/inputs"]          # bf16 residual stream, not a GEMM input
    with pytest.raises(InputError, match="needs precision=fp8"):
        resolve_config(m, gpus=64, ep=64, fp8_activations=True)


def test_fp8_activations_time_the_swiglu_outputs_they_recompute():
    """Each MoE layer reruns its shared experts' SwiGLU, and its routed experts' unless moe_act does."""
    m = DSV2
    layers = [1, 2, 3]                       # MoE layers
    times = compute.OpTimes()
    kw = dict(gpus=8, ep=8, seq=4096, gbs=64, precision="fp8", recompute="selective")
    tokens = 4096
    rows, fe = tokens * m.experts_per_token, m.moe_intermediate_size
    fs = m.num_shared_experts * m.shared_expert_intermediate_size
    routed = compute.memory_bound_time_s(2 * 3 * rows * fe, H100)
    shared = compute.memory_bound_time_s(2 * 3 * tokens * fs, H100)
    for modules, extra in ((["core_attn"], routed + shared), (["core_attn", "moe_act"], shared), (["moe"], 0.0)):
        cfg = dict(recompute_modules=modules, **kw)
        plain = recomputed_forward_s(m, resolve_config(m, **cfg), H100, times, layers)
        low = recomputed_forward_s(m, resolve_config(m, fp8_activations=True, **cfg), H100, times, layers)
        assert low - plain == pytest.approx(len(layers) * extra)
    full = dict(kw, recompute="full")
    assert (recomputed_forward_s(m, resolve_config(m, fp8_activations=True, **full), H100, times, layers)
            == recomputed_forward_s(m, resolve_config(m, **full), H100, times, layers))


def test_mla_up_projection_recompute_keeps_the_rope_key():
    """K is rebuilt from the kv latent and the decoupled RoPE key k^R (d_h^R per token, bf16)."""
    m = load_model("deepseek-v3")
    kw = dict(gpus=64, ep=64, seq=4096, recompute="selective")
    up = activation_bytes_per_layer(m, resolve_config(m, recompute_modules=["mla_up_proj"], **kw), 3)
    core = activation_bytes_per_layer(m, resolve_config(m, recompute_modules=["core_attn"], **kw), 3)
    assert up["attention/rope_key"] == 2 * 4096 * m.qk_rope_head_dim
    assert "attention/rope_key" not in core and "attention/qkv" in core and "attention/qkv" not in up


def test_moe_token_buffers_are_one_layers_all_to_all():
    m = load_model("deepseek-v2-lite")
    s, k, h = 4096, m.experts_per_token, m.hidden_size
    for ep, copies in ((8, 2), (1, 1)):
        r = memory_breakdown(m, resolve_config(m, 8, ep=ep, seq=s), H100)
        assert r.breakdown["activations/moe_token_buffers"] * 2**30 == pytest.approx(copies * 2 * s * k * h, rel=1e-12)
    dense = memory_breakdown(load_model("llama3-8b"), resolve_config(load_model("llama3-8b"), 8), H100)
    assert "activations/moe_token_buffers" not in dense.breakdown
