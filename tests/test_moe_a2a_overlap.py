"""Megatron-Core's combined 1F1B (moe_a2a_overlap): the expert all-to-all of one micro-batch hides
under the compute of another, and the layouts Megatron-Core refuses are refused."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.overlap import COMM_COMPUTE_CONTENTION

# Qwen3-235B-A22B as NVIDIA's DGX-H100 recipe lays it out: EP32 spans 4 nodes, its all-to-all crosses IB.
ACROSS_NODES = dict(model="qwen3-235b-a22b", gpu="h100-sxm-80gb", gpus=256, precision="fp8", gbs=2048, mbs=1,
                    seq=4096, tp=2, pp=8, vpp=4, ep=32, etp=1, recompute="none", force_balance=True)
# Qwen3-30B-A3B with EP8 inside one NVLink node: the all-to-all is short beside the layer's compute.
INSIDE_NODE = dict(model="qwen3-30b-a3b", gpu="h100-sxm-80gb", gpus=8, gbs=64, mbs=1, seq=4096, ep=8,
                   recompute="none", force_balance=True)


def times(job, **knobs):
    return trainplan.estimate(**job, **knobs).time


def test_overlap_hides_expert_all_to_all_and_changes_no_compute():
    exposed, overlapped = times(ACROSS_NODES), times(ACROSS_NODES, moe_a2a_overlap=True)
    assert overlapped.breakdown["compute"] == pytest.approx(exposed.breakdown["compute"])
    assert overlapped.breakdown["comm/ep"] < exposed.breakdown["comm/ep"]
    assert overlapped.step_s < exposed.step_s
    # What is hidden is at most the compute it hides under: the all-to-all here outlasts it.
    hidden = exposed.breakdown["comm/ep"] - overlapped.breakdown["comm/ep"]
    assert hidden < exposed.breakdown["compute"]
    assert sum(overlapped.breakdown.values()) == pytest.approx(overlapped.step_s, rel=1e-9)


def test_short_all_to_all_hides_in_the_steady_state_but_not_in_the_first_forward():
    """pp = 1 (combined_1f1b_schedule_for_no_pipelining): the first forward runs alone, so its
    all-to-all (half of a micro-batch's) shows whole; the other 7 of 8 micro-batches pair up and a
    short all-to-all costs them only its contention; the last backward runs alone."""
    exposed, overlapped = times(INSIDE_NODE), times(INSIDE_NODE, moe_a2a_overlap=True)
    assert 0 < exposed.breakdown["comm/ep"] < exposed.breakdown["compute"]
    m = INSIDE_NODE["gbs"] // INSIDE_NODE["ep"]   # dp = 8, mbs 1
    per_microbatch = exposed.breakdown["comm/ep"] / m
    floor = COMM_COMPUTE_CONTENTION * m * per_microbatch + (1 - COMM_COMPUTE_CONTENTION) * per_microbatch / 2
    ceiling = COMM_COMPUTE_CONTENTION * (m - 1) * per_microbatch + per_microbatch
    assert floor * (1 - 1e-9) <= overlapped.breakdown["comm/ep"] <= ceiling


def test_knob_reaches_the_resolved_config():
    assert trainplan.estimate(**ACROSS_NODES, moe_a2a_overlap=True).config.moe_a2a_overlap is True
    assert trainplan.estimate(**ACROSS_NODES).config.moe_a2a_overlap is False


@pytest.mark.parametrize("job, knobs, fragment", [
    (dict(model="llama3-8b", gpu="h100-sxm-80gb", gpus=8), {}, "dense"),
    (INSIDE_NODE, dict(ep=1), "ep > 1"),
    (ACROSS_NODES, dict(vpp=1, schedule="1f1b"), "interleaved"),
    (INSIDE_NODE, dict(dispatcher="allgather"), "dispatcher"),
    (INSIDE_NODE, dict(recompute="full"), "full recompute"),
])
def test_layouts_megatron_refuses_are_refused(job, knobs, fragment):
    with pytest.raises(InputError, match=fragment):
        trainplan.estimate(**{**job, **knobs}, moe_a2a_overlap=True)


def test_megatron_export_writes_the_combined_1f1b_flags():
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.engines.megatron import export_megatron
    from trainplan.tools.config.layout import resolve_config

    model = load_model("qwen3-30b-a3b")
    knobs = {k: v for k, v in INSIDE_NODE.items() if k not in ("model", "gpu", "gpus")}
    on = export_megatron(model, resolve_config(model, 8, **knobs, moe_a2a_overlap=True), model_ref="q").content
    off = export_megatron(model, resolve_config(model, 8, **knobs), model_ref="q").content
    assert "--overlap-moe-expert-parallel-comm" in on and "--delay-wgrad-compute" in on
    assert "--overlap-moe-expert-parallel-comm" not in off


def test_a_search_with_the_overlap_pinned_keeps_only_layouts_megatron_runs():
    """The overlap's conditions on ep, schedule and recompute are per layout (validity.RULES): a search
    that pins moe_a2a_overlap once failed on its one-GPU probe (ep 1) for every job; it now rejects the
    layouts Megatron-Core refuses and returns the rest, each as estimate computes it."""
    job = dict(model="qwen3-30b-a3b", gpu="h100-sxm-80gb", gpus=16, seq=4096, gbs=256, force_balance=True)
    result = trainplan.search(**job, moe_a2a_overlap=True)
    assert any("moe_a2a_overlap" in reason for reason in result.rejected)
    assert result.candidates
    for candidate in result.candidates:
        config = candidate["config"]
        assert config["moe_a2a_overlap"] is True and config["ep"] > 1 and config["recompute"] != "full"
        assert config["pp"] == 1 or config["schedule"] == "interleaved"
        layout = {k: config[k] for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "recompute", "schedule",
                                         "recompute_modules", "bf16_moments", "fp8_activations")}
        again = trainplan.estimate(**job, **layout, moe_a2a_overlap=True).time.step_s
        assert candidate["time"]["step_s"] == pytest.approx(again, rel=1e-6)


def test_a_search_pinning_the_overlap_on_a_dense_model_or_allgather_is_one_error():
    with pytest.raises(InputError, match="dense"):
        trainplan.search(model="llama3-8b", gpu="h100-sxm-80gb", gpus=8, moe_a2a_overlap=True)
    with pytest.raises(InputError, match="dispatcher"):
        trainplan.search(**{k: v for k, v in INSIDE_NODE.items() if k not in ("ep", "recompute", "mbs")},
                         dispatcher="allgather", moe_a2a_overlap=True)
