"""What would make a layout need less memory: only changes that shrink the dominant part from here.

A hint must reduce the failing quantity from the current layout (issue 13): no "zero=1" at ZeRO-3,
no "recompute=full" when it is already full, no "a smaller mbs" at mbs 1. Each rule below says why
the change shrinks that component (memory.py and activations.py hold the formulas):
- activations: recompute drops tensors (none -> selective -> full; the layernorm module drops the
  norm outputs, which every block keeps); offloading the norm inputs moves them to host memory
  (recompute.py, offload.py; under full recompute only the layer inputs remain, which offloading
  does not move); a fused SwiGLU (save_mlp_act_output=false, activations.py) drops the dense MLP's
  product; tp divides every tensor
  (sequence parallelism included), cp divides the tokens; mbs divides them per micro-batch.
  A larger pp does not help the first stage of 1F1B (p micro-batches of L/p layers), so it is not
  proposed for activations.
- optimizer: ZeRO-1 shards the states over the data-parallel group; a larger dp shards them
  further once they are sharded; bf16 moments store 8 B/param instead of 12; offload moves them off.
- gradients: ZeRO-2 shards them; bf16 gradients halve them.
- weights: ZeRO-3 shards them; tp and pp divide them; bf16 drops the fp8 weight cache.
- other: fewer parallel groups means fewer NCCL communicators.
A LoRA/QLoRA layout gets no tp, pp or cp hint: no engine trainplan exports runs PEFT's adapters model-parallel
(tools/config/engines.py refusals; tests/test_engine_registry.py checks it), so its weights shrink with more GPUs
under ZeRO-3 and its activations with a shorter sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplan.tools.config.resolve import is_lora

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "other")


def memory_fixes(component: str, config: Mapping[str, Any], dense_mlp: bool = False) -> list[str]:
    """Changes to the layout ``config`` (the estimate's config dict) that shrink ``component``.
    dense_mlp: the model has a dense gated MLP, whose product a fused SwiGLU need not keep."""
    recompute, zero, mbs = config.get("recompute"), config.get("zero", 0), config.get("mbs", 1)
    fixes: list[str] = []
    # hybrid sharding (dp_shard set): what ZeRO shards is split over dp_shard*cp ranks only
    wider_shard = "a larger dp_shard (null: shard over all of dp)" if config.get("dp_shard") else None
    if wider_shard and {"optimizer": 1, "gradients": 2, "weights": 3}.get(component, 4) <= zero:
        fixes.append(wider_shard)
    if component == "activations":
        if recompute == "none":
            fixes.append("recompute=selective or full")
        elif recompute == "selective":
            if "layernorm" not in (config.get("recompute_modules") or ()):
                fixes.append("recompute_modules with layernorm")
            fixes.append("recompute=full")
        if (dense_mlp and recompute != "full" and config.get("save_mlp_act_output", True)
                and "mlp" not in (config.get("recompute_modules") or ())):
            fixes.append("save_mlp_act_output=false (a fused activation that recomputes its output in the backward)")
        if recompute != "full" and not config.get("offload_modules"):
            fixes.append("offload_modules=attn_norm,mlp_norm")
        fixes += ["a larger tp", "a larger cp"]
        if mbs > 1:
            fixes.append("a smaller mbs")
    elif component == "optimizer":
        fixes.append("zero=1" if zero == 0 else "a larger dp (more GPUs) to shard the optimizer states further")
        if not config.get("bf16_moments"):
            fixes.append("bf16_moments")
        if not config.get("optimizer_offload"):
            fixes.append("optimizer_offload")
    elif component == "gradients":
        if zero < 2:
            fixes.append("zero=2")
        if not config.get("bf16_grads"):
            fixes.append("bf16_grads")
        fixes.append("a larger tp/pp")
    elif component == "weights":
        if zero < 3:
            fixes.append("zero=3")
        fixes.append("a larger tp/pp")
        if config.get("precision") == "fp8":
            fixes.append("precision=bf16 (no fp8 weight cache)")
    elif component == "other":
        fixes.append("fewer parallel groups")
    if is_lora(config.get("method") or "full"):
        fixes = [fix for fix in fixes if fix not in _MODEL_PARALLEL_FIXES]
        fixes += {"weights": ["more GPUs (ZeRO-3 shards the frozen base over them)"] if zero >= 3 else [],
                  "activations": ["a shorter seq"]}.get(component, [])
    return fixes + ["a GPU with more memory"]


_MODEL_PARALLEL_FIXES = ("a larger tp", "a larger cp", "a larger tp/pp")


def phrase(fixes: list[str]) -> str:
    """'a, b or c'."""
    return fixes[0] if len(fixes) == 1 else f"{', '.join(fixes[:-1])} or {fixes[-1]}"


def largest_component(memory: Mapping[str, float]) -> str:
    return max(COMPONENTS, key=lambda c: memory[c])


def reason(memory: Mapping[str, float], stage: int, available: float, config: Mapping[str, Any],
           dense_mlp: bool = False) -> str:
    """'needs X GiB on stage i, Y GiB available: <largest> Z GiB dominate; try ...'."""
    largest = largest_component(memory)
    return (f"needs {memory['total']:.1f} GiB on stage {stage}, {available:.1f} GiB available: "
            f"{largest} {memory[largest]:.1f} GiB dominate; try {phrase(memory_fixes(largest, config, dense_mlp))}")
