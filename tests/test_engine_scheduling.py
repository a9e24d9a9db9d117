"""How an engine schedules its communication: blocking pipeline transfers (DeepSpeed's pipeline engine)
and data-parallel reductions after the last backward (Megatron-LM 2021-22, DeepSpeed's TrainSchedule)."""

import pytest

import trainplan
from trainplan.tools.perf.pipeline_p2p import blocking_p2p_s

# A pipelined dense layout with large transfers (no sequence parallelism, a slow network), so that the
# mechanisms show: 16 GPUs, TP2 PP4 DP2.
JOB = dict(model="llama3-8b", gpu="a100-sxm-80gb", gpus=16, tp=2, pp=4, seq=4096, gbs=64, mbs=2,
           sequence_parallel=False, inter_node_bw=6.25, gpus_per_node=2, zero=1)


def timed(**overrides):
    return trainplan.estimate(**{**JOB, **overrides}).time


def test_blocking_transfers_occupy_every_rank_but_the_ends_twice_per_pass():
    forward, backward = blocking_p2p_s(0.01, 4)
    assert list(forward) == pytest.approx([0.0, 0.02, 0.02, 0.02])    # receive activation, send gradient
    assert list(backward) == pytest.approx([0.02, 0.02, 0.02, 0.0])   # send activation, receive gradient


def test_blocking_p2p_slows_the_step_and_shows_as_pipeline_communication():
    overlapped = timed()
    blocking = timed(blocking_p2p=True)
    assert blocking.step_s > overlapped.step_s
    assert "comm/pp" not in overlapped.breakdown and blocking.breakdown["comm/pp"] > 0
    assert sum(blocking.breakdown.values()) == pytest.approx(blocking.step_s, rel=1e-9)
    # The critical rank pays two transfers per micro-batch (an end stage) or four (a middle one), each one
    # activation of 2 * mbs * seq * hidden bytes over the network (the PP neighbours sit on other nodes).
    m = JOB["gbs"] // (JOB["mbs"] * JOB["gpus"] // (JOB["tp"] * JOB["pp"]))
    transfer_s = 2 * JOB["mbs"] * JOB["seq"] * 4096 / (JOB["inter_node_bw"] * 1e9)
    per_transfer = [blocking.breakdown["comm/pp"] / (k * m) for k in (2, 4)]
    assert any(transfer_s <= t <= 1.25 * transfer_s for t in per_transfer)


def test_blocking_p2p_changes_nothing_without_a_pipeline():
    assert timed(pp=1, gpus=8, blocking_p2p=True).step_s == pytest.approx(timed(pp=1, gpus=8).step_s)


def test_reductions_after_the_last_backward_expose_all_of_them():
    overlapped = timed(zero=0)
    after = timed(zero=0, overlap_grad_reduce=False)
    assert after.breakdown["comm/dp"] > overlapped.breakdown["comm/dp"]
    assert after.step_s - overlapped.step_s == pytest.approx(
        after.breakdown["comm/dp"] - overlapped.breakdown["comm/dp"])
    # One data-parallel rank: nothing to reduce either way.
    assert timed(gpus=8, overlap_grad_reduce=False).breakdown["comm/dp"] == 0.0


@pytest.mark.parametrize("knobs", [dict(blocking_p2p=True), dict(overlap_grad_reduce=False),
                                   dict(blocking_p2p=True, overlap_grad_reduce=False)])
def test_the_search_times_these_knobs_as_the_estimate_does(knobs):
    layout = {k: JOB[k] for k in ("tp", "pp", "mbs", "zero")}
    job = {k: v for k, v in JOB.items() if k not in layout}
    best = trainplan.search(**job, **layout, **knobs, vpp=1, cp=1, schedule="1f1b", recompute="selective",
                            recompute_modules="core_attn", top_k=1,
                            headroom_gib=0.0).candidates[0]
    assert best["time"]["step_s"] == pytest.approx(timed(**knobs).step_s, rel=1e-6)


def _export(engine, **knobs):
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.engines import export
    from trainplan.tools.config.layout import resolve_config

    model = load_model("llama3-8b")
    cfg = resolve_config(model, 16, tp=2, pp=4, zero=1, gbs=64, seq=4096, **knobs)
    return export(engine, model, cfg, model_ref="llama3-8b")


def test_exports_ask_the_engines_for_the_overlap_the_plan_assumed():
    assert "--overlap-grad-reduce" in _export("megatron").content
    assert "--overlap-param-gather" in _export("megatron").content
    assert "--overlap-grad-reduce" not in _export("megatron", overlap_grad_reduce=False).content
    assert '"overlap_comm": true' in _export("deepspeed").content
    assert '"overlap_comm": false' in _export("deepspeed", overlap_grad_reduce=False).content
    # DeepSpeed's pipeline engine runs neither overlap: a plan that assumed them says so.
    assert any("blocking_p2p=true" in note for note in _export("deepspeed").notes)
    assert not any("blocking_p2p=true" in note
                   for note in _export("deepspeed", blocking_p2p=True, overlap_grad_reduce=False).notes)
