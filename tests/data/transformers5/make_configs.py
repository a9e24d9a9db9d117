"""Writes the config.json files in this folder with a current transformers (not run by the tests).

    python -m venv /tmp/tf && /tmp/tf/bin/pip install transformers==5.24.0
    /tmp/tf/bin/python tests/data/transformers5/make_configs.py

Each file is what ``<ConfigClass>(**sizes).save_pretrained()`` writes, so the suite reads the
attribute names transformers v5 uses (e.g. Qwen3-MoE's ``num_local_experts``), not ours.
"""

from pathlib import Path

from transformers import AutoConfig

HERE = Path(__file__).parent
SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, vocab_size=1000)
CONFIGS = {
    "llama": SMALL,
    "qwen3": SMALL,
    "mixtral": dict(SMALL, num_local_experts=8, num_experts_per_tok=2),
    "qwen3_moe": dict(SMALL, moe_intermediate_size=128, num_experts=16, num_experts_per_tok=4),
    "qwen2_moe": dict(SMALL, moe_intermediate_size=128, shared_expert_intermediate_size=256, num_experts=16,
                      num_experts_per_tok=4),
    "deepseek_v2": dict(SMALL, num_key_value_heads=8, moe_intermediate_size=128, num_experts=16,
                        num_experts_per_tok=2, n_shared_experts=1, kv_lora_rank=64, q_lora_rank=None,
                        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=1),
    "deepseek_v3": dict(SMALL, num_key_value_heads=8, moe_intermediate_size=128, n_routed_experts=16,
                        num_experts_per_tok=2, n_shared_experts=1, kv_lora_rank=64, q_lora_rank=96,
                        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, first_k_dense_replace=1,
                        n_group=4, topk_group=2),
    "gpt2": dict(n_embd=256, n_layer=4, n_head=8, vocab_size=1000, n_positions=1024),
    "bloom": dict(hidden_size=256, n_layer=4, n_head=8, vocab_size=1000),
}

for model_type, sizes in CONFIGS.items():
    config = AutoConfig.for_model(model_type, **sizes)
    (HERE / f"{model_type}.json").write_text(config.to_json_string(use_diff=False))
