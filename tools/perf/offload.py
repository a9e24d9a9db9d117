"""Activation offloading: tensors saved for the backward that wait in host memory instead of HBM.

Megatron-Core's fine-grained activation offloading (`--fine-grained-activation-offloading
--offload-modules ...`; docs/source/api-guide/fine_grained_activation_offloading.md and
megatron/core/pipeline_parallel/fine_grained_activation_offload.py): after a module's forward, the
tensors it saved for its backward are copied to host memory on a side stream; in the backward they
are reloaded one module ahead of use. The layout knob `offload_modules` names the modules.

Memory (memory.py): an offloaded tensor group is not held for the in-flight micro-batches; two
layers' worth stays on the GPU, the layer whose tensors are being copied out and the one being
reloaded (activations/offload_staging).
Time (step.py): the copies cross PCIe (ClusterSpec.host_link_gb_s) on copy engines beside the compute. The
device-to-host copies of one micro-batch and the host-to-device reloads of another use the two
directions of the full-duplex link at once, so each micro-batch's bytes, one way, run beside its
forward and backward; what the compute cannot hide is exposed (overlap.overlapped_s, which also
charges the hidden part's contention), reported as comm/offload.

Modules and the tensor groups of activations._layer_tensors they move, with the share of a group
each takes (the two norms share norm/inputs):
  attn_norm    the input_layernorm input: 1/norms_per_layer of norm/inputs
  qkv_linear   the QKV (or MLA down-projection) input: attention/qkv_input
  core_attn    what the attention kernel saves: Q, K, V and its softmax statistics
  attn_proj    the output projection input: attention/context
  mlp_norm     the pre_mlp_layernorm input: the rest of norm/inputs
  expert_fc1   the experts' fc1 input, the dispatched tokens: moe/dispatched
  moe_act      the experts' activation input: moe/expert_act_input
"""

from __future__ import annotations

import numpy as np

from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import OffloadModule
from trainplan.tools.hardware.specs import ModelSpec

OFFLOAD_BITS = {module: 1 << i for i, module in enumerate(OffloadModule)}
"""Bit of each module in the integer masks the vectorised memory path carries."""

MOVES: dict[OffloadModule, tuple[str, ...]] = {
    OffloadModule.attn_norm: ("norm/inputs",),
    OffloadModule.qkv_linear: ("attention/qkv_input",),
    OffloadModule.core_attn: ("attention/qkv", "attention/core"),
    OffloadModule.attn_proj: ("attention/context",),
    OffloadModule.mlp_norm: ("norm/inputs",),
    OffloadModule.expert_fc1: ("moe/dispatched",),
    OffloadModule.moe_act: ("moe/expert_act_input",),
}
"""Tensor groups (activations._layer_tensors keys) each module moves to host memory."""

_MOVED = frozenset(key for keys in MOVES.values() for key in keys)
"""Every tensor group some module moves (share is 0 for the others)."""

STAGED_LAYERS = 2
"""Layers whose offloaded tensors are on the GPU at a time: one being copied out, one reloaded."""


def config_mask(cfg: ParallelConfig) -> int:
    return sum(OFFLOAD_BITS[OffloadModule(m)] for m in set(cfg.offload_modules or ()))


def share(model: ModelSpec, key: str, mask) -> np.ndarray:
    """The share of tensor group ``key`` that the modules in ``mask`` (an integer array) move."""
    mask = np.asarray(mask, dtype=np.int64)
    total = np.zeros(mask.shape)
    if key not in _MOVED or not mask.any():   # nothing moves it (no module offloaded, or none that holds it)
        return total
    for module, keys in MOVES.items():
        if key not in keys:
            continue
        part = 1.0
        if key == "norm/inputs":   # one norm's input each; a parallel block has only the first
            first = module is OffloadModule.attn_norm
            part = 1.0 / model.norms_per_layer if (first or model.norms_per_layer > 1) else 0.0
        total = total + np.where((mask & OFFLOAD_BITS[module]) > 0, part, 0.0)
    return np.minimum(total, 1.0)


def offloaded_bytes(model: ModelSpec, stored: dict[str, np.ndarray], mask) -> np.ndarray:
    """Bytes of one block's kept tensors ``stored`` that go to host memory per micro-batch."""
    return sum(v * share(model, key, mask) for key, v in stored.items())
