"""Typed, bounded access to one raw Hugging Face config.json (tools/hardware/hf.py reads it into a ModelSpec).

ConfigFields reads sizes, counts, flags, names and layer indices from the config dict; every problem raises
InputError with one line that names the model and the field, and every size is bounded (MAX_LAYERS,
MAX_DIMENSION, MAX_EXPERTS, MAX_POSITIONS) so that no config can make one estimate run for long.
"""

from __future__ import annotations

import math
from typing import Any

from trainplan.tools.core.errors import InputError

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


class ConfigFields:
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
