"""What each pipeline rank holds, as the memory core (tools/perf/memory.py) reads it: its layers (interleaved
chunks and DualPipe's pairs included) and the model's parameters split by how TP and EP divide them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from trainplan.tools.config.stages import model_layers_per_stage
from trainplan.tools.hardware.counting import LayerParams, count_params, layer_params, norm_params
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.perf import finetune


def rank_layouts(spec: ModelSpec, pp: int, vpp: int, dualpipe: bool) -> list[tuple[list[int], bool, bool]]:
    """(layer indices, holds the first stage, holds the last stage) for each pipeline rank."""
    if dualpipe and pp > 1:
        counts = model_layers_per_stage(spec, pp)
        starts = np.concatenate([[0], np.cumsum(counts)])
        stage = [list(range(starts[i], starts[i + 1])) for i in range(pp)]
        return [(stage[i] + stage[pp - 1 - i], i in (0, pp - 1), i in (0, pp - 1)) for i in range(pp)]
    counts = model_layers_per_stage(spec, pp * vpp)
    starts = np.concatenate([[0], np.cumsum(counts)])
    ranks = []
    for i in range(pp):
        layers = [layer for k in range(i, pp * vpp, pp) for layer in range(starts[k], starts[k + 1])]
        ranks.append((layers, i == 0, i == pp - 1))
    return ranks


PARAM_KEYS = ("shard", "repl", "kv", "expert", "norm_router")
LORA_KEYS = tuple(f"lora_{code}_{kind}" for code in finetune.TARGET_CODES.values() for kind in ("ne", "ex"))
"""adapter parameters per unit of rank (finetune.adapter_coefficients), per target code (finetune.TARGET_CODES)"""


def layer_param_parts(model: ModelSpec, lp: LayerParams) -> dict[str, float]:
    """Split one block's parameters by how TP divides them (unsharded counts).

    shard: divided by t; repl: replicated on every TP rank; kv: parameters per key/value head
    (kept as max(g, t)/t heads per rank); expert: routed experts (divided by ep * etp);
    norm_router: the non-GEMM part (no fp8 copy).
    """
    h = model.hidden_size
    repl = lp.norms + lp.router
    repl += h if model.o_bias else 0                                  # row-parallel o bias
    repl += h if (model.mlp_bias and lp.dense_mlp) else 0             # row-parallel down bias
    repl += h if (model.shared_expert_gate and lp.shared_experts) else 0
    kv = 0
    if model.attention_type == "mla":
        bias = 1 if model.qkv_bias else 0
        kv_down = model.kv_lora_rank + model.qk_rope_head_dim
        repl += (h + bias) * kv_down + norm_params(model, model.kv_lora_rank)
        if model.q_lora_rank:
            repl += (h + bias) * model.q_lora_rank + norm_params(model, model.q_lora_rank)
    else:
        repl += 2 * norm_params(model, model.head_dim) if model.qk_norm else 0
        kv = 2 * model.head_dim * (h + (1 if model.qkv_bias else 0))
    shard = lp.non_expert - repl - kv * (model.num_kv_heads if model.attention_type == "mha" else 0)
    return {"shard": shard, "repl": repl, "kv": kv, "expert": lp.routed_experts,
            "norm_router": lp.norms + lp.router}


def mtp_param_parts(model: ModelSpec) -> dict[str, float]:
    """All MTP modules: a block of the last layer's type + eh_proj (2h x h, column-parallel) + 3 norms."""
    n, h = model.num_mtp_layers, model.hidden_size
    parts = layer_param_parts(model, layer_params(model, model.num_layers))
    parts = {k: n * v for k, v in parts.items()}
    parts["shard"] += n * 2 * h * h
    parts["repl"] += n * 3 * norm_params(model, h)
    parts["norm_router"] += n * 3 * norm_params(model, h)
    return parts


@dataclass(frozen=True, eq=False)
class ModelParts:
    """What the memory core needs from a model, computed once (compared and hashed by identity: its
    lists make it unhashable by value, and rank_data's cache keys on it)."""

    spec: ModelSpec
    layer_parts: list[dict[str, float]]
    is_moe: list[bool]
    mtp_parts: dict[str, float]
    embed_vocab: float
    """V x e: the vocab-parallel rows (also the size of a tied or MTP embedding copy)"""
    embed_repl: float
    """learned positions, embedding norm and extra parameters (OPT project_in/out): replicated"""
    head: float
    final_norm: float


@lru_cache(maxsize=128)
def model_parts(model: ModelSpec) -> ModelParts:
    """The model's parameter parts, computed once per model (ModelSpec is frozen; the parts are only read)."""
    counts = count_params(model)
    embed_vocab = model.vocab_size * (model.embedding_dim or model.hidden_size)
    return ModelParts(
        spec=model,
        layer_parts=[layer_param_parts(model, lp) | finetune.adapter_coefficients(model, lp.routed_experts > 0)
                     for lp in counts.layers],
        is_moe=[lp.routed_experts > 0 for lp in counts.layers],
        mtp_parts=mtp_param_parts(model) if model.num_mtp_layers else dict.fromkeys(PARAM_KEYS, 0.0),
        embed_vocab=embed_vocab,
        embed_repl=counts.embedding - embed_vocab + counts.extra,
        head=counts.lm_head,
        final_norm=counts.final_norm,
    )


def rank_data(m: ModelParts, pp: int, vpp: int, dualpipe: bool) -> dict[str, np.ndarray]:
    """Per-rank sums (shape (1, pp)): parameter parts, dense/MoE layer counts, first/last flags,
    and the largest dense and MoE layer (for ZeRO transients and the recompute working set).
    A fresh dict of read-only arrays, computed once per (parts, pp, vpp, dualpipe): a plan asks for the same
    few pipeline splits thousands of times (memory_breakdown per exact layout)."""
    return dict(_rank_data(m, pp, vpp, dualpipe))


@lru_cache(maxsize=1024)
def _rank_data(m: ModelParts, pp: int, vpp: int, dualpipe: bool) -> dict[str, np.ndarray]:
    rows = []
    virtual = model_layers_per_stage(m.spec, pp * vpp)   # layers of each interleaved model chunk
    chunk_layers = [max(virtual[i::pp]) for i in range(pp)]
    for layers, first, last in rank_layouts(m.spec, pp, vpp, dualpipe):
        row = {k: sum(m.layer_parts[i][k] for i in layers) for k in (*PARAM_KEYS, *LORA_KEYS)}
        for kind, moe in (("dense", False), ("moe", True)):
            members = [i for i in layers if m.is_moe[i] == moe]
            row[f"n_{kind}"] = len(members)
            for k in PARAM_KEYS:
                row[f"{kind}_{k}"] = max((m.layer_parts[i][k] for i in members), default=0)
        row.update(first=first, last=last, num_layers=len(layers), chunk_layers=chunk_layers[len(rows)])
        rows.append(row)
    data = {k: np.array([[row[k] for row in rows]], dtype=float) for k in rows[0]}
    data["stage"] = np.arange(pp, dtype=float)[None, :]
    # Layers of each kind in each model chunk c of rank i (virtual stage i + c pp), shape (1, pp, vpp).
    starts = np.concatenate([[0], np.cumsum(virtual)])
    for kind, moe in (("dense", False), ("moe", True)):
        data[f"chunk_{kind}"] = np.array([[[sum(1 for j in range(starts[i + c * pp], starts[i + c * pp + 1])
                                                 if m.is_moe[j] == moe) for c in range(vpp)] for i in range(pp)]],
                                         dtype=float)
    for array in data.values():
        array.setflags(write=False)   # shared by every caller of the same split
    return data


def per_rank_params(m: ModelParts, parts, t, ep, et):
    """(non-expert, expert) parameters on one GPU of a block sum ``parts`` after TP and EP."""
    g = m.spec.num_kv_heads
    non_expert = parts["shard"] / t + parts["repl"] + parts["kv"] * np.maximum(g, t) / t
    return non_expert, parts["expert"] / (ep * et)
