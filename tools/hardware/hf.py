"""Hugging Face config.json -> ModelSpec: the reader of the config's model_type (tools/hardware/hf_readers.py),
then the checks across fields and the fields every architecture spells alike (attention dropout, RoPE, norm
epsilon).

A config with no ``model_type`` is read as llama-style. Every problem raises InputError with one
line that names the model and the field.
"""

from __future__ import annotations

from pydantic import ValidationError

from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.hf_fields import ConfigFields, shown
from trainplan.tools.hardware.hf_readers import READERS
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


def _check(spec: dict, c: ConfigFields) -> None:
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
        reader, model_type = READERS["llama"], "llama"
    elif model_type in READERS:
        reader = READERS[model_type]
    else:
        raise InputError(
            f"unknown model_type '{model_type[:40]}' in model config '{name}': supported: {', '.join(sorted(READERS))}; "
            f"or give a llama-style config (model_type 'llama') with {', '.join(LLAMA_STYLE_FIELDS)}"
        )
    c = ConfigFields(_with_aliases(config, model_type), name, model_type)
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
