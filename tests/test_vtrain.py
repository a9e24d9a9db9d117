"""vTrain's measured A100 iteration times (evals/vtrain.py): the eval runs on every row, and the floors of small
work (tools/perf/host.py, NCCL's per-call latency) act where kernels are small and nowhere else. No timing."""

from __future__ import annotations

import math

import pytest

import trainplan
from trainplan.evals import vtrain
from trainplan.tools.core import calibration
from trainplan.tools.perf import host


def test_the_data_and_its_licence_are_in_the_repository():
    assert (vtrain.DATA_DIR / "LICENSE").read_text().startswith("Copyright (c) 2024, VIA Research Group at KAIST")
    assert len(vtrain.rows(False)) == 1440 and len(vtrain.rows(True)) == 109
    assert {r.hidden for r in vtrain.rows(False)} == {1024, 2048}


def test_the_calibration_table_names_the_vtrain_groups():
    fit = calibration.HOST_S_PER_OP
    assert set(fit.fitted_on) == {"vtrain-single-h2048"}
    vtrain_held = set(fit.held_out) - set(calibration.FINE_TUNING_SPEED_HELD)   # the fine-tuning rows are eval cases
    assert vtrain_held == {"vtrain-single-h1024", "vtrain-multi"}
    assert set(fit.fitted_on) | vtrain_held <= set(vtrain.CASE_GROUPS)
    assert 5e-6 <= fit.value <= 25e-6   # the range its method names
    fitted = [r for r in vtrain.rows(False) if r.fitted]
    assert fitted and all(r.hidden == vtrain.FIT_HIDDEN for r in fitted)


def test_a_sample_of_rows_evaluates_and_the_floors_close_the_gap():
    after = vtrain.evaluate(every=8)
    before = vtrain.evaluate(every=8, floors=False)
    for name in ("single", "single_fitted", "single_held_out", "multi"):
        assert after[name]["n"] > 0 and math.isfinite(after[name]["mape"])
    # Without the floors the small kernels are timed as free: the held-out rows come out far too short.
    assert before["single_held_out"]["median_error"] < -0.3
    assert after["single_held_out"]["mape"] < before["single_held_out"]["mape"] / 2
    assert after["single"]["spearman"] > before["single"]["spearman"]


def test_the_spearman_of_a_reversed_order_is_minus_one():
    assert vtrain.spearman([1, 2, 3, 4], [8, 6, 4, 2]) == pytest.approx(-1.0)
    assert vtrain.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == pytest.approx(1.0)


# A small model: the 350M GPT of the flash-attention eval (hidden 1024, 24 layers), TP 4 at micro-batch 1.
SMALL = dict(model=str(vtrain.Path(__file__).parents[1] / "evals" / "runs" / "models" / "flashattn-gpt3-355m.json"),
             gpu="a100-sxm-80gb", gpus=4, tp=4, mbs=1, gbs=8, seq=1024, recompute="full", attention="eager")


def test_cuda_graphs_remove_the_host_floor_and_compile_lowers_it():
    eager = trainplan.estimate(**SMALL).time
    compiled = trainplan.estimate(**SMALL, launch="compile").time
    graphs = trainplan.estimate(**SMALL, launch="cuda_graphs").time
    assert eager.step_s > compiled.step_s > graphs.step_s
    assert eager.breakdown["compute"] > graphs.breakdown["compute"]


def test_big_kernels_do_not_wait_on_the_host():
    big = dict(model="llama3-70b", gpu="h100-sxm-80gb", gpus=64, tp=8, pp=2, mbs=1, gbs=256, seq=8192)
    eager = trainplan.estimate(**big).time.step_s
    graphs = trainplan.estimate(**big, launch="cuda_graphs").time.step_s
    assert eager == pytest.approx(graphs, rel=1e-3)


def test_the_host_floor_is_the_op_count_times_the_fitted_cost():
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.config.layout import resolve_config

    model = load_model("llama3-8b")
    cfg = resolve_config(model, 8, tp=8, mbs=1, gbs=8, seq=512)
    forward, backward = host.host_pass_s(model, cfg, is_moe=False)
    ops = host.host_ops_forward(model, cfg, is_moe=False)
    assert forward == pytest.approx(ops * host.HOST_S_PER_OP)
    assert backward == pytest.approx(host.BACKWARD_OPS_PER_FORWARD_OP * forward)
    graphs = resolve_config(model, 8, tp=8, mbs=1, gbs=8, seq=512, launch="cuda_graphs")
    assert host.host_ops_forward(model, graphs, is_moe=False) == 1
