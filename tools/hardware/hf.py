"""Hugging Face config.json -> ModelSpec, one reader per model_type.

Each reader mirrors the parameter layout of transformers' ``modeling_<type>.py`` (which Linear
layers carry biases, how many norms a block has, which layers are MoE, what is tied), so that
counting.py reproduces ``sum(p.numel() for p in model.parameters())`` of the HF class exactly.
Buffers (rotary tables, DeepSeek-V3's ``e_score_correction_bias``) are not parameters and are not
counted.

A config with no ``model_type`` is read as llama-style. Every problem raises InputError with one
line that names the model and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.specs import ModelSpec

LLAMA_STYLE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")

# The documented attribute aliases of each config class (``PretrainedConfig.attribute_map`` in
# transformers 5.24: alias -> stored name). A config saved by one transformers version may use either
# spelling (v5's Qwen3MoeConfig writes ``num_local_experts`` where v4 wrote ``num_experts``), so both
# are accepted.
ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
    "gpt2": {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
             "num_hidden_layers": "n_layer"},
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
}


def _with_aliases(config: dict, model_type: str) -> dict:
    """The config with every documented alias filled in from its other spelling (never overwriting)."""
    filled = dict(config)
    for alias, stored in ATTRIBUTE_MAPS.get(model_type, {}).items():
        if filled.get(stored) is None and filled.get(alias) is not None:
            filled[stored] = filled[alias]
        if filled.get(alias) is None and filled.get(stored) is not None:
            filled[alias] = filled[stored]
    return filled


MAX_LAYERS = 256
"""The most transformer blocks a config may have: twice the deepest published decoder (Megatron's 1T
model, 128 layers). Calculators loop over layers and the search's interleaved schedules over layers per
stage, so this bounds one estimate to about a second and one search to tens of seconds (a 256-layer MoE
on 1,024 GPUs: 19 s); 10^5 layers took 9 s per estimate."""
MAX_DIMENSION = 2**24
"""The largest width, head count, vocabulary or rank a config may give (16.8M: over 100x any model's)."""
MAX_EXPERTS = 2**14
"""The most routed experts per MoE layer (the largest published: 384)."""
MAX_POSITIONS = 2**26
"""The longest context a config may give (67M tokens: contract.MAX_SEQUENCES_OR_TOKENS)."""
_FIELD_LIMITS = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_nextn_predict_layers", "first_k_dense_replace",
                     "decoder_sparse_step", "moe_layer_freq", "num_mtp_layers"), (MAX_LAYERS, "the most layers")),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
                     "n_shared_experts", "n_group", "topk_group"), (MAX_EXPERTS, "the most experts")),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "seq_length",
                     "rope_scaling.original_max_position_embeddings",
                     "rope_parameters.original_max_position_embeddings"), (MAX_POSITIONS, "the longest context")),
}


def _limit(key: str) -> tuple[int, str]:
    return _FIELD_LIMITS.get(key, (MAX_DIMENSION, "the largest width, head count or vocabulary"))


def shown(value: Any) -> str:
    """A config value in an error line without echoing its content: a short number as written, else its type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and len(repr(value)) <= 24:
        return repr(value)
    return {str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(type(value), "a number")


def _is_whole(value: Any) -> bool:
    """A JSON number that is a finite whole number (not a bool, NaN, Infinity or 2.5)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and int(value) == value)


class _Config:
    """Typed access to one raw config dict; every error names the model and the field."""

    def __init__(self, config: dict, name: str, model_type: str):
        self.raw = config
        self.name = name
        self.model_type = model_type

    def _find(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        for key in keys:
            if self.raw.get(key) is not None:
                return key, self.raw[key]
        return keys[0], None

    def size(self, *keys: str, default: int | None = None) -> int:
        """A positive integer read from the first present key; required when default is None."""
        key, value = self._find(keys)
        if value is None:
            if default is not None:
                return default
            spelled = " or ".join(f"'{k}'" for k in keys)
            raise InputError(
                f"model config '{self.name}' ({self.model_type}) is missing field {spelled}: add it to the config.json"
            )
        return self._positive(key, value)

    def count(self, *keys: str, default: int = 0) -> int:
        """A non-negative integer (0 allowed, e.g. first_k_dense_replace)."""
        key, value = self._find(keys)
        if value is None:
            return default
        if not _is_whole(value) or value < 0:
            raise InputError(f"model config '{self.name}': field '{key}'={shown(value)} must be a non-negative integer")
        return self._bounded(key, value)

    def _positive(self, key: str, value: Any) -> int:
        if not _is_whole(value) or value <= 0:
            raise InputError(f"model config '{self.name}': field '{key}'={shown(value)} must be a positive integer")
        return self._bounded(key, value)

    def _bounded(self, key: str, value: int | float) -> int:
        limit, what = _limit(key)
        if value > limit:
            written = f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
            raise InputError(f"model config '{self.name}': field '{key}'={written} is over {limit:,}, {what} "
                             "trainplan models: check the config")
        return int(value)

    def optional_size(self, *keys: str) -> int | None:
        """A positive integer, or None when absent or null (e.g. MLA q_lora_rank)."""
        key, value = self._find(keys)
        return None if value is None else self._positive(key, value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"model config '{self.name}': field '{key}'={shown(value)} must be true or false")
        return value

    def text(self, *keys: str, default: str) -> str:
        key, value = self._find(keys)
        if value is None:
            return default
        if not isinstance(value, str) or len(value) > 64:
            raise InputError(f"model config '{self.name}': field '{key}' must be a name (a short string), not "
                             f"{shown(value)}")
        return value

    def indices(self, key: str) -> tuple[int, ...]:
        value = self.raw.get(key) or []
        if (not isinstance(value, list) or len(value) > MAX_LAYERS
                or any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_LAYERS for v in value)):
            raise InputError(f"model config '{self.name}': field '{key}' must be a list of layer indices "
                             f"(0 to {MAX_LAYERS - 1})")
        return tuple(value)

    def head_dim(self, hidden: int, heads: int) -> int:
        """Explicit head_dim when given (Mistral-Nemo, Gemma, Qwen3), else h / a."""
        explicit = self.optional_size("head_dim")
        if explicit is not None:
            return explicit
        if hidden % heads:
            raise InputError(
                f"model config '{self.name}': hidden_size={hidden} is not divisible by num_attention_heads={heads}: "
                "set head_dim"
            )
        return hidden // heads

    def max_seq_len(self, *keys: str, default: int) -> int:
        """Training context: rope_scaling's original length when the config was extended (YaRN), else the max."""
        for scaling_key in ("rope_scaling", "rope_parameters"):
            scaling = self.raw.get(scaling_key)
            if isinstance(scaling, dict) and scaling.get("original_max_position_embeddings"):
                return self._positive(
                    f"{scaling_key}.original_max_position_embeddings", scaling["original_max_position_embeddings"]
                )
        return self.size(*keys, default=default)


# --- readers: each returns the ModelSpec keyword arguments for one model_type -------------------


def _decoder_core(c: _Config) -> dict:
    """Fields every llama-descended config spells the same way."""
    h = c.size("hidden_size")
    a = c.size("num_attention_heads")
    return dict(
        hidden_size=h,
        num_layers=c.size("num_hidden_layers"),
        num_attention_heads=a,
        num_kv_heads=c.size("num_key_value_heads", default=a),
        head_dim=c.head_dim(h, a),
        vocab_size=c.size("vocab_size"),
        intermediate_size=c.size("intermediate_size"),
        max_seq_len=c.max_seq_len("max_position_embeddings", default=2048),
        activation=c.text("hidden_act", "hidden_activation", default="silu"),
    )


def _llama(c: _Config) -> dict:
    """LlamaForCausalLM (also granite, phi3): q/k/v/o bias = attention_bias, gate/up/down bias = mlp_bias."""
    bias = c.flag("attention_bias", False)
    return dict(
        _decoder_core(c),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=c.flag("mlp_bias", False),
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _mistral(c: _Config) -> dict:
    """MistralForCausalLM: llama without biases."""
    return dict(_decoder_core(c), tie_word_embeddings=c.flag("tie_word_embeddings", False))


def _mixtral(c: _Config) -> dict:
    """MixtralForCausalLM: every layer is MoE; experts are intermediate_size wide; router Linear(h, E), no bias."""
    spec = _mistral(c)
    spec.update(
        num_experts=c.size("num_local_experts"),
        experts_per_token=c.size("num_experts_per_tok"),
        moe_intermediate_size=spec["intermediate_size"],
        moe_layers=tuple(range(spec["num_layers"])),
    )
    return spec


def _qwen2(c: _Config) -> dict:
    """Qwen2ForCausalLM: q/k/v carry biases, o_proj does not."""
    return dict(
        _decoder_core(c), qkv_bias=True, o_bias=False, tie_word_embeddings=c.flag("tie_word_embeddings", False)
    )


def _sparse_step_layers(c: _Config, num_layers: int) -> tuple[int, ...]:
    """Qwen MoE rule: layer i is MoE when i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    step = c.size("decoder_sparse_step", default=1)
    dense_only = set(c.indices("mlp_only_layers"))
    return tuple(i for i in range(num_layers) if i not in dense_only and (i + 1) % step == 0)


def _qwen2_moe(c: _Config) -> dict:
    """Qwen2MoeForCausalLM: q/k/v bias (qkv_bias), routed experts + one gated shared expert per MoE layer."""
    spec = _qwen2(c)
    spec.update(
        qkv_bias=c.flag("qkv_bias", True),
        num_experts=c.size("num_experts"),
        experts_per_token=c.size("num_experts_per_tok"),
        moe_intermediate_size=c.size("moe_intermediate_size"),
        num_shared_experts=1,
        shared_expert_intermediate_size=c.size("shared_expert_intermediate_size"),
        shared_expert_gate=True,
        moe_layers=_sparse_step_layers(c, spec["num_layers"]),
    )
    return spec


def _qwen3(c: _Config) -> dict:
    """Qwen3ForCausalLM: q/k/v/o bias = attention_bias; RMSNorm(head_dim) on q and k."""
    bias = c.flag("attention_bias", False)
    return dict(
        _decoder_core(c),
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _qwen3_moe(c: _Config) -> dict:
    """Qwen3MoeForCausalLM: Qwen3 attention, routed experts only (no shared expert)."""
    spec = _qwen3(c)
    spec.update(
        num_experts=c.size("num_experts"),
        experts_per_token=c.size("num_experts_per_tok"),
        moe_intermediate_size=c.size("moe_intermediate_size"),
        moe_layers=_sparse_step_layers(c, spec["num_layers"]),
    )
    return spec


def _deepseek(c: _Config) -> dict:
    """DeepseekV2/V3ForCausalLM: MLA attention and DeepSeekMoE.

    Layer i is MoE when n_routed_experts is set, i >= first_k_dense_replace and
    i % moe_layer_freq == 0 (DeepSeek's own modeling code; every released config has freq 1, which
    is what transformers assumes). Shared experts form one MLP of width moe_intermediate_size x
    n_shared_experts. V3's router bias e_score_correction_bias is a buffer, not a parameter. V3's
    num_nextn_predict_layers MTP modules are reported apart (HF's class drops them).
    """
    spec = _decoder_core(c)
    bias = c.flag("attention_bias", False)
    nope = c.size("qk_nope_head_dim")
    rope = c.size("qk_rope_head_dim")
    spec.update(
        attention_type="mla",
        head_dim=nope + rope,
        qkv_bias=bias,
        o_bias=bias,
        q_lora_rank=c.optional_size("q_lora_rank"),
        kv_lora_rank=c.size("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=c.size("v_head_dim"),
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
        num_mtp_layers=c.count("num_nextn_predict_layers") if c.model_type == "deepseek_v3" else 0,
    )
    routed = c.optional_size("n_routed_experts")
    if routed is not None:
        first_dense = c.count("first_k_dense_replace")
        freq = c.size("moe_layer_freq", default=1)
        shared = c.count("n_shared_experts", default=1 if c.model_type == "deepseek_v3" else 0)
        spec.update(
            num_experts=routed,
            experts_per_token=c.size("num_experts_per_tok"),
            moe_intermediate_size=c.size("moe_intermediate_size"),
            num_shared_experts=shared,
            shared_expert_intermediate_size=c.size("moe_intermediate_size") if shared else 0,
            moe_layers=tuple(i for i in range(spec["num_layers"]) if i >= first_dense and i % freq == 0),
        )
    return spec


def _gemma(c: _Config) -> dict:
    """GemmaForCausalLM: explicit head_dim (256), gated GeGLU without biases, tied head."""
    bias = c.flag("attention_bias", False)
    spec = _decoder_core(c)
    spec.update(
        head_dim=c.size("head_dim", default=256),
        qkv_bias=bias,
        o_bias=bias,
        activation=c.text("hidden_activation", "hidden_act", default="gelu_pytorch_tanh"),
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
    )
    return spec


def _gemma2(c: _Config) -> dict:
    """Gemma2ForCausalLM: four RMSNorms per block (pre/post attention, pre/post feed-forward)."""
    return dict(_gemma(c), norms_per_layer=4)


def _gemma3_text(c: _Config) -> dict:
    """Gemma3ForCausalLM (text): Gemma 2 block plus RMSNorm(head_dim) on q and k."""
    return dict(_gemma2(c), qk_norm=True)


def _nemotron(c: _Config) -> dict:
    """NemotronForCausalLM: plain up/down MLP with relu2; LayerNorm1P (weight and bias) norms."""
    bias = c.flag("attention_bias", False)
    return dict(
        _decoder_core(c),
        activation=c.text("hidden_act", default="relu2"),
        gated_mlp=False,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=c.flag("mlp_bias", False),
        norm_type="layernorm",
        norm_bias=True,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _gpt_block(c: _Config, h: int, a: int, num_layers: int, bias: bool = True) -> dict:
    """Fields shared by the GPT-2-era blocks (GPT-2, OPT, BLOOM): MHA, plain MLP, LayerNorm with bias,
    and biases on every Linear when ``bias``."""
    return dict(
        hidden_size=h,
        num_layers=num_layers,
        num_attention_heads=a,
        num_kv_heads=a,
        head_dim=c.head_dim(h, a),
        vocab_size=c.size("vocab_size"),
        gated_mlp=False,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        norm_type="layernorm",
        norm_bias=True,
    )


def _gpt2(c: _Config) -> dict:
    """GPT2LMHeadModel: learned positions (n_positions), Conv1D layers with biases, LayerNorms, tied head."""
    h = c.size("n_embd", "hidden_size")
    a = c.size("n_head", "num_attention_heads")
    positions = c.size("n_positions", "max_position_embeddings")
    return dict(
        _gpt_block(c, h, a, c.size("n_layer", "num_hidden_layers")),
        max_seq_len=positions,
        intermediate_size=c.size("n_inner", default=4 * h),
        activation=c.text("activation_function", default="gelu_new"),
        learned_position_embeddings=positions,
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
    )


def _gpt_neox(c: _Config) -> dict:
    """GPTNeoXForCausalLM: fused qkv and dense with attention_bias (default on), MLP biases, untied embed_out."""
    bias = c.flag("attention_bias", True)
    core = _decoder_core(c)
    return dict(
        core,
        num_kv_heads=core["num_attention_heads"],  # no GQA in GPT-NeoX
        head_dim=core["hidden_size"] // core["num_attention_heads"],
        activation=c.text("hidden_act", default="gelu"),
        gated_mlp=False,
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=True,
        norm_type="layernorm",
        norm_bias=True,
        parallel_attention_mlp=c.flag("use_parallel_residual", True),
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _opt(c: _Config) -> dict:
    """OPTForCausalLM: learned positions with a 2-row offset, optional project_in/out, tied head.

    The word embedding and the head are word_embed_proj_dim wide; when that differs from h,
    project_in Linear(p, h) and project_out Linear(h, p), both without bias, add 2 h p. The final
    LayerNorm exists only when do_layer_norm_before and not _remove_final_layer_norm.
    """
    h = c.size("hidden_size")
    a = c.size("num_attention_heads")
    positions = c.size("max_position_embeddings", default=2048)
    projection = c.size("word_embed_proj_dim", default=h)
    return dict(
        _gpt_block(c, h, a, c.size("num_hidden_layers"), bias=c.flag("enable_bias", True)),
        max_seq_len=positions,
        intermediate_size=c.size("ffn_dim"),
        activation=c.text("activation_function", default="relu"),
        norm_affine=c.flag("layer_norm_elementwise_affine", True),
        final_norm=c.flag("do_layer_norm_before", True) and not c.flag("_remove_final_layer_norm", False),
        learned_position_embeddings=positions + 2,
        embedding_dim=projection,
        extra_params=2 * h * projection if projection != h else 0,
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
    )


def _bloom(c: _Config) -> dict:
    """BloomForCausalLM: ALiBi (no position table), LayerNorm after the embedding, biases everywhere, 4h MLP."""
    h = c.size("hidden_size", "n_embed")
    a = c.size("n_head", "num_attention_heads")
    return dict(
        _gpt_block(c, h, a, c.size("n_layer", "num_hidden_layers")),
        max_seq_len=c.size("seq_length", default=2048),
        intermediate_size=4 * h,
        activation="gelu",
        embedding_norm=True,
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
    )


def _falcon(c: _Config) -> dict:
    """FalconForCausalLM.

    query_key_value is (2 kv + a) d wide with new_decoder_architecture (GQA), h + 2d with
    multi_query (MQA), else 3h (MHA); every Linear has a bias iff ``bias``. Norms per block: two
    without parallel_attn; with it, ln_attn + ln_mlp when num_ln_in_parallel_attn == 2 (the
    default for the new architecture), else one input_layernorm.
    """
    h = c.size("hidden_size")
    a = c.size("num_attention_heads", "n_head")
    new_arch = c.flag("new_decoder_architecture", False)
    if new_arch:
        kv = c.size("num_kv_heads", "n_head_kv", default=a)
    elif c.flag("multi_query", True):
        kv = 1
    else:
        kv = a
    parallel = c.flag("parallel_attn", True)
    norms_in_parallel = c.size("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    bias = c.flag("bias", False)
    return dict(
        hidden_size=h,
        num_layers=c.size("num_hidden_layers", "n_layer"),
        num_attention_heads=a,
        num_kv_heads=kv,
        head_dim=h // a,
        vocab_size=c.size("vocab_size"),
        max_seq_len=c.size("max_position_embeddings", default=2048),
        intermediate_size=c.size("ffn_hidden_size", default=4 * h),
        gated_mlp=False,
        activation=c.text("activation", default="gelu"),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=bias,
        norm_type="layernorm",
        norm_bias=True,
        norms_per_layer=2 if (not parallel or norms_in_parallel == 2) else 1,
        parallel_attention_mlp=parallel,
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
    )


READERS: dict[str, Callable[[_Config], dict]] = {
    "llama": _llama,
    "granite": _llama,
    "phi3": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "nemotron": _nemotron,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "bloom": _bloom,
    "falcon": _falcon,
}


def _check(spec: dict, c: _Config) -> None:
    """Cross-field checks: head grouping and MoE sizes."""
    a, kv = spec["num_attention_heads"], spec["num_kv_heads"]
    if a % kv:
        raise InputError(
            f"model config '{c.name}': num_key_value_heads={kv} does not divide num_attention_heads={a}"
        )
    if spec.get("num_experts", 0):
        k, e = spec["experts_per_token"], spec["num_experts"]
        if k > e:
            raise InputError(f"model config '{c.name}': num_experts_per_tok={k} exceeds the {e} routed experts")
        bad = [i for i in c.indices("mlp_only_layers") if not 0 <= i < spec["num_layers"]]
        if bad:
            raise InputError(
                f"model config '{c.name}': mlp_only_layers {bad} outside 0..{spec['num_layers'] - 1}"
            )


# HF's own defaults when a config omits the attention-dropout probability (GPT2Config attn_pdrop=0.1).
ATTENTION_DROPOUT_DEFAULTS = {"gpt2": 0.1}


def _attention_dropout(config: dict, model_type: str) -> float:
    """Attention-probability dropout of the config; > 0 means eager attention that keeps the s^2 scores."""
    for key in ("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob"):
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not 0 <= value <= 1:  # NaN fails this too
                raise InputError(f"model config: field '{key}'={shown(value)} must be a probability in [0, 1]")
            return float(value)
    return ATTENTION_DROPOUT_DEFAULTS.get(model_type, 0.0)


NORM_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")
"""Where HF configs keep the norms' epsilon (Llama/Qwen/Mistral, GPT-NeoX/OPT, GPT-2/Falcon/BLOOM, Nemotron)."""


def _positive_number(config: dict, key: str, name: str) -> float | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise InputError(f"model config '{name}': field '{key}' must be a positive finite number")
    return float(value)


def _position_and_norm(config: dict, name: str) -> dict:
    """The fields an engine's launch settings need beside the shapes: RoPE base and scaling, norm epsilon
    (transformers' configs: rope_theta, rope_scaling {rope_type or type, factor}; newer ones nest both in
    rope_parameters)."""
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    scaling = config.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise InputError(f"model config '{name}': field 'rope_scaling' must be an object or null")
    scaling = scaling or (rope if rope.get("rope_type") not in (None, "default") else {})
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind is not None and not isinstance(kind, str):
        raise InputError(f"model config '{name}': field 'rope_scaling.rope_type' must be a string")
    eps = next((_positive_number(config, key, name) for key in NORM_EPS_KEYS if config.get(key) is not None), None)
    return dict(
        rope_theta=_positive_number(config, "rope_theta", name) or _positive_number(rope, "rope_theta", name),
        rope_scaling_type=kind[:40] if kind and kind != "default" else None,
        rope_scaling_factor=_positive_number(scaling, "factor", name) if kind and kind != "default" else None,
        norm_eps=eps,
    )


def spec_from_config(config: dict, name: str) -> ModelSpec:
    """Read an HF config.json (as a dict) into a ModelSpec; ``name`` is reported and used in errors."""
    if not isinstance(config, dict):
        raise InputError(f"model config '{name}' must be a JSON object, not {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError(f"model config '{name}': field 'model_type' must be a name such as \"llama\", not "
                         f"{shown(model_type)}")
    if model_type is None:
        reader, model_type = _llama, "llama"
    elif model_type in READERS:
        reader = READERS[model_type]
    else:
        raise InputError(
            f"unknown model_type '{model_type[:40]}' in model config '{name}': supported: {', '.join(sorted(READERS))}; "
            f"or give a llama-style config (model_type 'llama') with {', '.join(LLAMA_STYLE_FIELDS)}"
        )
    c = _Config(_with_aliases(config, model_type), name, model_type)
    fields = reader(c)
    _check(fields, c)
    fields["attention_dropout"] = _attention_dropout(config, model_type)
    fields.update(_position_and_norm(config, name))
    if fields.get("num_experts") and c.count("n_group", default=1) > 1:
        fields["routing_group_limit"] = c.count("topk_group", default=0)
    try:
        return ModelSpec(name=name, model_type=model_type, **fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InputError(f"model config '{name}': field '{field}' {first['msg'].lower()}") from None
