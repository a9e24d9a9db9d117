"""Exact parameter counts of the catalog and FLOPs per token against closed forms.

Parameter truths are ``sum(p.numel() for p in model.parameters())`` of the HF classes
(transformers 5.x for the first five; published counts for the rest).
"""

from __future__ import annotations

import pytest

from trainplan.tools.hardware.catalog import load_model, model_names
from trainplan.tools.hardware.counting import count_params, flops_per_token, layer_flops_per_token, norm_params

HF_TRUTH = {
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3-405b": 405_853_388_800,
    "deepseek-v3": 671_026_404_352,  # DeepseekV3ForCausalLM: MTP layer 61 dropped, router bias is a buffer
    "gpt3-175b": 174_604_259_328,  # GPT2LMHeadModel, tied head, learned positions
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "mixtral-8x22b": 140_620_634_112,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "qwen3-8b": 8_190_735_360,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,  # Qwen3MoeForCausalLM module shapes (model card: 235B total)
    "gemma2-9b": 9_241_705_984,
    "deepseek-v2-lite": 15_706_484_224,
    "falcon-7b": 6_921_720_704,
    # sum(p.numel()) of transformers 5.16's classes built on the meta device from the catalog's configs; each agrees
    # with its model card's rounded total (Llama 3.2: 1.23B, 3.21B; Qwen2.5: 0.49B, 1.54B, 3.09B, 14.7B; Qwen3:
    # 0.6B, 1.7B, 4.0B, 14.8B, 32.8B; the Qwen2.5 32B card's "32.5B" is HF's 32.8B of safetensors)
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,
    "qwen3-4b": 4_022_468_096,
    "qwen3-14b": 14_768_307_200,
    "qwen3-32b": 32_762_123_264,
}

# Active parameters per token (embedding and head included), as published, rounded.
ACTIVE_APPROX = {
    "deepseek-v3": 37.55e9,
    "mixtral-8x7b": 12.9e9,
    "mixtral-8x22b": 39.2e9,
    "qwen3-30b-a3b": 3.35e9,
    "qwen3-235b-a22b": 22.2e9,  # model card: 22B activated
    "qwen1.5-moe-a2.7b": 2.69e9,
}


@pytest.mark.parametrize("name", sorted(HF_TRUTH))
def test_catalog_counts_match_hf_exactly(name):
    assert count_params(load_model(name)).total == HF_TRUTH[name]


def test_every_catalog_model_has_a_truth():
    assert set(model_names()) <= set(HF_TRUTH)


@pytest.mark.parametrize("name", sorted(ACTIVE_APPROX))
def test_moe_active_params(name):
    counts = count_params(load_model(name))
    assert counts.active == pytest.approx(ACTIVE_APPROX[name], rel=2e-3)
    assert counts.active < counts.total
    assert counts.total - counts.active == sum(l.routed_experts - l.routed_active for l in counts.layers)


def test_deepseek_v3_structure_and_mtp():
    model = load_model("deepseek-v3")
    counts = count_params(model)
    h = model.hidden_size
    assert [l.dense_mlp > 0 for l in counts.layers[:4]] == [True, True, True, False]
    assert counts.layers[3].router == 256 * h  # the e_score_correction_bias buffer is not counted
    assert counts.expert == 58 * 256 * 3 * h * 2048
    # MTP: one MoE block + eh_proj (2h x h) + enorm, hnorm, shared_head.norm; embedding and head shared.
    assert counts.mtp == counts.layers[-1].total + 2 * h * h + 3 * h == 11_610_067_968
    assert counts.total == 671_026_404_352  # MTP not in total


@pytest.mark.parametrize("name", sorted(HF_TRUTH))
def test_parts_sum_to_total(name):
    counts = count_params(load_model(name))
    layers = sum(l.total for l in counts.layers)
    assert counts.embedding + layers + counts.final_norm + counts.lm_head + counts.extra == counts.total
    for layer in counts.layers:
        assert layer.total == layer.non_expert + layer.routed_experts
        assert layer.routed_active <= layer.routed_experts


def test_llama3_8b_breakdown():
    model = load_model("llama3-8b")
    counts = count_params(model)
    h, V = 4096, 128256
    assert counts.embedding == counts.lm_head == V * h
    layer = counts.layers[0]
    assert layer.attention == h * 4096 + 2 * h * 1024 + 4096 * h
    assert layer.dense_mlp == 3 * h * 14336
    assert layer.norms == 2 * h and counts.final_norm == h


def test_tied_gpt3_has_no_head_and_learned_positions():
    counts = count_params(load_model("gpt3-175b"))
    assert counts.lm_head == 0
    assert counts.embedding == (50257 + 2048) * 12288


def test_norm_params_kinds():
    model = load_model("gpt3-175b")
    assert norm_params(model, 10) == 20  # LayerNorm weight + bias
    assert norm_params(load_model("llama3-8b"), 10) == 10  # RMSNorm weight


# --- FLOPs --------------------------------------------------------------------------------------


def test_gpt3_reproduces_megatron_model_flops():
    """72 B s L h^2 (1 + s/(6h) + V/(12 h L)) per iteration, no recompute (Korthikanti et al. 2022 App. A)."""
    model = load_model("gpt3-175b")
    B, s, L, h, V = 1536, 2048, 96, 12288, 50257
    megatron = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    ours = flops_per_token(model, seq=s).training() * B * s
    assert ours == pytest.approx(megatron, rel=1e-9)  # both ignore biases and norms


def test_llama_matches_6n_plus_attention_rule():
    """PaLM App. B / nanoGPT: 6 N + 12 L h s per token, N the non-embedding parameters (head included)."""
    model = load_model("llama3-8b")
    s = 8192
    counts = count_params(model)
    n = counts.total - counts.embedding
    rule = 6 * n + 12 * model.num_layers * model.hidden_size * s
    assert flops_per_token(model, seq=s).training() == pytest.approx(rule, rel=1e-3)


@pytest.mark.parametrize("name", sorted(HF_TRUTH))
def test_breakdown_sums_and_layers_add_up(name):
    model = load_model(name)
    flops = flops_per_token(model, seq=4096)
    assert flops.forward == pytest.approx(sum(flops.breakdown.values()))
    assert flops.training() == 3 * flops.forward
    per_layer = [layer_flops_per_token(model, i, 4096) for i in range(model.num_layers)]
    for key in ("attention/qkv", "attention/scores", "attention/out"):
        assert flops.breakdown[key] == pytest.approx(sum(layer[key] for layer in per_layer))


@pytest.mark.parametrize(
    "name", ["llama3-70b", "mistral-7b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite"]
)
def test_matmul_flops_are_twice_the_active_weights(name):
    """Bias-free models: forward minus scores = 2 x (active params - embedding - norms)."""
    model = load_model(name)
    counts = count_params(model)
    flops = flops_per_token(model, seq=1024)
    mla_norms = 0
    if model.attention_type == "mla":
        mla_norms = (model.q_lora_rank or 0) + model.kv_lora_rank
    qk_norms = 2 * model.head_dim if model.qk_norm else 0
    norms = sum(l.norms for l in counts.layers) + counts.final_norm
    norms += model.num_layers * (mla_norms + qk_norms)
    weights = counts.active - counts.embedding - norms
    assert flops.forward - flops.breakdown["attention/scores"] == pytest.approx(2 * weights, rel=1e-12)


def test_causal_halves_the_score_flops():
    model = load_model("llama3-70b")
    full = flops_per_token(model, seq=8192)
    causal = flops_per_token(model, seq=8192, causal=True)
    assert causal.breakdown["attention/scores"] == full.breakdown["attention/scores"] / 2
    L, a, d, s = 80, 64, 128, 8192
    assert full.breakdown["attention/scores"] == 4 * s * a * d * L
    assert full.breakdown["attention/qkv"] == causal.breakdown["attention/qkv"]


def test_mla_score_flops_use_qk_and_v_head_dims():
    model = load_model("deepseek-v3")
    layer = layer_flops_per_token(model, 0, seq=4096)
    assert layer["attention/scores"] == 2 * 4096 * 128 * (192 + 128)
    assert layer["attention/out"] == 2 * 128 * 128 * 7168
    assert "mlp" in layer and "moe/experts" not in layer
    moe = layer_flops_per_token(model, 3, seq=4096)
    assert moe["moe/experts"] == 2 * 8 * 3 * 7168 * 2048
    assert moe["moe/shared"] == 2 * 3 * 7168 * 2048
    assert moe["moe/router"] == 2 * 7168 * 256


def test_mtp_flops_only_on_request():
    model = load_model("deepseek-v3")
    plain = flops_per_token(model, seq=4096)
    with_mtp = flops_per_token(model, seq=4096, include_mtp=True)
    assert "mtp" not in plain.breakdown
    h, V = 7168, 129280
    block = sum(layer_flops_per_token(model, 61, 4096).values())
    assert with_mtp.breakdown["mtp"] == block + 2 * 2 * h * h + 2 * h * V
    assert with_mtp.forward - plain.forward == with_mtp.breakdown["mtp"]


def test_qwen2_moe_shared_expert_gate_flops():
    model = load_model("qwen1.5-moe-a2.7b")
    layer = layer_flops_per_token(model, 0, seq=2048)
    h = 2048
    assert layer["moe/shared"] == 2 * (3 * h * 5632 + h)
    assert layer["moe/experts"] == 2 * 4 * 3 * h * 1408
