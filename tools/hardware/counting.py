"""Exact parameter counts and forward FLOPs per token of a ModelSpec.

Parameters follow the Hugging Face model classes (hf.py sets the flags), so ``ParamCounts.total``
equals ``sum(p.numel() for p in model.parameters())`` of ``<Type>ForCausalLM``. Symbols:
h hidden size, a query heads, k kv heads, d head dim, f MLP width, V vocabulary, L layers,
E routed experts, top-k experts per token, s sequence length.

FLOPs count matmuls only, 2 FLOPs per multiply-add: a Linear(in, out) costs 2 in out per token.
Attention scores and values per layer per token cost 2 s a d_qk + 2 s a d_v, i.e. 4 s a d for
standard attention (causal=False, the PaLM/Megatron "full" convention); causal=True halves it, as
flash kernels skip the masked half. Norms, biases, softmax and activations are not counted, as in
Megatron's 72 B s L h^2 (1 + s/(6h) + V/(12 h L)) per iteration (Korthikanti et al. 2022, App. A).
"""

from __future__ import annotations

from functools import lru_cache

from dataclasses import dataclass

from trainplan.tools.hardware.specs import ModelSpec

# --- parameters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer block, by part."""

    index: int
    attention: int
    """all attention weights and biases, incl. MLA down/up projections, their norms and q/k norms"""
    dense_mlp: int
    """the MLP of a dense layer; 0 in an MoE layer"""
    shared_experts: int
    """shared experts (+ the shared-expert gate) of an MoE layer"""
    router: int
    """router weights E x h"""
    routed_experts: int
    """all routed experts of this layer"""
    routed_active: int
    """routed parameters one token uses (experts_per_token experts)"""
    norms: int
    """the block's own norms (input / post-attention / pre- and post-feed-forward)"""

    @property
    def non_expert(self) -> int:
        return self.attention + self.dense_mlp + self.shared_experts + self.router + self.norms

    @property
    def total(self) -> int:
        return self.non_expert + self.routed_experts

    @property
    def active(self) -> int:
        return self.non_expert + self.routed_active


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of the whole model; MTP modules are reported apart and not in total."""

    embedding: int
    """word embedding (+ learned positions, + embedding norm)"""
    layers: tuple[LayerParams, ...]
    final_norm: int
    lm_head: int
    """0 when tied to the embedding"""
    extra: int
    """parameters outside the blocks, e.g. OPT project_in/out"""
    mtp: int
    """multi-token-prediction modules (block + eh_proj + enorm/hnorm + norm; embedding and head shared)"""

    @property
    def total(self) -> int:
        return self.embedding + sum(l.total for l in self.layers) + self.final_norm + self.lm_head + self.extra

    @property
    def active(self) -> int:
        """Parameters one token touches: total minus the routed experts it does not use."""
        return self.embedding + sum(l.active for l in self.layers) + self.final_norm + self.lm_head + self.extra

    @property
    def expert(self) -> int:
        """Routed-expert parameters (sharded by expert parallelism)."""
        return sum(l.routed_experts for l in self.layers)


def norm_params(model: ModelSpec, width: int) -> int:
    """One norm over ``width`` features: RMSNorm w (width); LayerNorm w + b (2 width); none if not affine."""
    if not model.norm_affine:
        return 0
    return width * (2 if model.norm_type == "layernorm" and model.norm_bias else 1)


def mlp_params(model: ModelSpec, width: int, bias: bool) -> int:
    """Gated (gate, up, down): 3 h f (+ 2f + h bias); plain (up, down): 2 h f (+ f + h bias)."""
    h = model.hidden_size
    if model.gated_mlp:
        return 3 * h * width + ((2 * width + h) if bias else 0)
    return 2 * h * width + ((width + h) if bias else 0)


def attention_params(model: ModelSpec) -> int:
    """Attention weights and biases of one block.

    MHA/GQA/MQA: q h a d, k and v h k d each, o a d h; biases a d + 2 k d (q/k/v) and h (o);
    q/k norms 2 d. MLA (DeepSeek-V2/V3): q = q_a h r_q (+bias) + norm r_q + q_b r_q a (d_nope+d_rope),
    or h a (d_nope+d_rope) without q compression; kv_a h (r_kv + d_rope) (+bias) + norm r_kv +
    kv_b r_kv a (d_nope + d_v); o a d_v h (+bias).
    """
    h, a = model.hidden_size, model.num_attention_heads
    if model.attention_type == "mla":
        qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        r_q, r_kv = model.q_lora_rank, model.kv_lora_rank
        if r_q is None:
            q = h * a * qk_dim
        else:
            q = h * r_q + (r_q if model.qkv_bias else 0) + norm_params(model, r_q) + r_q * a * qk_dim
        kv_a = h * (r_kv + model.qk_rope_head_dim) + ((r_kv + model.qk_rope_head_dim) if model.qkv_bias else 0)
        kv = kv_a + norm_params(model, r_kv) + r_kv * a * (model.qk_nope_head_dim + model.v_head_dim)
        o = a * model.v_head_dim * h + (h if model.o_bias else 0)
        return q + kv + o
    d, k = model.head_dim, model.num_kv_heads
    qkv_out = (a + 2 * k) * d
    params = h * qkv_out + (qkv_out if model.qkv_bias else 0) + a * d * h + (h if model.o_bias else 0)
    if model.qk_norm:
        params += 2 * norm_params(model, d)
    return params


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Layer ``index`` is MoE; an MTP block (index >= L) takes the type of the last main layer."""
    if not model.is_moe:
        return False
    if index >= model.num_layers:
        index = model.num_layers - 1
    return index in model.moe_layers


def layer_params(model: ModelSpec, index: int) -> LayerParams:
    """Parameters of block ``index`` (0-based; index >= L gives an MTP block)."""
    h = model.hidden_size
    attention = attention_params(model)
    norms = model.norms_per_layer * norm_params(model, h)
    if not is_moe_layer(model, index):
        dense = mlp_params(model, model.intermediate_size, model.mlp_bias)
        return LayerParams(index, attention, dense, 0, 0, 0, 0, norms)
    # Routed experts are gated MLPs without biases in every supported family.
    one_expert = mlp_params(model, model.moe_intermediate_size, bias=False)
    shared = model.num_shared_experts * mlp_params(model, model.shared_expert_intermediate_size, model.mlp_bias)
    shared += h if model.shared_expert_gate else 0
    return LayerParams(
        index=index,
        attention=attention,
        dense_mlp=0,
        shared_experts=shared,
        router=model.num_experts * h,
        routed_experts=model.num_experts * one_expert,
        routed_active=model.experts_per_token * one_expert,
        norms=norms,
    )


def _embedding_dim(model: ModelSpec) -> int:
    return model.embedding_dim or model.hidden_size


def mtp_module_params(model: ModelSpec) -> int:
    """One DeepSeek-V3 MTP module: block + eh_proj (2h x h) + enorm + hnorm + shared_head.norm."""
    h = model.hidden_size
    return layer_params(model, model.num_layers).total + 2 * h * h + 3 * norm_params(model, h)


@lru_cache(maxsize=128)
def count_params(model: ModelSpec) -> ParamCounts:
    """Exact parameter counts: embedding V e (+ P h positions, + embedding norm), blocks, head e V unless tied."""
    h, e = model.hidden_size, _embedding_dim(model)
    embedding = model.vocab_size * e + model.learned_position_embeddings * h
    if model.embedding_norm:
        embedding += norm_params(model, h)
    return ParamCounts(
        embedding=embedding,
        layers=tuple(layer_params(model, i) for i in range(model.num_layers)),
        final_norm=norm_params(model, h) if model.final_norm else 0,
        lm_head=0 if model.tie_word_embeddings else e * model.vocab_size,
        extra=model.extra_params,
        mtp=model.num_mtp_layers * mtp_module_params(model),
    )


# --- FLOPs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlopCounts:
    """Forward FLOPs per token, by part, summed over all layers (2 FLOPs per multiply-add)."""

    breakdown: dict[str, float]
    """keys: attention/qkv, attention/scores, attention/out, mlp, moe/router, moe/shared,
    moe/experts (top-k only), lm_head, and extra / mtp when the model has them"""
    forward: float
    """sum of the breakdown, FLOPs per token"""

    def training(self) -> float:
        """Model FLOPs per token of forward + backward: 3 x forward (backward = 2 x forward; no recompute)."""
        return 3.0 * self.forward


def layer_flops_per_token(model: ModelSpec, layer_index: int, seq: int, causal: bool = False) -> dict[str, float]:
    """Forward FLOPs per token of block ``layer_index`` (index >= L: an MTP block).

    attention/scores = 2 s a (d_qk + d_v) with causal=False (4 s a d for standard attention, the
    PaLM/Megatron convention); causal=True halves it (flash kernels skip masked blocks).
    """
    h, a = model.hidden_size, model.num_attention_heads
    if model.attention_type == "mla":
        qk_dim, v_dim = model.qk_nope_head_dim + model.qk_rope_head_dim, model.v_head_dim
        r_q, r_kv = model.q_lora_rank, model.kv_lora_rank
        q_macs = h * a * qk_dim if r_q is None else h * r_q + r_q * a * qk_dim
        kv_macs = h * (r_kv + model.qk_rope_head_dim) + r_kv * a * (model.qk_nope_head_dim + v_dim)
        qkv = 2.0 * (q_macs + kv_macs)
    else:
        qk_dim = v_dim = model.head_dim
        qkv = 2.0 * h * (a + 2 * model.num_kv_heads) * model.head_dim
    scores = 2.0 * seq * a * (qk_dim + v_dim) * (0.5 if causal else 1.0)
    flops = {"attention/qkv": qkv, "attention/scores": scores, "attention/out": 2.0 * a * v_dim * h}
    gate_factor = 3 if model.gated_mlp else 2
    if not is_moe_layer(model, layer_index):
        flops["mlp"] = 2.0 * gate_factor * h * model.intermediate_size
        return flops
    flops["moe/router"] = 2.0 * h * model.num_experts
    shared = model.num_shared_experts * gate_factor * h * model.shared_expert_intermediate_size
    flops["moe/shared"] = 2.0 * (shared + (h if model.shared_expert_gate else 0))
    flops["moe/experts"] = 2.0 * model.experts_per_token * gate_factor * h * model.moe_intermediate_size
    return flops


@lru_cache(maxsize=1024)
def flops_per_token(model: ModelSpec, seq: int, causal: bool = False, include_mtp: bool = False) -> FlopCounts:
    """Forward FLOPs per token of the whole model at sequence length ``seq``.

    Sum of layer_flops_per_token over the L blocks, plus lm_head 2 e V (e = embedding width),
    plus 2 x extra_params (OPT project_in/out). MTP modules are left out by default, like their
    parameters; include_mtp=True adds key 'mtp': each module's block, eh_proj (2 x 2h x h) and
    shared-head logits (2 h V), which DeepSeek-V3 also runs every training step.
    The embedding lookup costs no FLOPs. See the module docstring for the causal convention.
    """
    breakdown: dict[str, float] = {}
    for i in range(model.num_layers):
        for key, value in layer_flops_per_token(model, i, seq, causal).items():
            breakdown[key] = breakdown.get(key, 0.0) + value
    breakdown["lm_head"] = 2.0 * _embedding_dim(model) * model.vocab_size
    if model.extra_params:
        breakdown["extra"] = 2.0 * model.extra_params
    if include_mtp and model.num_mtp_layers:
        h = model.hidden_size
        block = sum(layer_flops_per_token(model, model.num_layers, seq, causal).values())
        breakdown["mtp"] = model.num_mtp_layers * (block + 2.0 * 2 * h * h + 2.0 * h * model.vocab_size)
    return FlopCounts(breakdown=breakdown, forward=sum(breakdown.values()))
