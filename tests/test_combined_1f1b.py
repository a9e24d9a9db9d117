"""Megatron-Core's combined 1F1B as Megatron issues it (combined_1f1b.py): which all-to-all hides
under which compute, the unpaired warm-up forwards and cool-down backwards, and the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import trainplan
from trainplan.tools.perf.combined_1f1b import LayerNodes, chunk_layers, hidden_per_microbatch_s, replay_s
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.overlap import COMM_COMPUTE_CONTENTION as C
from trainplan.tools.perf.pipeline import combined_steps, simulate
from trainplan.tools.perf.pipeline_closed_form import StageTimes
from trainplan.tools.perf.pipeline_closed_form import combined_makespan, warmup_forwards
from trainplan.tools.core.enums import Schedule


def nodes(comm: float = 1.0, **override) -> LayerNodes:
    """A MoE layer: attention 1 ms forward, experts 2, backward twice that, wgrads delayed."""
    base = dict(attn_f=1.0, mlp_f=2.0, attn_b=1.2, attn_dw=0.8, mlp_b=2.0, mlp_dw=2.0,
                dispatch_f_comm=comm, combine_f_comm=comm, dispatch_b_comm=comm, combine_b_comm=comm)
    return LayerNodes(**{**base, **override})


def computes(layers: list[LayerNodes]) -> float:
    return sum(n.attn_f + n.mlp_f + n.attn_b + n.attn_dw + n.mlp_b + n.mlp_dw for n in layers)


def comms(layers: list[LayerNodes]) -> float:
    return sum(n.dispatch_f_comm + n.combine_f_comm + n.dispatch_b_comm + n.combine_b_comm for n in layers)


@pytest.mark.parametrize("comm", [0.1, 1.0, 3.0])
def test_a_forward_alone_hides_nothing(comm):
    """Its attn, dispatch, mlp and combine wait on each other (one CUDA event)."""
    layers = [nodes(comm)] * 3
    seconds, hidden = replay_s(layers, [])
    assert hidden == 0.0
    assert seconds == pytest.approx(sum(n.forward_s for n in layers))


@pytest.mark.parametrize("comm", [0.0, 0.1, 1.0, 3.0])
def test_a_combined_step_is_bounded_by_its_streams_and_by_running_apart(comm):
    layers = [nodes(comm)] * 4
    seconds, hidden = replay_s(layers, layers)
    serial = sum(n.forward_s + n.backward_s for n in layers)
    assert max(computes(layers), comms(layers)) <= seconds - C * hidden + 1e-12
    assert seconds <= serial + 1e-12
    assert 0.0 <= hidden <= min(computes(layers), comms(layers)) + 1e-12
    if comm == 0.0:
        assert hidden == 0.0 and seconds == pytest.approx(serial)


def test_a_short_all_to_all_hides_whole_in_a_combined_step():
    layers = [nodes(0.05)] * 3
    seconds, hidden = replay_s(layers, layers)
    assert hidden == pytest.approx(comms(layers))
    assert seconds == pytest.approx(computes(layers) + C * comms(layers))


def test_each_all_to_all_hides_only_under_the_node_megatron_runs_beside_it():
    """The combine backward runs beside the forward's attention alone: the expert backward waits for
    it. Plenty of compute in the layer does not hide the part longer than that attention."""
    layer = nodes(0.0, combine_b_comm=3.0, attn_f=1.0)
    seconds, hidden = replay_s([layer], [layer])
    assert computes([layer]) > 3.0                      # a whole-layer window would hide it all
    assert hidden == pytest.approx(1.0)                 # only the attention forward's length
    assert seconds == pytest.approx(computes([layer]) + 2.0 + C * 1.0)


def test_a_backward_alone_hides_under_its_own_delayed_weight_gradients():
    """Cool-down backwards: the dispatch backward runs beside the expert wgrad (no event), the next
    layer's combine backward beside the attention wgrad; without wgrads to run, nothing hides."""
    layer = nodes(0.0, dispatch_b_comm=1.5)
    seconds, hidden = replay_s([], [layer, layer])
    assert hidden == pytest.approx(2 * 1.5)             # mlp_dw = 2 > 1.5 on both layers
    no_wgrad = nodes(0.0, dispatch_b_comm=1.5, mlp_dw=0.0, attn_dw=0.0)
    assert replay_s([], [no_wgrad, no_wgrad])[1] == 0.0
    paired, alone = hidden_per_microbatch_s([[layer, layer]])
    assert alone == pytest.approx((1 - C) * 3.0)
    assert paired >= alone


def test_chunks_split_a_rank_layers_in_order():
    assert chunk_layers(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunk_layers([1], 4) == [[1]]


# --- the pipeline ---------------------------------------------------------------------------------


def first_backward_index(events: list) -> int:
    return next(i for i, e in enumerate(events) if e.kind != "F")


@pytest.mark.parametrize("pp, m, vpp", [(4, 8, 2), (2, 8, 3), (4, 4, 2)])
def test_the_interleaved_combined_schedule_is_megatrons(pp, m, vpp):
    """One more warm-up forward than interleaved 1F1B (get_pp_rank_microbatches), so the first combined
    step takes the place of 1F1B's first backward (which follows its first steady forward), then
    combined steps, then as many backwards alone as forwards ran alone."""
    result = simulate("interleaved", pp, m, vpp=vpp, stages=StageTimes(forward_s=1.0, backward_s=2.0, paired_s=2.5))
    plain = simulate("interleaved", pp, m, vpp=vpp, stages=StageTimes(forward_s=1.0, backward_s=2.0))
    for r in range(pp):
        mine = [e for e in result.timeline if e.stage == r]
        theirs = [e for e in plain.timeline if e.stage == r]
        warm = int(warmup_forwards(True, pp, m, vpp, r, combined=True))
        assert first_backward_index(mine) == warm == first_backward_index(theirs)
        assert sum(e.kind == "FB" for e in mine) == combined_steps(Schedule.interleaved, pp, m, vpp, r)
        assert sum(e.kind == "B" for e in mine) == warm
        fb = [e for e in mine if e.kind == "FB"]
        assert all(e.end_s - e.start_s == pytest.approx(2.5 / vpp) for e in fb)


@pytest.mark.parametrize("pp, m, vpp", [(4, 8, 2), (8, 16, 4)])
def test_the_combined_schedule_holds_what_interleaved_1f1b_holds(pp, m, vpp):
    """Its one extra warm-up chunk takes the place of the chunk 1F1B's steady forward adds before its
    backward frees one; a combined step frees layer by layer as it fills."""
    combined = simulate("interleaved", pp, m, vpp=vpp, stages=StageTimes(forward_s=1.0, backward_s=2.0, paired_s=2.5))
    plain = simulate("interleaved", pp, m, vpp=vpp, stages=StageTimes(forward_s=1.0, backward_s=2.0))
    assert combined.peak_inflight_microbatches == pytest.approx(plain.peak_inflight_microbatches)


def test_without_pipelining_the_first_forward_and_last_backward_run_alone():
    """combined_1f1b_schedule_for_no_pipelining: F0, (F1, B0), ..., (F m-1, B m-2), B m-1."""
    result = simulate("1f1b", 1, 5, stages=StageTimes(forward_s=1.0, backward_s=2.0, paired_s=2.2))
    assert [e.kind for e in result.timeline] == ["F", "FB", "FB", "FB", "FB", "B"]
    assert result.makespan_s == pytest.approx(1.0 + 4 * 2.2 + 2.0)


def test_a_cheaper_combined_step_never_lengthens_the_step():
    makespans = [simulate("interleaved", 4, 16, vpp=2, stages=StageTimes(forward_s=[1, 1, 1, 1.5], backward_s=[2, 2, 2, 3], paired_s=[3 * r, 3 * r, 3 * r, 4.5 * r]), p2p_s=0.01).makespan_s for r in (1.0, 0.8, 0.6)]
    assert makespans[0] > makespans[1] > makespans[2]


@pytest.mark.parametrize("schedule, pp", [("1f1b", 4), ("gpipe", 4), ("zb-h1", 4), ("dualpipe", 4)])
def test_combined_steps_only_where_megatron_runs_them(schedule, pp):
    with pytest.raises(InputError, match="combined 1F1B"):
        simulate(schedule, pp, 8, stages=StageTimes(forward_s=1.0, backward_s=2.0, paired_s=2.5))


@pytest.mark.parametrize("pp, m, vpp", [(4, 16, 2), (8, 16, 4), (8, 64, 4), (2, 8, 2), (4, 32, 3), (1, 8, 1)])
def test_combined_closed_form_follows_the_simulator(pp, m, vpp):
    """Equal stages and a heavier last stage, some p2p, combined steps hiding 0-40%: within 5%."""
    schedule = "interleaved" if pp > 1 else "1f1b"
    for head, p2p in ((0.0, 0.0), (0.6, 0.01), (1.0, 0.03)):
        for ratio in (1.0, 0.8, 0.6):
            f, b = np.ones(pp), np.full(pp, 2.5)
            f[-1], b[-1] = f[-1] + 1.2 * head, b[-1] + 2 * head
            y = ratio * (f + b)
            sim = simulate(schedule, pp, m, vpp=vpp, stages=StageTimes(forward_s=list(f), backward_s=list(b), paired_s=list(y)), p2p_s=p2p, record_timeline=False).makespan_s
            est = combined_makespan(pp, np.array([m]), np.array([vpp]), f[None], b[None], y[None], np.array([p2p]))[0]
            assert est == pytest.approx(sim, rel=0.05), (head, p2p, ratio)


# --- the step -------------------------------------------------------------------------------------

ACROSS_NODES = dict(model="qwen3-235b-a22b", gpu="h100-sxm-80gb", gpus=256, precision="fp8", gbs=512, mbs=1,
                    seq=4096, tp=2, pp=8, vpp=4, ep=32, etp=1, recompute="none", force_balance=True)
INSIDE_NODE = dict(model="qwen3-30b-a3b", gpu="h100-sxm-80gb", gpus=8, mbs=1, seq=4096, ep=8,
                   recompute="none", force_balance=True)


def breakdown(job, **knobs):
    return trainplan.estimate(**job, **knobs).time


@pytest.mark.parametrize("job", [ACROSS_NODES, {**INSIDE_NODE, "gbs": 64}])
def test_the_overlap_never_slows_a_step_nor_hides_more_than_the_all_to_all(job):
    plain, overlapped = breakdown(job), breakdown(job, moe_a2a_overlap=True)
    assert overlapped.step_s < plain.step_s
    assert overlapped.breakdown["comm/ep"] >= C * plain.breakdown["comm/ep"]
    assert plain.step_s - overlapped.step_s <= (1 - C) * plain.breakdown["comm/ep"] + 1e-9
    assert sum(overlapped.breakdown.values()) == pytest.approx(overlapped.step_s, rel=1e-9)


def test_a_micro_batch_without_a_partner_shows_its_forward_all_to_all():
    """One micro-batch, no pipelining: nothing pairs; the forward's all-to-all (half) shows whole and
    the backward hides only under its own delayed weight gradients."""
    job = {**INSIDE_NODE, "gbs": 8}
    plain, overlapped = breakdown(job), breakdown(job, moe_a2a_overlap=True)
    assert overlapped.breakdown["comm/ep"] >= plain.breakdown["comm/ep"] / 2
    assert overlapped.breakdown["comm/ep"] < plain.breakdown["comm/ep"]


def test_more_micro_batches_pair_more_of_the_all_to_all():
    shares = []
    for gbs in (16, 64, 256):
        job = {**INSIDE_NODE, "gbs": gbs}
        plain, overlapped = breakdown(job), breakdown(job, moe_a2a_overlap=True)
        shares.append(overlapped.breakdown["comm/ep"] / plain.breakdown["comm/ep"])
    assert shares[0] > shares[1] > shares[2] > C


def test_a_frozen_base_has_no_weight_gradients_to_hide_the_all_to_all_under():
    """LoRA: the cool-down backwards and the combined steps lose the delayed-wgrad windows."""
    job = {**INSIDE_NODE, "gbs": 64}
    full = breakdown(job, moe_a2a_overlap=True).breakdown["comm/ep"]
    lora = breakdown(job, method="lora", moe_a2a_overlap=True).breakdown["comm/ep"]
    assert lora > full
    assert lora < breakdown(job, method="lora").breakdown["comm/ep"]
