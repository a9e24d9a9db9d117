"""Activation offloading (Megatron --fine-grained-activation-offloading --offload-modules): what stays
on the GPU, what the PCIe copies cost, validation, and the vectorised path."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.tools.perf.activations import knob_arrays, activation_bytes_per_layer, inflight_microbatches
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import GIB, memory_breakdown, memory_totals_vectorised
from trainplan.tools.perf.activations import offloaded_stage_bytes
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.perf.step import step_time

H100 = load_gpu("h100-sxm-80gb")
QWEN = load_model("qwen3-30b-a3b")
KW = dict(gpus=16, pp=2, ep=8, seq=4096, gbs=128)


def test_offloaded_tensors_leave_the_in_flight_micro_batches():
    plain = memory_breakdown(QWEN, resolve_config(QWEN, **KW), H100)
    cfg = resolve_config(QWEN, offload_modules="expert_fc1", **KW)
    off = memory_breakdown(QWEN, cfg, H100)
    per_layer = activation_bytes_per_layer(QWEN, cfg, 0)["moe/dispatched"]
    assert "activations/moe/dispatched" not in off.breakdown
    assert off.breakdown["activations/offload_staging"] * GIB == pytest.approx(2 * per_layer, rel=1e-12)
    stage = plain.worst_stage
    layers = plain.per_stage[stage]["num_layers"]
    inflight = inflight_microbatches("1f1b", 2, cfg.num_microbatches)[stage]
    saved = plain.activations - off.activations
    assert saved * GIB == pytest.approx(per_layer * (layers * inflight - 2) * 1.0, rel=1e-9)


def test_the_two_norms_share_their_inputs():
    llama = load_model("llama3-8b")
    kw = dict(gpus=8, seq=4096)
    norms = activation_bytes_per_layer(llama, resolve_config(llama, **kw), 0)["norm/inputs"]
    one = memory_breakdown(llama, resolve_config(llama, offload_modules=["attn_norm"], **kw), H100)
    both = memory_breakdown(llama, resolve_config(llama, offload_modules=["attn_norm", "mlp_norm"], **kw), H100)
    assert one.breakdown["activations/offload_staging"] * GIB == pytest.approx(norms, rel=1e-12)   # 2 x half
    assert "activations/norm/inputs" not in both.breakdown


def test_copies_cost_pcie_time_beyond_what_compute_hides():
    cluster = ClusterSpec.build(H100, 16)
    plain = step_time(QWEN, resolve_config(QWEN, **KW), cluster)
    cfg = resolve_config(QWEN, offload_modules="expert_fc1,moe_act,attn_norm,mlp_norm", **KW)
    off = step_time(QWEN, cfg, cluster)
    assert "comm/offload" not in plain.breakdown and off.breakdown["comm/offload"] > 0
    assert off.step_s > plain.step_s
    copy_s = offloaded_stage_bytes(QWEN, cfg, list(range(24))) / (cluster.host_link_gb_s * 1e9)
    assert off.breakdown["comm/offload"] <= cfg.num_microbatches * copy_s   # never more than the copies


@pytest.mark.parametrize("modules,needle", [("moe_act", "is dense"), ("attention", "not one of")])
def test_bad_offload_modules_are_input_errors(modules, needle):
    llama = load_model("llama3-8b")
    with pytest.raises(InputError, match=needle):
        resolve_config(llama, 8, offload_modules=modules)


def test_vectorised_offload_equals_scalar():
    cfgs = [resolve_config(QWEN, offload_modules=m, **KW) for m in (None, "expert_fc1", "core_attn,attn_proj")]
    arrays = {k: np.concatenate([knob_arrays(c)[k] for c in cfgs]).ravel() for k in knob_arrays(cfgs[0])}
    vec = memory_totals_vectorised(QWEN, H100, arrays)
    for i, cfg in enumerate(cfgs):
        assert vec["total"][i] == pytest.approx(memory_breakdown(QWEN, cfg, H100).total, rel=1e-12)


def test_the_search_offloads_the_optimizer_when_nothing_else_fits_and_the_plan_says_so():
    from trainplan.agent.planner import plan
    from trainplan.tools.search.driver import OFFLOAD_NOTE, search

    job = dict(seq=2048, gbs=16, tokens="1B")
    assert not search("llama3-70b", "h100", 8, optimizer_offload=False, **job).candidates
    found = search("llama3-70b", "h100", 8, **job)
    assert found.candidates and OFFLOAD_NOTE in found.notes
    assert all(c["config"]["optimizer_offload"] for c in found.candidates)
    assert found.candidates[0]["time"]["breakdown"]["optimizer"] > 0
    fits = search("llama3-8b", "h100", 8, **job)
    assert OFFLOAD_NOTE not in fits.notes and not fits.candidates[0]["config"]["optimizer_offload"]
    report = plan("Full fine-tune Llama 3 70B on 8 H100s for 1B tokens with DeepSpeed", backend="offline")
    assert report.recommended["config"]["optimizer_offload"] and report.layout.endswith("optimizer on the CPU")
    assert any(risk.startswith("the optimizer states and step run on the CPU") for risk in report.risks)
