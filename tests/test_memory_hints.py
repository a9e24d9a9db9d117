"""Memory hints propose only changes that shrink the dominant component from the current layout."""

from __future__ import annotations

import pytest

from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import memory_breakdown
from trainplan.tools.perf.memory_hints import memory_fixes

H100 = load_gpu("h100-sxm-80gb")

# Each concrete hint as a change to (gpus, layout keywords); the rest name no single knob.
CHANGES = {
    "recompute=selective or full": lambda g, kw: (g, {**kw, "recompute": "selective"}),
    "recompute=full": lambda g, kw: (g, {**kw, "recompute": "full"}),
    "recompute_modules with layernorm": lambda g, kw: (g, {**kw, "recompute_modules": "core_attn,layernorm"}),
    "offload_modules=attn_norm,mlp_norm": lambda g, kw: (g, {**kw, "offload_modules": "attn_norm,mlp_norm"}),
    "a larger tp": lambda g, kw: (g, {**kw, "tp": 2 * kw.get("tp", 1)}),
    "a larger cp": lambda g, kw: (g, {**kw, "cp": 2 * kw.get("cp", 1)}),
    "a smaller mbs": lambda g, kw: (g, {**kw, "mbs": kw["mbs"] // 2}),
    "zero=1": lambda g, kw: (g, {**kw, "zero": 1}),
    "zero=2": lambda g, kw: (g, {**kw, "zero": 2}),
    "zero=3": lambda g, kw: (g, {**kw, "zero": 3}),
    "a larger dp (more GPUs) to shard the optimizer states further": lambda g, kw: (2 * g, kw),
    "bf16_moments": lambda g, kw: (g, {**kw, "bf16_moments": True}),
    "bf16_grads": lambda g, kw: (g, {**kw, "bf16_grads": True}),
    "optimizer_offload": lambda g, kw: (g, {**kw, "optimizer_offload": True}),
    "a larger tp/pp": lambda g, kw: (g, {**kw, "pp": 2 * kw.get("pp", 1)}),
    "precision=bf16 (no fp8 weight cache)": lambda g, kw: (g, {**kw, "precision": "bf16"}),
}
GENERAL = {"fewer parallel groups", "a GPU with more memory"}

LAYOUTS = [   # (model, gpus, layout): each fails, with a different component dominating
    ("llama3-70b", 8, dict(zero=3, recompute="full", seq=2048)),                      # optimizer at ZeRO-3
    ("llama3-70b", 16, dict(tp=8, zero=0, seq=4096, recompute="full")),              # optimizer at ZeRO-0
    ("llama3-8b", 8, dict(seq=8192, recompute="none", mbs=4)),                       # activations, mbs > 1
    ("llama3-8b", 8, dict(seq=32768, mbs=2)),                                        # activations, selective
    ("llama3-8b", 8, dict(seq=262144, recompute="full", zero=3)),                    # activations at full + ZeRO-3
    ("llama3-70b", 16, dict(pp=2, zero=1, seq=2048, recompute="full", precision="fp8")),   # gradients
    ("llama3-405b", 1024, dict(tp=8, zero=2, seq=2048, recompute="full")),          # weights
]


@pytest.mark.parametrize("name,gpus,kw", LAYOUTS)
def test_every_hint_shrinks_the_dominant_component(name, gpus, kw):
    model = load_model(name)
    before = memory_breakdown(model, resolve_config(model, gpus, **kw), H100)
    assert not before.fits
    largest = max(("weights", "gradients", "optimizer", "activations", "other"), key=lambda c: getattr(before, c))
    config = resolve_config(model, gpus, **kw).model_dump(mode="json")
    fixes = memory_fixes(largest, config)
    assert set(fixes) - GENERAL, fixes
    for fix in fixes:
        if fix in GENERAL:
            continue
        g, changed = CHANGES[fix](gpus, kw)
        after = memory_breakdown(model, resolve_config(model, g, **changed), H100)
        assert getattr(after, largest) < getattr(before, largest), (fix, largest)
    assert f"{largest} {getattr(before, largest):.1f} GiB dominate; try {fixes[0]}" in before.reason


def test_hints_never_repeat_the_current_setting():
    """Issue 13: no 'zero=1 or more' at ZeRO-3, no full recompute or higher ZeRO when already set,
    no smaller batch at mbs 1."""
    config = {"zero": 3, "recompute": "full", "mbs": 1, "bf16_grads": True, "bf16_moments": True,
              "optimizer_offload": True, "precision": "bf16"}
    every = [fix for c in ("weights", "gradients", "optimizer", "activations", "other") for fix in memory_fixes(c, config)]
    for banned in ("zero=1", "zero=2", "zero=3", "recompute=full", "a smaller mbs", "bf16_grads", "bf16_moments",
                   "optimizer_offload", "precision=bf16 (no fp8 weight cache)"):
        assert banned not in every
    assert not any("batch" in fix for fix in every)
