"""HF config.json reading: every model_type, published counts of small models, structural flags, errors.

Expected counts are written from each family's modeling_*.py layout (which Linear has a bias, how
many norms a block has, what is tied), independently of counting.py.
"""

from __future__ import annotations

import json

import pytest

from trainplan.tools.hardware.catalog import load_model
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.hf import spec_from_config
from trainplan.tools.hardware.hf_readers import READERS


def total(config: dict, name: str = "test") -> int:
    return count_params(spec_from_config(config, name)).total


# --- small synthetic configs, one per model_type ----------------------------------------------

V, H, L, A, KV, F = 1000, 64, 3, 8, 2, 96  # vocab, hidden, layers, heads, kv heads, MLP width
D = H // A


def llama_like(model_type: str, **extra) -> dict:
    return {
        "model_type": model_type,
        "vocab_size": V,
        "hidden_size": H,
        "num_hidden_layers": L,
        "num_attention_heads": A,
        "num_key_value_heads": KV,
        "intermediate_size": F,
        "max_position_embeddings": 512,
        **extra,
    }


GQA_ATTN = H * (A + 2 * KV) * D + A * D * H
GATED = 3 * H * F
MOE_E, MOE_K, MOE_F = 6, 2, 32


SYNTHETIC = {
    # model_type: (config, expected total)
    "llama": (llama_like("llama"), 2 * V * H + H + L * (GQA_ATTN + GATED + 2 * H)),
    "mistral": (llama_like("mistral"), 2 * V * H + H + L * (GQA_ATTN + GATED + 2 * H)),
    "mixtral": (
        llama_like("mixtral", num_local_experts=MOE_E, num_experts_per_tok=MOE_K),
        2 * V * H + H + L * (GQA_ATTN + MOE_E * (3 * H * F + H) + 2 * H),
    ),
    # Qwen-1: fused c_attn with bias (3 H wide, MHA), c_proj and the MLP without bias, intermediate_size = 2 x w1's width
    "qwen": (
        {"model_type": "qwen", "vocab_size": V, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": A,
         "kv_channels": D, "intermediate_size": 2 * F, "seq_length": 512, "no_bias": True},
        2 * V * H + H + L * (3 * H * H + 3 * H + H * H + GATED + 2 * H),
    ),
    "qwen2": (llama_like("qwen2"), 2 * V * H + H + L * (GQA_ATTN + (A + 2 * KV) * D + GATED + 2 * H)),
    "qwen2_moe": (
        llama_like(
            "qwen2_moe",
            num_experts=MOE_E,
            num_experts_per_tok=MOE_K,
            moe_intermediate_size=MOE_F,
            shared_expert_intermediate_size=2 * MOE_F,
        ),
        2 * V * H
        + H
        + L * (GQA_ATTN + (A + 2 * KV) * D + MOE_E * (3 * H * MOE_F + H) + 3 * H * 2 * MOE_F + H + 2 * H),
    ),
    "qwen3": (
        llama_like("qwen3", head_dim=16),
        2 * V * H + H + L * (H * (A + 2 * KV) * 16 + A * 16 * H + 2 * 16 + GATED + 2 * H),
    ),
    "qwen3_moe": (
        llama_like("qwen3_moe", num_experts=MOE_E, num_experts_per_tok=MOE_K, moe_intermediate_size=MOE_F),
        2 * V * H + H + L * (GQA_ATTN + 2 * D + MOE_E * (3 * H * MOE_F + H) + 2 * H),
    ),
    "deepseek_v2": (
        llama_like(
            "deepseek_v2",
            num_key_value_heads=A,
            q_lora_rank=None,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=8,
            n_routed_experts=MOE_E,
            n_shared_experts=2,
            num_experts_per_tok=MOE_K,
            moe_intermediate_size=MOE_F,
            first_k_dense_replace=1,
        ),
        2 * V * H
        + H
        + L * (H * A * 12 + H * (16 + 4) + 16 + 16 * A * 16 + A * 8 * H + 2 * H)
        + GATED
        + (L - 1) * (MOE_E * (3 * H * MOE_F + H) + 3 * H * 2 * MOE_F),
    ),
    "deepseek_v3": (
        llama_like(
            "deepseek_v3",
            num_key_value_heads=A,
            q_lora_rank=24,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=8,
            n_routed_experts=MOE_E,
            n_shared_experts=1,
            num_experts_per_tok=MOE_K,
            moe_intermediate_size=MOE_F,
            first_k_dense_replace=1,
            num_nextn_predict_layers=1,
        ),
        2 * V * H
        + H
        + L * (H * 24 + 24 + 24 * A * 12 + H * (16 + 4) + 16 + 16 * A * 16 + A * 8 * H + 2 * H)
        + GATED
        + (L - 1) * (MOE_E * (3 * H * MOE_F + H) + 3 * H * MOE_F),
    ),
    "gemma": (llama_like("gemma", head_dim=16), V * H + H + L * (H * (A + 2 * KV) * 16 + A * 16 * H + GATED + 2 * H)),
    "gemma2": (
        llama_like("gemma2", head_dim=16),
        V * H + H + L * (H * (A + 2 * KV) * 16 + A * 16 * H + GATED + 4 * H),
    ),
    "gemma3_text": (
        llama_like("gemma3_text", head_dim=16),
        V * H + H + L * (H * (A + 2 * KV) * 16 + A * 16 * H + 2 * 16 + GATED + 4 * H),
    ),
    "nemotron": (llama_like("nemotron"), 2 * V * H + 2 * H + L * (GQA_ATTN + 2 * H * F + 4 * H)),
    "granite": (llama_like("granite"), 2 * V * H + H + L * (GQA_ATTN + GATED + 2 * H)),
    "phi3": (llama_like("phi3"), 2 * V * H + H + L * (GQA_ATTN + GATED + 2 * H)),
    "gpt2": (
        {"model_type": "gpt2", "vocab_size": V, "n_embd": H, "n_layer": L, "n_head": A, "n_positions": 128},
        V * H + 128 * H + 2 * H + L * (4 * H + 3 * H * H + 3 * H + H * H + H + 8 * H * H + 4 * H + H),
    ),
    "gpt_neox": (
        llama_like("gpt_neox", num_key_value_heads=None),
        2 * V * H + 2 * H + L * (4 * H + 4 * H * H + 4 * H + 2 * H * F + F + H),
    ),
    "opt": (
        {
            "model_type": "opt",
            "vocab_size": V,
            "hidden_size": H,
            "num_hidden_layers": L,
            "num_attention_heads": A,
            "ffn_dim": F,
            "max_position_embeddings": 128,
        },
        V * H + 130 * H + 2 * H + L * (4 * H * H + 4 * H + 2 * H * F + F + H + 4 * H),
    ),
    "bloom": (
        {"model_type": "bloom", "vocab_size": V, "hidden_size": H, "n_layer": L, "n_head": A},
        V * H + 2 * H + 2 * H + L * (4 * H + 4 * H * H + 4 * H + 8 * H * H + 5 * H),
    ),
    "falcon": (
        {
            "model_type": "falcon",
            "vocab_size": V,
            "hidden_size": H,
            "num_hidden_layers": L,
            "num_attention_heads": A,
            "new_decoder_architecture": True,
            "num_kv_heads": KV,
        },
        V * H + 2 * H + L * (H * (A + 2 * KV) * D + H * H + 8 * H * H + 4 * H),
    ),
}


def test_every_reader_has_a_synthetic_case():
    assert set(SYNTHETIC) == set(READERS)


@pytest.mark.parametrize("model_type", sorted(SYNTHETIC))
def test_synthetic_counts(model_type):
    config, expected = SYNTHETIC[model_type]
    assert total(config) == expected


@pytest.mark.parametrize("model_type", sorted(SYNTHETIC))
def test_tying_changes_the_count_by_one_table(model_type):
    config, _ = SYNTHETIC[model_type]
    spec = spec_from_config(config, "x")
    tied = total({**config, "tie_word_embeddings": True})
    untied = total({**config, "tie_word_embeddings": False})
    width = spec.embedding_dim or spec.hidden_size
    assert untied - tied == V * width


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3", "gemma", "nemotron", "granite"])
def test_gqa_kv_heads(model_type):
    config, _ = SYNTHETIC[model_type]
    spec = spec_from_config(config, "x")
    d, k_v_bias = spec.head_dim, 1 if spec.qkv_bias else 0
    mha = total({**config, "num_key_value_heads": A})
    mqa = total({**config, "num_key_value_heads": 1})
    assert mha - mqa == L * 2 * (A - 1) * d * (H + k_v_bias)
    assert spec_from_config({**config, "num_key_value_heads": None}, "x").num_kv_heads == A


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3"])
def test_moe_active_below_total(model_type):
    config, _ = SYNTHETIC[model_type]
    counts = count_params(spec_from_config(config, "x"))
    assert counts.expert > 0
    assert counts.active < counts.total
    moe_layers = [l for l in counts.layers if l.routed_experts]
    for layer in moe_layers:
        assert layer.routed_active * MOE_E == layer.routed_experts * MOE_K


def test_llama_bias_flags():
    config, base = SYNTHETIC["llama"]
    assert total({**config, "attention_bias": True}) - base == L * ((A + 2 * KV) * D + H)
    assert total({**config, "mlp_bias": True}) - base == L * (2 * F + H)


def test_qwen2_moe_layer_selection():
    config, _ = SYNTHETIC["qwen2_moe"]
    spec = spec_from_config({**config, "num_hidden_layers": 6, "decoder_sparse_step": 2}, "x")
    assert spec.moe_layers == (1, 3, 5)
    spec = spec_from_config({**config, "num_hidden_layers": 4, "mlp_only_layers": [0, 2]}, "x")
    assert spec.moe_layers == (1, 3)
    counts = count_params(spec)
    assert counts.layers[0].dense_mlp == 3 * H * F and counts.layers[1].dense_mlp == 0
    assert counts.layers[1].shared_experts == 3 * H * 2 * MOE_F + H  # shared expert + its sigmoid gate


def test_qwen3_moe_has_no_shared_expert():
    config, _ = SYNTHETIC["qwen3_moe"]
    assert count_params(spec_from_config(config, "x")).layers[0].shared_experts == 0


def test_deepseek_layer_rules_and_mla():
    config, _ = SYNTHETIC["deepseek_v3"]
    spec = spec_from_config({**config, "num_hidden_layers": 7, "first_k_dense_replace": 2, "moe_layer_freq": 2}, "x")
    assert spec.moe_layers == (2, 4, 6)
    assert spec.attention_type == "mla" and spec.q_lora_rank == 24 and spec.head_dim == 12
    v2, _ = SYNTHETIC["deepseek_v2"]
    assert spec_from_config(v2, "x").q_lora_rank is None
    assert spec_from_config(v2, "x").num_mtp_layers == 0
    dense = spec_from_config({**v2, "n_routed_experts": None}, "x")
    assert not dense.is_moe


def test_gpt2_n_inner_and_untied():
    config, base = SYNTHETIC["gpt2"]
    assert total({**config, "n_inner": 2 * H}) - base == L * (2 * H * 2 * H + 2 * H - (8 * H * H + 4 * H))


def test_opt_projection_and_post_norm_variant():
    config, base = SYNTHETIC["opt"]
    p = 32
    projected = {**config, "word_embed_proj_dim": p}
    counts = count_params(spec_from_config(projected, "x"))
    assert counts.extra == 2 * H * p  # project_in + project_out, no bias
    assert counts.embedding == V * p + 130 * H
    assert total({**config, "do_layer_norm_before": False}) == base - 2 * H  # no final LayerNorm
    assert total({**config, "enable_bias": False}) == base - L * (4 * H + F + H)
    assert total({**config, "layer_norm_elementwise_affine": False}) == base - (2 * L + 1) * 2 * H


def test_bloom_has_embedding_layernorm():
    config, _ = SYNTHETIC["bloom"]
    spec = spec_from_config(config, "x")
    assert spec.embedding_norm and spec.tie_word_embeddings and spec.learned_position_embeddings == 0
    assert count_params(spec).embedding == V * H + 2 * H


@pytest.mark.parametrize(
    ("flags", "qkv_out", "norms"),
    [
        ({"new_decoder_architecture": True, "num_kv_heads": KV}, (A + 2 * KV) * D, 2),
        ({"new_decoder_architecture": True, "num_kv_heads": KV, "num_ln_in_parallel_attn": 1}, (A + 2 * KV) * D, 1),
        ({"multi_query": True}, H + 2 * D, 1),
        ({"multi_query": False}, 3 * H, 1),
        ({"multi_query": False, "parallel_attn": False}, 3 * H, 2),
    ],
)
def test_falcon_variants(flags, qkv_out, norms):
    base = {"model_type": "falcon", "vocab_size": V, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": A}
    per_layer = H * qkv_out + H * H + 8 * H * H + norms * 2 * H
    assert total({**base, **flags}) == V * H + 2 * H + L * per_layer
    with_bias = total({**base, **flags, "bias": True})
    assert with_bias - total({**base, **flags}) == L * (qkv_out + H + 4 * H + H)


def test_nemotron_layernorm1p_and_relu2():
    config, _ = SYNTHETIC["nemotron"]
    spec = spec_from_config(config, "x")
    assert not spec.gated_mlp and spec.activation == "relu2" and spec.norm_bias


def test_gemma2_four_norms_against_gemma():
    g1, _ = SYNTHETIC["gemma"]
    g2, _ = SYNTHETIC["gemma2"]
    assert total(g2) - total(g1) == L * 2 * H


def test_missing_model_type_reads_as_llama():
    config, expected = SYNTHETIC["llama"]
    bare = {k: v for k, v in config.items() if k != "model_type"}
    assert total(bare) == expected


# --- published counts of small public models --------------------------------------------------

PUBLIC = {
    # name: (config, HF parameter count)
    "gpt2": (
        {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024},
        124_439_808,
    ),
    "pythia-160m": (
        {"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 768, "num_hidden_layers": 12,
         "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 2048},
        162_322_944,
    ),
    "opt-125m": (
        {"model_type": "opt", "vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12,
         "num_attention_heads": 12, "ffn_dim": 3072, "max_position_embeddings": 2048},
        125_239_296,
    ),
    "opt-350m": (
        {"model_type": "opt", "vocab_size": 50272, "hidden_size": 1024, "num_hidden_layers": 24,
         "num_attention_heads": 16, "ffn_dim": 4096, "max_position_embeddings": 2048,
         "word_embed_proj_dim": 512, "do_layer_norm_before": False},
        331_196_416,
    ),
    "bloom-560m": (
        {"model_type": "bloom", "vocab_size": 250880, "n_embed": 1024, "n_layer": 24, "n_head": 16},
        559_214_592,
    ),
    "gemma-7b": (
        {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072, "num_hidden_layers": 28,
         "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576},
        8_537_680_896,
    ),
    "qwen2.5-0.5b": (
        {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
         "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, "tie_word_embeddings": True},
        494_032_768,
    ),
    "qwen3-0.6b": (
        {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 28,
         "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
         "tie_word_embeddings": True},
        596_049_920,
    ),
    "pythia-70m": (
        {"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 512, "num_hidden_layers": 6,
         "num_attention_heads": 8, "intermediate_size": 2048},
        70_426_624,
    ),
    "deepseek-v2": (
        {"model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 5120, "intermediate_size": 12288,
         "moe_intermediate_size": 1536, "num_hidden_layers": 60, "num_attention_heads": 128,
         "num_key_value_heads": 128, "n_shared_experts": 2, "n_routed_experts": 160, "num_experts_per_tok": 6,
         "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
        235_741_434_880,
    ),
    "phi-3-mini": (
        {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192},
        3_821_079_552,
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_small_models(name):
    config, expected = PUBLIC[name]
    assert total(config, name) == expected


def test_catalog_path_loading(tmp_path):
    config, expected = PUBLIC["gpt2"]
    path = tmp_path / "my-gpt2.json"
    path.write_text(json.dumps(config))
    spec = load_model(str(path))
    assert spec.name == "my-gpt2" and count_params(spec).total == expected


# --- errors -------------------------------------------------------------------------------------


def one_line_error(config, name="cfg") -> str:
    with pytest.raises(InputError) as info:
        spec_from_config(config, name)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_model_type_lists_supported_and_llama_fields():
    message = one_line_error({"model_type": "foo", "hidden_size": 8})
    assert "unknown model_type 'foo'" in message
    assert "llama" in message and "qwen3_moe" in message
    for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        assert field in message


@pytest.mark.parametrize(
    "field", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"]
)
def test_missing_field_names_field_and_model(field):
    config, _ = SYNTHETIC["llama"]
    message = one_line_error({k: v for k, v in config.items() if k != field}, name="my-model")
    assert field in message and "my-model" in message


@pytest.mark.parametrize("model_type", ["mixtral", "qwen3_moe", "deepseek_v3", "gpt2", "opt", "bloom", "falcon"])
def test_missing_family_field(model_type):
    config, _ = SYNTHETIC[model_type]
    key = {"mixtral": "num_local_experts", "qwen3_moe": "moe_intermediate_size", "deepseek_v3": "kv_lora_rank",
           "gpt2": "n_embd", "opt": "ffn_dim", "bloom": "n_layer", "falcon": "hidden_size"}[model_type]
    message = one_line_error({k: v for k, v in config.items() if k != key}, name="fam")
    assert key in message and "fam" in message


@pytest.mark.parametrize("bad", [0, -4, "4096", 12.5, True])
def test_bad_sizes(bad):
    config, _ = SYNTHETIC["llama"]
    message = one_line_error({**config, "hidden_size": bad})
    assert "hidden_size" in message


def test_kv_heads_must_divide_heads():
    config, _ = SYNTHETIC["llama"]
    assert "num_key_value_heads=3" in one_line_error({**config, "num_key_value_heads": 3})


def test_hidden_not_divisible_without_head_dim():
    config, _ = SYNTHETIC["llama"]
    assert "head_dim" in one_line_error({**config, "num_attention_heads": 7, "num_key_value_heads": 7})


def test_top_k_above_experts():
    config, _ = SYNTHETIC["mixtral"]
    assert "num_experts_per_tok" in one_line_error({**config, "num_experts_per_tok": 9})


def test_not_a_dict():
    assert "JSON object" in one_line_error([1, 2])  # type: ignore[arg-type]
