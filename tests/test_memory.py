"""Memory calculator: Korthikanti et al. 2022 closed forms, Megatron-LM's theoretical model-state
memory, schedule in-flight counts, sharding rules, properties, and the vectorised path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.hardware.counting import count_params, layer_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.config.stages import model_layers_per_stage
from trainplan.tools.perf.activations import activation_bytes_per_layer
from trainplan.tools.perf.activations import inflight_microbatches
from trainplan.tools.perf.memory import (
    COMPONENTS,
    GIB,
    PRECISION_CODES,
    RECOMPUTE_CODES,
    SCHEDULE_CODES,
    memory_breakdown,
    memory_totals_vectorised,
)
from trainplan.tools.hardware.specs import ModelSpec

H100 = load_gpu("h100-sxm-80gb")

# A small GPT-3-style block (gpt2 model_type: LayerNorm, biases, 4h GeLU MLP, dropout).
GPT_SMALL = ModelSpec(
    name="gpt-small", model_type="gpt2", num_layers=8, hidden_size=1024, num_attention_heads=16,
    num_kv_heads=16, head_dim=64, vocab_size=50257, max_seq_len=2048, tie_word_embeddings=True,
    intermediate_size=4096, gated_mlp=False, activation="gelu_new", qkv_bias=True, o_bias=True,
    mlp_bias=True, norm_type="layernorm", norm_bias=True, learned_position_embeddings=2048, attention_dropout=0.1,
)


def layer_total(model, layer=0, **kw) -> float:
    """Bytes one block keeps; GPT-3-style (dropout) recipes run eager attention, as in Korthikanti et al."""
    kw.setdefault("attention", "eager" if model.attention_dropout > 0 else "flash")
    cfg = resolve_config(model, gpus=kw.pop("gpus", kw.get("tp", 1)), **kw)
    return sum(activation_bytes_per_layer(model, cfg, layer).values())


# --- Korthikanti et al. 2022, Table 2 (bytes per layer per micro-batch) ---------------------------


@pytest.mark.parametrize("model", [GPT_SMALL, load_model("gpt3-175b")], ids=lambda m: m.name)
@pytest.mark.parametrize("s,b,t", [(2048, 1, 1), (2048, 2, 8), (1024, 4, 4)])
def test_korthikanti_table2_exact(model, s, b, t):
    h, a = model.hidden_size, model.num_attention_heads
    sbh = s * b * h
    cases = {
        # (sequence_parallel, recompute): closed form
        (False, "none"): sbh * (10 + 24 / t + 5 * a * s / (h * t)),          # TP (sbh(34 + 5as/h) at t=1)
        (True, "none"): sbh / t * (34 + 5 * a * s / h),                       # TP + SP
        (True, "selective"): 34 * sbh / t,                                     # TP + SP + selective
        (False, "selective"): sbh * (10 + 24 / t),                             # TP + selective (derived row)
        (False, "full"): 2 * sbh,                                              # full: layer input, replicated
        (True, "full"): 2 * sbh / t,                                           # full with SP: input is /t
    }
    for (sp, recompute), expected in cases.items():
        got = layer_total(model, tp=t, seq=s, mbs=b, sequence_parallel=sp, recompute=recompute)
        assert got == pytest.approx(expected, rel=1e-12), (sp, recompute)
    if t == 1:
        no_parallelism = sbh * (34 + 5 * a * s / h)
        assert layer_total(model, seq=s, mbs=b, recompute="none") == pytest.approx(no_parallelism, rel=1e-12)


def test_korthikanti_breakdown_attention_mlp_norms():
    """Attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh (the paper's Sec. 4.1 breakdown)."""
    m, s, b = GPT_SMALL, 2048, 2
    h, a = m.hidden_size, m.num_attention_heads
    per = activation_bytes_per_layer(m, resolve_config(m, gpus=1, seq=s, mbs=b, recompute="none", attention="eager"), 0)
    group = lambda prefix: sum(v for k, v in per.items() if k.startswith(prefix))
    assert group("attention/") == 11 * s * b * h + 5 * a * s * s * b
    assert group("mlp/") == 19 * s * b * h
    assert group("norm/") == 4 * s * b * h


# --- Llama-style, MoE and MLA derivations (independent arithmetic) --------------------------------


def test_llama_layer_flash_attention_swiglu():
    m = load_model("llama3-8b")
    s, b, t = 8192, 1, 4
    h, a, g, d, f = m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.head_dim, m.intermediate_size
    expected = (
        2 * 2 * s * b * h / t          # two RMSNorm inputs (SP)
        + 2 * s * b * h / t            # QKV GEMM input
        + 2 * s * b * d * (a + 2 * g) / t   # Q, K, V (GQA: g kv heads)
        + 2 * s * b * a * d / t        # flash output O = out-proj input
        + 4 * s * b * a / t            # fp32 log-sum-exp
        + 2 * s * b * h / t            # MLP input
        + 2 * 2 * s * b * f / t        # SwiGLU gate and up outputs
        + 2 * s * b * f / t            # down-proj input
    )
    assert layer_total(m, tp=t, seq=s, recompute="none") == pytest.approx(expected, rel=1e-12)
    # Selective recompute with flash attention only drops the log-sum-exp.
    assert layer_total(m, tp=t, seq=s, recompute="selective") == pytest.approx(expected - 4 * s * b * a / t, rel=1e-12)
    # CP divides every token count by cp (flash attention has no s^2 term).
    assert layer_total(m, tp=t, cp=2, gpus=2 * t, seq=s, recompute="none") == pytest.approx(expected / 2, rel=1e-12)


def test_kv_heads_replicated_when_fewer_than_tp():
    m = load_model("llama3-70b").model_copy(update={"num_kv_heads": 4})
    s, t = 4096, 8
    per = activation_bytes_per_layer(m, resolve_config(m, gpus=t, tp=t, seq=s), 0)
    d, a = m.head_dim, m.num_attention_heads
    assert per["attention/qkv"] == 2 * s * d * (a / t + 2 * 1)   # one kv head per rank


def test_fp8_caches_gemm_inputs_in_one_byte():
    m = load_model("llama3-8b")
    bf16 = activation_bytes_per_layer(m, resolve_config(m, gpus=1, seq=4096, recompute="none"), 0)
    fp8 = activation_bytes_per_layer(m, resolve_config(m, gpus=1, seq=4096, recompute="none", precision="fp8"), 0)
    for key in ("attention/qkv_input", "mlp/fc1_input", "mlp/fc2_input"):
        assert fp8[key] == bf16[key] / 2
    assert fp8["attention/context"] == bf16["attention/context"] * 1.5   # bf16 O for flash + fp8 copy
    assert fp8["norm/inputs"] == bf16["norm/inputs"]


def test_deepseek_moe_mla_layer():
    m = load_model("deepseek-v3")
    s, b = 4096, 1
    h, a, E, k = m.hidden_size, m.num_attention_heads, m.num_experts, m.experts_per_token
    fe, qk, dv = m.moe_intermediate_size, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    cfg = resolve_config(m, gpus=64, ep=64, seq=s, recompute="none")
    per = activation_bytes_per_layer(m, cfg, 3)                # first MoE layer
    assert per["moe/router_scores"] == 4 * s * b * E            # fp32 scores
    assert per["moe/dispatched"] == 2 * s * b * k * h           # top-k token copies
    assert per["moe/expert_act_input"] == 2 * 2 * s * b * k * fe
    assert per["moe/expert_fc2_input"] == 2 * s * b * k * fe
    assert per["moe/shared_act_input"] == 4 * s * b * m.shared_expert_intermediate_size
    assert per["moe/shared_fc2_input"] == 2 * s * b * m.shared_expert_intermediate_size
    # latent-norm inputs and outputs (the up-projection inputs), bf16 each
    assert per["attention/latents"] == 2 * s * b * (m.q_lora_rank + m.kv_lora_rank)
    assert per["attention/latent_norm_out"] == 2 * s * b * (m.q_lora_rank + m.kv_lora_rank)
    assert per["moe/probs"] == 4 * s * b * k                    # fp32 probability per routed copy
    assert "moe/expert_output" not in per                       # probs applied in the activation
    assert per["attention/qkv"] == 2 * s * b * a * (2 * qk + dv)
    dense = activation_bytes_per_layer(m, cfg, 0)
    assert "mlp/act_input" in dense and "moe/dispatched" not in dense


def test_korthikanti_first_stage_eq5():
    """1F1B first stage: p micro-batches x L/p layers = s b h L / t (34 + 5as/h) with TP + SP."""
    m = load_model("gpt3-175b")
    s, b, t, p = 2048, 1, 8, 16
    h, a, L = m.hidden_size, m.num_attention_heads, m.num_layers
    cfg = resolve_config(m, gpus=t * p * 2, tp=t, pp=p, seq=s, mbs=b, gbs=64, recompute="none", attention="eager")
    r = memory_breakdown(m, cfg, H100)
    assert r.worst_stage == 0   # the breakdown below is stage 0's
    layers = sum(v for k, v in r.breakdown.items() if k.split("/")[1] in ("attention", "mlp", "norm"))
    assert layers * GIB == pytest.approx(s * b * h * L / t * (34 + 5 * a * s / h), rel=1e-12)


# --- in-flight micro-batches ---------------------------------------------------------------------


def megatron_interleaved_warmup(p, v, m, rank):
    """Megatron schedules.py: num_warmup = (p - rank - 1) * 2 + (v - 1) * p, capped at m * v."""
    return min((p - rank - 1) * 2 + (v - 1) * p, m * v)


@pytest.mark.parametrize("p,m", [(4, 16), (8, 8), (8, 3), (16, 64)])
def test_inflight_closed_forms(p, m):
    assert inflight_microbatches("gpipe", p, m) == [m] * p
    assert inflight_microbatches("1f1b", p, m) == [min(p - i, m) for i in range(p)]
    assert inflight_microbatches("zb-h1", p, m) == inflight_microbatches("1f1b", p, m)
    assert inflight_microbatches("dualpipe", p, m) == [min(p + 1, m)] * p
    for v in (2, 4):
        got = inflight_microbatches("interleaved", p, m, v)
        want = [min(megatron_interleaved_warmup(p, v, m, i) + 1, m * v) / v for i in range(p)]
        assert got == pytest.approx(want)
        if m * v > 2 * (p - 1) + (v - 1) * p:   # uncapped: Megatron's theoretical (1 + (p - 1)/(p v)) x p
            assert got[0] == pytest.approx((1 + (p - 1) / (p * v)) * p)
    for schedule in ("gpipe", "1f1b", "zb-h1", "dualpipe"):
        assert inflight_microbatches(schedule, 1, m) == [1.0]


# --- model states: Megatron-LM's theoretical memory ----------------------------------------------


def megatron_terms(model):
    """Per-layer parameter terms of Megatron-LM compute_weight_and_optimizer_memory
    (megatron/training/theoretical_memory_usage.py, NVIDIA/Megatron-LM @00caa53), re-implemented:
    attention 2h^2 (1 + g/a) (a d / h), or the MLA term; dense layer 2h (f x 3/2 (SwiGLU) + norm)
    + attention; MoE layer 2h (f_e E 3/2 + f_s 3/2 + norm) + attention; embedding h V;
    final norm norm x h. norm = 1 for RMSNorm, 2 for LayerNorm."""
    h, a = model.hidden_size, model.num_attention_heads
    norm = 1 if model.norm_type == "rmsnorm" else 2
    glu = 3 / 2 if model.gated_mlp else 1
    if model.attention_type == "mla":
        qk, rope = model.qk_nope_head_dim, model.qk_rope_head_dim
        q = model.q_lora_rank * (h + a * (qk + rope) + norm) if model.q_lora_rank else h * a * (qk + rope)
        kv = model.kv_lora_rank * (h + a * (qk + model.v_head_dim) + norm) + h * rope
        attention = q + kv + a * model.v_head_dim * h
    else:
        attention = 2 * h * h * ((1 + model.num_kv_heads / a) * (model.head_dim * a / h))
    dense = 2 * h * (model.intermediate_size * glu + norm) + attention
    shared = model.shared_expert_intermediate_size * model.num_shared_experts
    moe = 2 * h * (model.moe_intermediate_size * model.num_experts * glu + shared * glu + norm) + attention
    return dict(dense=dense, moe=moe, embedding=h * model.vocab_size, final_norm=norm * h)


def megatron_weight_and_optimizer_bytes(model, tp, pp, dp, distributed_optimizer=True):
    """Megatron's most loaded shard: ((block / pp) + mtp + embedding) / tp (+ untied head when
    pp = 1), times 18 B/param, or 6 + 12/dp with the distributed optimizer."""
    terms = megatron_terms(model)
    n_moe = len(model.moe_layers)
    block = terms["dense"] * (model.num_layers - n_moe) + terms["moe"] * n_moe + terms["final_norm"]
    mtp = (terms["moe"] if model.is_moe else terms["dense"]) * model.num_mtp_layers
    params = (block / pp + mtp + terms["embedding"]) / tp
    if not model.tie_word_embeddings and pp == 1:
        params += terms["embedding"] / tp
    return params * (6 + 12 / dp if distributed_optimizer else 18)


def model_states(result, stage=None):
    row = result.per_stage[result.worst_stage if stage is None else stage]
    return row["weights"] + row["gradients"] + row["optimizer"]


@pytest.mark.parametrize("name,gpus,tp,pp,zero,tol", [
    ("llama3-70b", 64, 8, 4, 1, 0.001),
    ("llama3-70b", 64, 8, 1, 1, 0.001),
    ("llama3-70b", 512, 8, 8, 0, 0.001),
    ("llama3-8b", 8, 2, 2, 1, 0.001),
    ("gpt3-175b", 1024, 8, 16, 1, 0.02),   # + learned positions (2048 x h, replicated) Megatron leaves out
    ("gpt3-175b", 64, 8, 8, 0, 0.02),
])
def test_model_states_match_megatron(name, gpus, tp, pp, zero, tol):
    model = load_model(name)
    cfg = resolve_config(model, gpus=gpus, tp=tp, pp=pp, zero=zero, seq=2048)
    ours = model_states(memory_breakdown(model, cfg, H100), stage=0) * GIB
    theirs = megatron_weight_and_optimizer_bytes(model, tp, pp, cfg.dp, distributed_optimizer=zero >= 1)
    assert ours == pytest.approx(theirs, rel=tol)
    assert ours >= theirs   # we add what Megatron's formula leaves out (positions, biases, replicated norms)


def megatron_stage_bytes(model, layers, first, last, tp, dp):
    """Megatron's per-layer terms summed over one stage's actual layers, + embedding on the first
    stage, + final norm and head on the last (6 + 12/dp B/param, distributed optimizer)."""
    terms = megatron_terms(model)
    params = sum(terms["moe"] if i in model.moe_layers else terms["dense"] for i in layers)
    params += terms["embedding"] * first + (terms["final_norm"] + terms["embedding"]) * last
    return params / tp * (6 + 12 / dp)


def test_llama3_405b_uneven_stages_against_megatron():
    """126 layers on pp16: Megatron's formula assumes 126/16 layers + embedding on one stage; with
    Llama 3's split (first/last stage one layer fewer) the worst stage holds 8 layers, no embedding."""
    model = load_model("llama3-405b")
    cfg = resolve_config(model, gpus=8192, tp=8, pp=16, seq=8192)
    result = memory_breakdown(model, cfg, H100)
    counts, start = model_layers_per_stage(model, 16), 0
    for i, n in enumerate(counts):
        ours = model_states(result, stage=i) * GIB
        theirs = megatron_stage_bytes(model, range(start, start + n), i == 0, i == 15, 8, cfg.dp)
        assert ours == pytest.approx(theirs, rel=0.001)
        start += n
    naive = megatron_weight_and_optimizer_bytes(model, 8, 16, cfg.dp)
    assert model_states(result) * GIB == pytest.approx(naive, rel=0.07)
    assert model_states(result) * GIB < naive


def test_deepseek_v3_moe_stage_against_megatron():
    """ep=1 (Megatron's formula does not divide experts by ep): a middle stage of 4 MoE layers."""
    model = load_model("deepseek-v3")
    cfg = resolve_config(model, gpus=128, pp=16, seq=4096)
    result = memory_breakdown(model, cfg, H100)
    counts = model_layers_per_stage(model, 16)
    start = sum(counts[:5])
    theirs = megatron_stage_bytes(model, range(start, start + counts[5]), False, False, 1, cfg.dp)
    assert model_states(result, stage=5) * GIB == pytest.approx(theirs, rel=0.001)


# --- sharding rules ------------------------------------------------------------------------------


def test_bytes_per_param_by_zero_stage_and_options():
    model = load_model("llama3-8b")
    n = count_params(model).total
    for zero, per_param in ((0, 2 + 4 + 12), (1, 2 + 4 + 12 / 8), (2, 2 + (4 + 12) / 8), (3, (2 + 4 + 12) / 8)):
        r = memory_breakdown(model, resolve_config(model, gpus=8, zero=zero), H100)
        transients = r.breakdown.get("weights/zero3_prefetch", 0) + r.breakdown.get("gradients/zero2_bucket", 0)
        assert model_states(r) - transients == pytest.approx(n * per_param / GIB, rel=1e-9)
    offload = memory_breakdown(model, resolve_config(model, gpus=8, optimizer_offload=True), H100)
    assert offload.optimizer == 0
    bf16 = memory_breakdown(model, resolve_config(model, gpus=8, zero=0, bf16_grads=True), H100)
    assert model_states(bf16) == pytest.approx(n * 16 / GIB, rel=1e-9)   # DeepSpeed's 16 B/param


def test_fp8_weight_cache_and_zero3_prefetch():
    model = load_model("llama3-8b")
    counts = count_params(model)
    gemm = sum(lp.attention + lp.dense_mlp for lp in counts.layers)
    r = memory_breakdown(model, resolve_config(model, gpus=8, precision="fp8"), H100)
    assert r.breakdown["weights/fp8_cache"] * GIB == pytest.approx(2 * gemm)   # fp8 weight + fp8 transpose
    z3 = memory_breakdown(model, resolve_config(model, gpus=8, zero=3), H100)
    one_layer = counts.layers[0].total
    assert z3.breakdown["weights/zero3_prefetch"] * GIB == pytest.approx(2 * 2 * one_layer)   # 2 bf16 layers
    assert z3.breakdown["gradients/zero2_bucket"] * GIB == pytest.approx(4 * one_layer)


def test_tp_shards_all_but_norms_row_biases_and_positions():
    m = GPT_SMALL
    r1 = memory_breakdown(m, resolve_config(m, gpus=1, seq=2048), H100)
    r4 = memory_breakdown(m, resolve_config(m, gpus=4, tp=4, seq=2048), H100)
    h, L = m.hidden_size, m.num_layers
    # Replicated per layer: 2 LayerNorms (w + b) and the row-parallel biases of o and fc2.
    replicated = L * (2 * 2 * h + h + h)
    layers = sum(lp.total for lp in count_params(m).layers)
    assert r4.breakdown["weights/layers"] * GIB == pytest.approx(2 * ((layers - replicated) / 4 + replicated))
    assert r1.breakdown["weights/layers"] * GIB == pytest.approx(2 * layers)
    positions = 2048 * h   # learned positions are replicated; word embedding is vocab-parallel
    assert r4.breakdown["weights/embedding"] * GIB == pytest.approx(2 * (m.vocab_size * h / 4 + positions))


def resolve_layers(model, cfg, stage):
    counts = model_layers_per_stage(model, cfg.pp)
    start = sum(counts[:stage])
    return range(start, start + counts[stage])


def test_experts_shard_over_ep_and_expert_data_parallel():
    model = load_model("deepseek-v3")
    cfg = resolve_config(model, gpus=2048, pp=16, ep=64, seq=4096)   # dp = 128, expert dp = 2
    r = memory_breakdown(model, cfg, H100)
    layers = resolve_layers(model, cfg, r.worst_stage)
    routed = sum(count_params(model).layers[i].routed_experts for i in layers)
    assert r.breakdown["weights/experts"] * GIB == pytest.approx(2 * routed / 64)
    assert r.breakdown["gradients/experts"] * GIB == pytest.approx(4 * routed / 64)
    assert r.breakdown["optimizer/experts"] * GIB == pytest.approx(12 * routed / 64 / 2)


def test_dualpipe_holds_two_stages_of_parameters():
    model = load_model("llama3-70b")
    base = dict(gpus=64, tp=8, pp=8, gbs=128, seq=4096)
    one = memory_breakdown(model, resolve_config(model, **base), H100)
    dual = memory_breakdown(model, resolve_config(model, schedule="dualpipe", **base), H100)
    # Rank 3 holds stages 3 and pp-1-3 = 4.
    assert dual.per_stage[3]["num_layers"] == one.per_stage[3]["num_layers"] + one.per_stage[4]["num_layers"]
    assert dual.per_stage[3]["weights"] == pytest.approx(one.per_stage[3]["weights"] + one.per_stage[4]["weights"])
    assert dual.per_stage[0]["inflight_microbatches"] == 9   # pp + 1



def test_dualpipe_end_rank_holds_the_shared_embedding_and_head_once():
    """DeepSeek-V3 §2.2: the MTP module shares the embedding and output head with the main model.
    DualPipe puts stage 0 (embedding) and stage pp-1 (head, MTP) on rank 0, so rank 0 holds one
    embedding, one head and the MTP module's own block, eh_proj and norms; the middle ranks none."""
    model = load_model("deepseek-v3")
    cfg = resolve_config(model, gpus=2048, pp=16, ep=64, seq=4096, gbs=15360, schedule="dualpipe")
    r = memory_breakdown(model, cfg, H100)
    counts = count_params(model)
    split = model_layers_per_stage(model, 16)
    end_layers = [*range(split[0]), *range(model.num_layers - split[-1], model.num_layers)]
    mtp_block = layer_params(model, model.num_layers)
    mtp_own = counts.mtp - mtp_block.routed_experts + mtp_block.routed_experts / 64   # eh_proj, norms, block
    params = (sum(counts.layers[i].non_expert + counts.layers[i].routed_experts / 64 for i in end_layers)
              + model.vocab_size * model.hidden_size             # embedding, once
              + model.hidden_size * model.vocab_size + counts.final_norm   # head, once
              + mtp_own)
    for rank in (0, 15):
        assert r.per_stage[rank]["weights"] * GIB == pytest.approx(2 * params)   # bf16, tp = 1, ZeRO-1
    assert r.worst_stage not in (0, 15)
    assert not any(r.breakdown.get(f"weights/{name}") for name in ("embedding", "lm_head", "mtp"))

def test_bf16_moments_save_four_bytes_per_parameter_of_the_sharded_state():
    """DeepSeek-V3 §3.3.3: Adam m and v in bf16 (2 + 2 B), master weights in fp32. On the published
    layout (PP16 DualPipe EP64, ZeRO-1 over dp = 128; the experts' data-parallel group is
    2048 / (16 x 64) = 2) a middle rank holds 8 MoE layers, and only its optimizer states shrink."""
    model = load_model("deepseek-v3")
    kw = dict(gpus=2048, pp=16, ep=64, zero=1, seq=4096, gbs=15360, schedule="dualpipe", precision="fp8")
    fp32 = memory_breakdown(model, resolve_config(model, **kw), H100)
    bf16 = memory_breakdown(model, resolve_config(model, bf16_moments=True, **kw), H100)
    counts = count_params(model)
    split = model_layers_per_stage(model, 16)
    starts = np.cumsum([0, *split])
    layers = [*range(starts[1], starts[2]), *range(starts[14], starts[15])]   # rank 1: stages 1 and 14
    experts = sum(counts.layers[i].routed_experts for i in layers) / 64
    non_expert = sum(counts.layers[i].non_expert for i in layers)
    saved = (fp32.per_stage[1]["optimizer"] - bf16.per_stage[1]["optimizer"]) * GIB
    assert saved == pytest.approx(4 * (experts / 2 + non_expert / 128))
    for part in ("weights", "gradients", "activations"):
        assert bf16.per_stage[1][part] == fp32.per_stage[1][part]


def test_tied_head_copy_on_last_stage_and_logits():
    m = GPT_SMALL
    counts = count_params(m)
    r = memory_breakdown(m, resolve_config(m, gpus=2, pp=2, seq=2048, gbs=8, recompute="none"), H100)
    first = model_layers_per_stage(m, 2)[0]
    last_layers = sum(lp.total for lp in counts.layers[first:])
    # Megatron keeps a copy of the tied word embedding (V x h) on the last stage, plus the final norm.
    expected = 2 * (last_layers + m.vocab_size * m.hidden_size + counts.final_norm)
    assert r.per_stage[1]["weights"] * GIB == pytest.approx(expected)
    full = memory_breakdown(m, resolve_config(m, gpus=1, seq=2048, gbs=8, recompute="none"), H100)
    assert full.breakdown["activations/lm_head/logits"] * GIB == 4 * 2048 * m.vocab_size   # fp32 s b V / t


# --- fits, reason, result shape ------------------------------------------------------------------


def test_reason_names_stage_component_and_fix():
    model = load_model("llama3-70b")
    r = memory_breakdown(model, resolve_config(model, gpus=8, tp=8, seq=8192, recompute="none", mbs=4), H100)
    assert not r.fits
    assert f"on stage {r.worst_stage}" in r.reason and "GiB available" in r.reason and "try" in r.reason
    largest = max(COMPONENTS, key=lambda c: getattr(r, c))
    assert largest in r.reason
    d = r.to_dict()
    assert set(d) == {*COMPONENTS, "total", "capacity", "fits", "reason"}
    ok = memory_breakdown(model, resolve_config(model, gpus=64, tp=8, pp=8, seq=8192), H100)
    assert ok.fits and ok.reason is None
    tight = memory_breakdown(model, resolve_config(model, gpus=64, tp=8, pp=8, seq=8192), H100,
                             headroom_gib=H100.memory_gib - ok.total + 0.1)
    assert not tight.fits


def test_breakdown_parts_sum_to_components():
    for name, kw in (("deepseek-v3", dict(gpus=2048, pp=16, ep=64, seq=4096, gbs=4096, schedule="dualpipe",
                                         precision="fp8", recompute="full")),
                     ("gpt3-175b", dict(gpus=1024, tp=8, pp=16, vpp=2, gbs=1536))):
        model = load_model(name)
        r = memory_breakdown(model, resolve_config(model, **kw), H100)
        for c in COMPONENTS:
            assert sum(v for k, v in r.breakdown.items() if k.startswith(c + "/")) == pytest.approx(getattr(r, c))
        assert r.total == pytest.approx(sum(getattr(r, c) for c in COMPONENTS))
        for row in r.per_stage:
            assert row["total"] == pytest.approx(sum(row[c] for c in COMPONENTS))
        assert r.total == max(row["total"] for row in r.per_stage)


# --- properties ----------------------------------------------------------------------------------

DENSE = ("llama3-8b", "llama3-70b")


def _result(model, **kw):
    return memory_breakdown(model, resolve_config(model, **kw), H100)


layouts = st.fixed_dictionaries({
    "name": st.sampled_from(DENSE),
    "tp": st.sampled_from([1, 2, 4]),
    "pp": st.sampled_from([1, 2, 4]),
    "cp": st.sampled_from([1, 2]),
    "dp": st.sampled_from([2, 4, 8]),
    "mbs": st.sampled_from([1, 2]),
    "seq": st.sampled_from([2048, 8192]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "schedule": st.sampled_from(["gpipe", "1f1b", "zb-h1"]),
    "precision": st.sampled_from(["bf16", "fp8"]),
    "zero": st.sampled_from([0, 1, 2, 3]),
})


def _kw(d):
    kw = {k: v for k, v in d.items() if k not in ("name", "dp")}
    kw["gpus"] = d["tp"] * d["pp"] * d["cp"] * d["dp"]
    kw["gbs"] = 16 * d["dp"] * d["mbs"]
    return kw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts)
def test_properties_monotone_and_consistent(d):
    model = load_model(d["name"])
    kw = _kw(d)
    cfg = resolve_config(model, **kw)
    assert cfg.dp * cfg.tp * cfg.pp * cfg.cp == kw["gpus"]
    base = memory_breakdown(model, cfg, H100)
    assert base.total == pytest.approx(sum(getattr(base, c) for c in COMPONENTS))
    # A higher ZeRO stage never adds memory (stages hold >= 4 layers here).
    if d["zero"] < 3:
        assert _result(model, **{**kw, "zero": d["zero"] + 1}).total <= base.total + 1e-9
    # Doubling tp (same dp) or pp (same dp) never adds memory. Not pp under GPipe: there stage 0
    # holds all m micro-batches once pp > 1, against one at a time with pp = 1.
    for knob in ("tp", "pp"):
        if d[knob] < 4 and not (knob == "pp" and d["schedule"] == "gpipe"):
            bigger = {**kw, knob: 2 * d[knob], "gpus": 2 * kw["gpus"]}
            assert _result(model, **bigger).total <= base.total + 1e-9, knob
    # Sharded model states scale as 1/(dp cp): doubling dp halves the optimizer (zero >= 1).
    if d["zero"] >= 1:
        doubled = _result(model, **{**kw, "gpus": 2 * kw["gpus"], "gbs": 2 * kw["gbs"]})
        stage = base.worst_stage   # the same stage: the worst one can move when states shrink
        assert doubled.per_stage[stage]["optimizer"] == pytest.approx(base.per_stage[stage]["optimizer"] / 2, rel=1e-9)


def test_layout_product_mismatch_is_an_input_error():
    with pytest.raises(InputError, match="does not divide gpus"):
        resolve_config(load_model("llama3-8b"), gpus=24, tp=8, pp=2)


# --- vectorised path -----------------------------------------------------------------------------


def _random_layouts(model, rng, count):
    out = []
    while len(out) < count:
        kw = dict(
            tp=int(rng.choice([1, 2, 4, 8])), pp=int(rng.choice([1, 2, 4, 8])), cp=int(rng.choice([1, 2])),
            mbs=int(rng.choice([1, 2])), seq=int(rng.choice([2048, 4096])), zero=int(rng.integers(0, 4)),
            recompute=str(rng.choice(["none", "selective", "full"])), precision=str(rng.choice(["bf16", "fp8"])),
            schedule=str(rng.choice(["gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"])),
            sequence_parallel=bool(rng.random() < 0.8), optimizer_offload=bool(rng.random() < 0.2),
            bf16_grads=bool(rng.random() < 0.2), save_mlp_act_output=bool(rng.random() < 0.7),
            fused_kernels=bool(rng.random() < 0.7),
        )
        dp = int(rng.choice([1, 2, 4, 8, 16]))
        kw["vpp"] = int(rng.choice([2, 3])) if kw["schedule"] == "interleaved" else 1
        if model.is_moe:
            kw["ep"] = int(rng.choice([1, 2, 4, 8]))
        kw["gpus"] = kw["tp"] * kw["pp"] * kw["cp"] * dp
        kw["gbs"] = int(rng.choice([1, 2, 8])) * 2 * dp * kw["mbs"]
        try:
            out.append(resolve_config(model, **kw))
        except InputError:
            continue
    return out


@pytest.mark.parametrize("name", ["llama3-8b", "gpt3-175b", "deepseek-v3", "llama3-405b"])
def test_vectorised_equals_scalar(name):
    model = load_model(name)
    cfgs = _random_layouts(model, np.random.default_rng(7), 60)
    arrays = {
        key: np.array([getattr(c, key) for c in cfgs]) for key in
        ("tp", "pp", "cp", "ep", "dp", "vpp", "zero", "mbs", "num_microbatches", "seq",
         "sequence_parallel", "optimizer_offload", "bf16_grads", "save_mlp_act_output", "fused_kernels")
    }
    arrays["recompute"] = np.array([RECOMPUTE_CODES[c.recompute] for c in cfgs])
    arrays["schedule"] = np.array([SCHEDULE_CODES[c.schedule] for c in cfgs])
    arrays["precision"] = np.array([PRECISION_CODES[c.precision] for c in cfgs])
    vec = memory_totals_vectorised(model, H100, arrays)
    for i, cfg in enumerate(cfgs):
        r = memory_breakdown(model, cfg, H100)
        for key in (*COMPONENTS, "total"):
            assert vec[key][i] == pytest.approx(getattr(r, key), rel=1e-9, abs=1e-12), (cfg, key)
        assert vec["worst_stage"][i] == r.worst_stage


def test_vectorised_accepts_scalar_seq_and_defaults():
    model = load_model("llama3-8b")
    arrays = dict(tp=np.array([1, 2]), pp=np.array([1, 2]), cp=1, ep=1, dp=np.array([8, 2]), vpp=1, zero=1,
                  mbs=1, num_microbatches=np.array([4, 16]), seq=8192, recompute=1, schedule=1, precision=0)
    vec = memory_totals_vectorised(model, H100, arrays)
    for i, (tp, pp, dp) in enumerate(((1, 1, 8), (2, 2, 2))):
        cfg = resolve_config(model, gpus=8, tp=tp, pp=pp, seq=8192, gbs=32)
        assert vec["total"][i] == pytest.approx(memory_breakdown(model, cfg, H100).total, rel=1e-9)
    assert math.isfinite(vec["total"].sum())


# --- optional: bytes a real layer saves for backward (CPU torch, skipped when torch is absent) ----


def _saved_activation_bytes(forward, module) -> int:
    """Bytes of distinct storages autograd saves during forward(), parameters excluded."""
    torch = pytest.importorskip("torch")
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(storages.values())


def test_torch_gpt_block_saved_bytes_match_korthikanti():
    """An eager GPT-2 block in bf16 saves exactly our bytes, plus two CPU differences: PyTorch's
    CPU dropout keeps its mask in bf16 (2 B, not the fused CUDA kernel's 1 B) and LayerNorm keeps
    its mean and rstd (2 x s b, bf16 here), which Korthikanti et al. leave out."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    s, b, h, a = 256, 2, 512, 8
    d, dt = h // a, torch.bfloat16
    spec = GPT_SMALL.model_copy(update=dict(hidden_size=h, num_attention_heads=a, num_kv_heads=a, head_dim=d,
                                            intermediate_size=4 * h))
    torch.manual_seed(0)
    block = torch.nn.ModuleDict(dict(
        ln1=torch.nn.LayerNorm(h, dtype=dt), qkv=torch.nn.Linear(h, 3 * h, dtype=dt), o=torch.nn.Linear(h, h, dtype=dt),
        ln2=torch.nn.LayerNorm(h, dtype=dt), fc1=torch.nn.Linear(h, 4 * h, dtype=dt),
        fc2=torch.nn.Linear(4 * h, h, dtype=dt)))
    x = torch.randn(s, b, h, dtype=dt, requires_grad=True)

    def forward():
        q, k, v = block["qkv"](block["ln1"](x)).view(s, b, 3, a, d).permute(2, 1, 3, 0, 4)
        probs = F.dropout(torch.softmax(q @ k.transpose(-1, -2) * d**-0.5, -1), 0.1, True)
        x1 = x + F.dropout(block["o"]((probs @ v).permute(2, 0, 1, 3).reshape(s, b, h)), 0.1, True)
        return x1 + F.dropout(block["fc2"](F.gelu(block["fc1"](block["ln2"](x1)))), 0.1, True)

    ours = layer_total(spec, seq=s, mbs=b, recompute="none")
    mask_elements = 2 * s * b * h + a * s * s * b       # two residual masks + the attention-prob mask
    norm_stats = 2 * 2 * s * b * 2
    assert _saved_activation_bytes(forward, block) == ours + mask_elements + norm_stats


def test_torch_llama_block_saved_bytes_match_derivation():
    """A Llama block with fused-style RMSNorm and SwiGLU (as Megatron/TE's fused kernels: each saves
    only its input, + the norm's fp32 rstd) and PyTorch's flash SDPA with GQA saves exactly our bytes
    plus the rstd (4 B per token per norm)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    s, b, h, a, g, f = 256, 2, 512, 8, 2, 1024
    d, dt = h // a, torch.bfloat16
    spec = load_model("llama3-8b").model_copy(update=dict(hidden_size=h, num_attention_heads=a, num_kv_heads=g,
                                                          head_dim=d, intermediate_size=f))

    class RMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
            ctx.save_for_backward(x, weight, rstd)
            return (x.float() * rstd).to(x.dtype) * weight

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError   # only the forward's saved tensors are measured

    class SwiGLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):
            ctx.save_for_backward(y)
            gate, up = y.chunk(2, -1)
            return F.silu(gate) * up

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError

    torch.manual_seed(0)
    block = torch.nn.ModuleDict(dict(
        wq=torch.nn.Linear(h, a * d, bias=False, dtype=dt), wkv=torch.nn.Linear(h, 2 * g * d, bias=False, dtype=dt),
        wo=torch.nn.Linear(a * d, h, bias=False, dtype=dt), w13=torch.nn.Linear(h, 2 * f, bias=False, dtype=dt),
        w2=torch.nn.Linear(f, h, bias=False, dtype=dt)))
    norm1, norm2 = (torch.nn.Parameter(torch.ones(h, dtype=dt)) for _ in range(2))
    block.register_parameter("norm1", norm1)
    block.register_parameter("norm2", norm2)
    x = torch.randn(b, s, h, dtype=dt, requires_grad=True)

    def forward():
        y = RMSNorm.apply(x, norm1)
        q = block["wq"](y).view(b, s, a, d).transpose(1, 2)
        k, v = block["wkv"](y).view(b, s, 2, g, d).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x1 = x + block["wo"](o.transpose(1, 2).reshape(b, s, h))
        return x1 + block["w2"](SwiGLU.apply(block["w13"](RMSNorm.apply(x1, norm2))))

    ours = layer_total(spec, seq=s, mbs=b, recompute="none")
    rstd = 2 * 4 * s * b
    assert _saved_activation_bytes(forward, block) == ours + rstd


def test_named_recompute_modules_drop_their_tensors():
    """Megatron's --recompute-modules: layernorm and mla_up_proj drop the norm outputs and Q, K, V
    but keep the latents; the default selective set (core_attn) keeps them all."""
    model = load_model("deepseek-v2-lite")
    default = resolve_config(model, gpus=8, seq=4096, recompute="selective")
    named = resolve_config(model, gpus=8, seq=4096, recompute="selective", recompute_modules="layernorm,mla_up_proj")
    kept = {name: activation_bytes_per_layer(model, cfg, 1) for name, cfg in (("default", default), ("named", named))}
    for key in ("attention/qkv", "attention/latent_norm_out", "attention/qkv_input", "moe/input"):
        assert key in kept["default"] and key not in kept["named"], key
    assert kept["named"]["attention/latents"] == kept["default"]["attention/latents"]
    assert "attention/core" not in kept["default"]


def test_zero2_reduce_scatters_per_chunk_group_with_interleaving():
    """ZeRO-2 reduce-scatters a chunk's gradients once per group of pp backward micro-batches under
    the interleaved schedule (a chunk stays unsharded meanwhile), else after every micro-batch."""
    from trainplan.tools.config.codes import SCHEDULE_CODES
    from trainplan.tools.core.enums import Schedule
    from trainplan.tools.perf.data_parallel import zero2_reduce_scatters
    inter, one = SCHEDULE_CODES[Schedule.interleaved], SCHEDULE_CODES[Schedule.one_f_one_b]
    assert list(zero2_reduce_scatters(np.array([inter, inter, one]), np.array([16, 32, 32]), 16, np.array([8, 8, 1]))) \
        == [1, 2, 32]
    model = load_model("llama3-70b")   # 80 layers: pp 4, vpp 2 -> chunks of 10 layers
    layer = count_params(model).layers[0].non_expert / 8
    kw = dict(gpus=64, tp=8, pp=4, seq=4096, gbs=64)
    inter_cfg = resolve_config(model, vpp=2, zero=2, **kw)
    plain_cfg = resolve_config(model, zero=2, **kw)
    bucket = {name: memory_breakdown(model, c, H100).breakdown["gradients/zero2_bucket"] * GIB
              for name, c in (("interleaved", inter_cfg), ("1f1b", plain_cfg))}
    assert bucket["1f1b"] == pytest.approx(4 * layer, rel=1e-3)            # fp32, one layer (norms replicated)
    assert bucket["interleaved"] == pytest.approx(10 * bucket["1f1b"], rel=1e-12)   # one 10-layer chunk


def test_pipeline_outputs_are_kept_only_without_deallocation():
    """Megatron's deallocate_pipeline_outputs (on in training): a stage keeps only the autograd node of
    what it sent. Off: stage i of 1F1B keeps p - i outputs of 2sbh/t; the last stage sends nothing."""
    model = load_model("llama3-8b")
    s, t, p = 4096, 2, 4
    kw = dict(gpus=16, tp=t, pp=p, seq=s, gbs=64)
    on = memory_breakdown(model, resolve_config(model, **kw), H100)
    off = memory_breakdown(model, resolve_config(model, deallocate_pipeline_outputs=False, **kw), H100)
    assert "activations/pipeline_outputs" not in on.breakdown
    assert off.breakdown["activations/pipeline_outputs"] * GIB == pytest.approx(p * 2 * s * model.hidden_size / t)
    added = [b["activations"] - a["activations"] for a, b in zip(on.per_stage, off.per_stage)]
    assert added[-1] == pytest.approx(0.0, abs=1e-12) and added[0] > added[1] > added[2] > 0


def _megatron_interleaved_peak(p, v, m, i, weights):
    """Simulate Megatron's interleaved order on rank i (groups of p micro-batches per chunk; 2(p-i-1)
    + (v-1)p warm-up forwards, then one forward and one backward) and return the peak held weight."""
    held, f, b, total = np.zeros(v), 0, 0, m * v
    best = 0.0
    for _ in range(min(2 * (p - i - 1) + (v - 1) * p, total)):
        held[(f % (p * v)) // p] += 1
        f += 1
    while f < total:
        held[(f % (p * v)) // p] += 1
        f += 1
        best = max(best, held @ weights)
        held[v - 1 - (b % (p * v)) // p] -= 1
        b += 1
    return max(best, held @ weights)


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (4, 3, 12), (8, 4, 16), (16, 8, 32), (16, 8, 16)])
def test_chunk_inflight_matches_megatrons_interleaved_order(p, v, m):
    from trainplan.tools.perf.activations import chunk_inflight
    for i in range(p):
        per_chunk = chunk_inflight(p, m, v, i, np.arange(v))
        assert per_chunk.sum() == pytest.approx(v * inflight_microbatches("interleaved", p, m, v)[i])
        assert per_chunk.sum() == _megatron_interleaved_peak(p, v, m, i, np.ones(v))   # uniform chunks: exact
    empty_first = np.array([0.0] + [1.0] * (v - 1))   # Llama 3 405B's rank 0: the first chunk is the embedding
    assert float(empty_first @ chunk_inflight(p, m, v, 0, np.arange(v))) == _megatron_interleaved_peak(p, v, m, 0,
                                                                                                    empty_first)
    # The last rank's last chunk is the head: the closed form (the warm-up's composition) misses at most
    # the one chunk a steady-state forward adds before the next backward frees one (activations.chunk_inflight).
    empty_last = np.array([1.0] * (v - 1) + [0.0])
    closed = float(empty_last @ chunk_inflight(p, m, v, p - 1, np.arange(v)))
    assert 0 <= _megatron_interleaved_peak(p, v, m, p - 1, empty_last) - closed <= 1


def test_the_fit_hint_names_the_fused_swiglu_only_where_it_applies():
    """save_mlp_act_output=false shrinks a dense MLP's activations: the hint offers it for Llama 3 405B
    at Meta's layout (which fits with it), not for an all-MoE model that refuses the knob."""
    from trainplan.tools.perf.estimate import estimate

    meta = dict(model="llama3-405b", gpu="h100", gpus=8192, tp=8, pp=16, vpp=8, gbs=2048, seq=8192, zero=2,
                recompute="none")
    assert "save_mlp_act_output=false" in estimate(**meta).reason
    assert estimate(**meta, save_mlp_act_output=False).fits
    moe = estimate(model="qwen3-30b-a3b", gpu="h100", gpus=8, ep=8, seq=32768, gbs=64)
    assert not moe.fits and "save_mlp_act_output" not in moe.reason and "recompute" in moe.reason
