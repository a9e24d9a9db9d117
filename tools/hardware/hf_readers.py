"""The Hugging Face config readers, one per model_type: each returns the ModelSpec keyword arguments.

Each reader mirrors the parameter layout of transformers' ``modeling_<type>.py`` (which Linear
layers carry biases, how many norms a block has, which layers are MoE, what is tied), so that
counting.py reproduces ``sum(p.numel() for p in model.parameters())`` of the HF class exactly.
Buffers (rotary tables, DeepSeek-V3's ``e_score_correction_bias``) are not parameters and are not
counted. tools/hardware/hf.py picks the reader by model_type and checks what it returns.
"""

from __future__ import annotations

from collections.abc import Callable

from trainplan.tools.hardware.hf_fields import ConfigFields


def _decoder_core(c: ConfigFields) -> dict:
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


def _llama(c: ConfigFields) -> dict:
    """LlamaForCausalLM (also granite, phi3): q/k/v/o bias = attention_bias, gate/up/down bias = mlp_bias."""
    bias = c.flag("attention_bias", False)
    return dict(
        _decoder_core(c),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=c.flag("mlp_bias", False),
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _mistral(c: ConfigFields) -> dict:
    """MistralForCausalLM: llama without biases."""
    return dict(_decoder_core(c), tie_word_embeddings=c.flag("tie_word_embeddings", False))


def _mixtral(c: ConfigFields) -> dict:
    """MixtralForCausalLM: every layer is MoE; experts are intermediate_size wide; router Linear(h, E), no bias."""
    spec = _mistral(c)
    spec.update(
        num_experts=c.size("num_local_experts"),
        experts_per_token=c.size("num_experts_per_tok"),
        moe_intermediate_size=spec["intermediate_size"],
        moe_layers=tuple(range(spec["num_layers"])),
    )
    return spec


def _qwen2(c: ConfigFields) -> dict:
    """Qwen2ForCausalLM: q/k/v carry biases, o_proj does not."""
    return dict(
        _decoder_core(c), qkv_bias=True, o_bias=False, tie_word_embeddings=c.flag("tie_word_embeddings", False)
    )


def _qwen(c: ConfigFields) -> dict:
    """QWenLMHeadModel (Qwen-1, QwenLM/Qwen modeling_qwen.py): one c_attn Linear(h, 3 h) with bias makes q, k and v
    (fused_qkv), c_proj without bias (no_bias); the MLP's w1 and w2 are Linear(h, intermediate_size / 2) and its
    c_proj Linear(intermediate_size / 2, h), none with a bias; RMSNorm; MHA (kv_channels per head)."""
    core = _decoder_core(c)   # no num_key_value_heads: MHA; no hidden_act: SiLU
    return dict(
        core,
        head_dim=c.size("kv_channels", default=core["hidden_size"] // core["num_attention_heads"]),
        intermediate_size=core["intermediate_size"] // 2,
        max_seq_len=c.max_seq_len("seq_length", "max_position_embeddings", default=2048),
        qkv_bias=True,
        fused_qkv=True,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _sparse_step_layers(c: ConfigFields, num_layers: int) -> tuple[int, ...]:
    """Qwen MoE rule: layer i is MoE when i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    step = c.size("decoder_sparse_step", default=1)
    dense_only = set(c.indices("mlp_only_layers"))
    return tuple(i for i in range(num_layers) if i not in dense_only and (i + 1) % step == 0)


def _qwen2_moe(c: ConfigFields) -> dict:
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


def _qwen3(c: ConfigFields) -> dict:
    """Qwen3ForCausalLM: q/k/v/o bias = attention_bias; RMSNorm(head_dim) on q and k."""
    bias = c.flag("attention_bias", False)
    return dict(
        _decoder_core(c),
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
    )


def _qwen3_moe(c: ConfigFields) -> dict:
    """Qwen3MoeForCausalLM: Qwen3 attention, routed experts only (no shared expert)."""
    spec = _qwen3(c)
    spec.update(
        num_experts=c.size("num_experts"),
        experts_per_token=c.size("num_experts_per_tok"),
        moe_intermediate_size=c.size("moe_intermediate_size"),
        moe_layers=_sparse_step_layers(c, spec["num_layers"]),
    )
    return spec


def _deepseek(c: ConfigFields) -> dict:
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


def _gemma(c: ConfigFields) -> dict:
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


def _gemma2(c: ConfigFields) -> dict:
    """Gemma2ForCausalLM: four RMSNorms per block (pre/post attention, pre/post feed-forward)."""
    return dict(_gemma(c), norms_per_layer=4)


def _gemma3_text(c: ConfigFields) -> dict:
    """Gemma3ForCausalLM (text): Gemma 2 block plus RMSNorm(head_dim) on q and k."""
    return dict(_gemma2(c), qk_norm=True)


def _nemotron(c: ConfigFields) -> dict:
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


def _gpt_block(c: ConfigFields, h: int, a: int, num_layers: int, bias: bool = True) -> dict:
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


def _gpt2(c: ConfigFields) -> dict:
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


def _gpt_neox(c: ConfigFields) -> dict:
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


def _opt(c: ConfigFields) -> dict:
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


def _bloom(c: ConfigFields) -> dict:
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


def _falcon(c: ConfigFields) -> dict:
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


READERS: dict[str, Callable[[ConfigFields], dict]] = {
    "llama": _llama,
    "granite": _llama,
    "phi3": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen": _qwen,
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
