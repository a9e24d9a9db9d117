"""Engine limits the exports hold, as the engines assert them: tp divides the attention heads and the query
groups (Megatron-Core's TransformerConfig; torchtitan's and DeepSpeed AutoTP's whole-head shards), and a
learned-position model's seq stays within its table (Megatron's max_position_embeddings >= seq_length). The
search never recommends a layout that replicates key/value heads, though estimate still prices one."""

from __future__ import annotations

import subprocess

from cli_inprocess import run_cli as in_process
import pytest

import trainplan
from trainplan.tools.engines import ExportError, export, parse_args_text
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.validity import R_KV_REPLICA

TP_ENGINES = ("megatron", "torchtitan", "deepspeed")


def gqa(**kw) -> ModelSpec:
    """64 query heads in 8 groups (Llama 3 70B's attention), 8 layers to stay small."""
    base = dict(name="gqa-test", model_type="llama", num_layers=8, hidden_size=8192, num_attention_heads=64,
                num_kv_heads=8, head_dim=128, vocab_size=32000, max_seq_len=8192, intermediate_size=28672)
    return ModelSpec(**{**base, **kw})


def learned(**kw) -> ModelSpec:
    base = dict(name="gpt-test", model_type="gpt2", num_layers=8, hidden_size=2048, num_attention_heads=16,
                num_kv_heads=16, head_dim=128, vocab_size=50257, intermediate_size=8192, gated_mlp=False,
                activation="gelu_new", norm_type="layernorm", norm_bias=True, qkv_bias=True, o_bias=True,
                mlp_bias=True, tie_word_embeddings=True, learned_position_embeddings=2048, max_seq_len=2048)
    return ModelSpec(**{**base, **kw})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args)


@pytest.mark.parametrize("engine", TP_ENGINES)
def test_tp_past_the_query_groups_is_refused_naming_both_and_the_fix(engine):
    model = gqa()
    cfg = resolve_config(model, 64, tp=16, gbs=64)   # a valid estimate: 16 ranks share 8 key/value heads
    with pytest.raises(ExportError, match=r"tp=16 does not divide the 8 query groups .* use --tp 8"):
        export(engine, model, cfg, model_ref="x")
    export(engine, model, resolve_config(model, 64, tp=8, gbs=64), model_ref="x")   # whole heads: exported


def test_megatron_writes_the_query_groups_it_checked():
    model = gqa()
    flags = parse_args_text(export("megatron", model, resolve_config(model, 64, tp=8, gbs=64), model_ref="x").content)
    assert int(flags["--num-query-groups"]) % int(flags["--tensor-model-parallel-size"]) == 0


def test_mla_has_no_query_groups_but_its_heads():
    """MLA's latent key/value is not grouped: Megatron's num_query_groups defaults to the heads."""
    model = gqa(name="mla-test", model_type="deepseek_v3", attention_type="mla", num_attention_heads=16,
                num_kv_heads=16, hidden_size=2048, head_dim=192, q_lora_rank=None, kv_lora_rank=512,
                qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, intermediate_size=10944)
    export("megatron", model, resolve_config(model, 16, tp=16, gbs=16), model_ref="x")


def test_cli_export_tp16_with_8_query_groups_is_one_error_line():
    result = run_cli("export", "--engine", "megatron", "--model", "llama3-70b", "--gpu", "gb200", "--gpus", "64",
                     "--tp", "16")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "8 query groups" in lines[0] and "--tp 8" in lines[0] and not result.stdout


@pytest.mark.parametrize("engine", ["megatron", "deepspeed", "torchtitan", "accelerate", "trl"])
def test_seq_past_a_learned_position_table_is_refused(engine):
    model = learned()
    with pytest.raises(ExportError, match=r"seq=4096 is beyond the 2048 learned positions .* use --seq 2048"):
        export(engine, model, resolve_config(model, 8, seq=4096, gbs=8), model_ref="x")


def test_megatron_never_grows_a_learned_table_but_rotary_needs_none():
    model = learned()
    flags = parse_args_text(export("megatron", model, resolve_config(model, 8, seq=2048, gbs=8), model_ref="x").content)
    assert flags["--max-position-embeddings"] == "2048" and flags["--position-embedding-type"] == "learned_absolute"
    rotary = gqa(max_seq_len=4096)
    flags = parse_args_text(export("megatron", rotary, resolve_config(rotary, 64, tp=8, seq=8192, gbs=64),
                                   model_ref="x").content)
    assert int(flags["--max-position-embeddings"]) >= int(flags["--seq-length"]) == 8192


def test_cli_export_gpt3_past_its_table_is_one_error_line():
    result = run_cli("export", "--engine", "megatron", "--model", "gpt3-175b", "--gpu", "h100", "--gpus", "64",
                     "--tp", "8", "--seq", "4096")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "2048 learned positions" in lines[0], result.stderr


def test_search_never_recommends_replicated_key_value_heads():
    """On a GB200 NVL72 rack (72 GPUs in the NVLink domain) tp=16 is inside a node, so only the key/value rule
    keeps it out; estimate still prices it (a valid layout that no exported engine runs)."""
    result = trainplan.search(model="llama3-70b", gpu="gb200", gpus=64)
    assert result.rejected.get(R_KV_REPLICA, 0) > 0
    assert result.candidates and all(8 % c["config"]["tp"] == 0 for c in result.candidates)
    pinned = trainplan.search(model="llama3-70b", gpu="gb200", gpus=64, tp=16)
    assert not pinned.candidates and R_KV_REPLICA in pinned.rejected
    assert trainplan.estimate(model="llama3-70b", gpu="gb200", gpus=64, tp=16).config.tp == 16


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from trainplan.tools.core.errors import InputError  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TP_ENGINES), st.sampled_from([8, 16, 32, 64]), st.sampled_from([1, 2, 4, 8, 16, 64]),
       st.sampled_from([1, 2, 4, 8, 16]))
def test_an_exported_tp_always_divides_the_heads_and_the_query_groups(engine, heads, kv, tp):
    if kv > heads or heads % kv:
        return
    model = gqa(num_attention_heads=heads, num_kv_heads=kv, hidden_size=heads * 128)
    try:
        cfg = resolve_config(model, 16, tp=tp, gbs=16)
    except InputError:
        return   # not a layout at all (resolve_config's own rules)
    try:
        export(engine, model, cfg, model_ref="x")
    except ExportError as refusal:
        assert heads % tp or kv % tp, f"refused a tp the heads allow: {refusal}"
    else:
        assert heads % tp == 0 and kv % tp == 0
