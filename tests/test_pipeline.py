"""Pipeline schedule simulator: closed forms, the papers' bubbles, memory orderings, dependency
invariants on the timeline, input errors and the `trainplan bubble` command."""

from __future__ import annotations

import json
from collections import defaultdict

from cli_inprocess import run_cli as in_process
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trainplan.cli import app
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.pipeline import _validate, bubble_closed_form, bubble_paper_s, simulate
from trainplan.tools.perf.pipeline_closed_form import StageTimes
from trainplan.tools.config.schedule_rules import SIMULATE_MAX_UNITS, TIMELINE_MAX_UNITS
from trainplan.tools.perf.pipeline_render import render_ascii, render_mermaid
from trainplan.tools.core.enums import Schedule

SCHEDULES = [
    ("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h1", 4, 8, 1), ("dualpipe", 4, 8, 1),
]


# ---------------------------------------------------------------- closed forms and the papers


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,m", [(1, 1), (2, 1), (4, 2), (4, 4), (4, 8), (8, 3), (8, 64), (16, 32)])
def test_gpipe_1f1b_match_closed_form(schedule, pp, m):
    result = simulate(schedule, pp, m, stages=StageTimes(forward_s=1.0, backward_s=2.0))
    assert result.bubble_fraction == pytest.approx((pp - 1) / (m + pp - 1), abs=1e-9)
    assert result.makespan_s == pytest.approx((m + pp - 1) * 3.0, abs=1e-9)


@pytest.mark.parametrize("pp,m,vpp", [(2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 16, 3), (8, 32, 4), (8, 8, 4)])
def test_interleaved_matches_closed_form(pp, m, vpp):
    # SC21: bubble time (p-1)(tf+tb)/v over compute m(tf+tb), i.e. (p-1)/(v*m+p-1) of the makespan.
    result = simulate("interleaved", pp, m, vpp=vpp, stages=StageTimes(forward_s=1.0, backward_s=2.0))
    assert result.bubble_fraction == pytest.approx((pp - 1) / (vpp * m + pp - 1), abs=1e-9)
    assert result.closed_form_bubble_fraction == pytest.approx(result.bubble_fraction, abs=1e-9)


def test_closed_form_values():
    assert bubble_closed_form("1f1b", 8, 32) == pytest.approx(7 / 39)
    assert bubble_closed_form(Schedule.gpipe, 8, 32) == pytest.approx(7 / 39)
    assert bubble_closed_form("interleaved", 8, 32, 4) == pytest.approx(7 / 135)
    assert bubble_closed_form("zb-h1", 8, 32) is None
    assert bubble_closed_form("dualpipe", 8, 32) is None


@pytest.mark.parametrize("pp,m", [(4, 4), (4, 16), (8, 32), (16, 64)])
def test_zb_h1_reproduces_paper_bubble(pp, m):
    # Qi et al. 2024 / DeepSeek-V3 Table 2, at the papers' F = B_input = W: (p-1)(F+B-2W) per rank, exact.
    zb = simulate("zb-h1", pp, m, stages=StageTimes(forward_s=1.0, backward_s=2.0, weight_grad_s=1.0))
    idle = zb.makespan_s - zb.stage_busy_s[0]
    assert idle == pytest.approx(bubble_paper_s("zb-h1", pp, 1.0, 2.0, 1.0), abs=1e-9)
    one = simulate("1f1b", pp, m)
    assert zb.bubble_fraction < 0.5 * one.bubble_fraction  # a third of 1F1B's bubble time


@pytest.mark.parametrize("pp,m", [(4, 8), (8, 16), (8, 40), (16, 64)])
def test_dualpipe_reproduces_paper_bubble(pp, m):
    # DeepSeek-V3 §3.2.1 Table 2: (PP/2-1)(F&B+B-3W) with F&B = F+B; exact at F = B_input = W.
    dual = simulate("dualpipe", pp, m, stages=StageTimes(forward_s=1.0, backward_s=2.0, weight_grad_s=1.0))
    assert all(b == pytest.approx(3.0 * m) for b in dual.stage_busy_s)
    assert dual.makespan_s - 3.0 * m == pytest.approx(bubble_paper_s("dualpipe", pp, 1.0, 2.0, 1.0), abs=1e-9)
    assert dual.bubble_fraction < simulate("1f1b", pp, m).bubble_fraction
    assert dual.bubble_fraction < simulate("zb-h1", pp, m).bubble_fraction


@pytest.mark.parametrize("w", [0.5, 0.8])
def test_dualpipe_within_paper_formula_for_other_w(w):
    # Away from F = B_input = W the paper's formula is an estimate; the simulated schedule does no worse.
    dual = simulate("dualpipe", 8, 32, stages=StageTimes(forward_s=1.0, backward_s=2.0, weight_grad_s=w))
    assert dual.makespan_s - 3.0 * 32 <= bubble_paper_s("dualpipe", 8, 1.0, 2.0, w) + 1e-9


def test_bubble_orderings():
    pp, m = 8, 32
    bubble = {s: simulate(s, pp, m, vpp=2 if s == "interleaved" else 1).bubble_fraction for s in
              ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe")}
    assert bubble["gpipe"] == pytest.approx(bubble["1f1b"])
    assert bubble["dualpipe"] < bubble["zb-h1"] < bubble["interleaved"] < bubble["1f1b"]


# ---------------------------------------------------------------- activation memory


@pytest.mark.parametrize("pp,m", [(4, 2), (4, 4), (4, 8), (8, 32)])
def test_peak_inflight_1f1b_and_gpipe(pp, m):
    one = simulate("1f1b", pp, m).peak_inflight_microbatches
    assert one == [min(pp - i, m) for i in range(pp)]
    assert simulate("gpipe", pp, m).peak_inflight_microbatches == [m] * pp


def test_peak_inflight_interleaved_in_full_stage_units():
    # Megatron: rank r holds (p-r-1)*2 + (v-1)*p + 1 chunk activations of 1/v stage each.
    pp, m, v = 4, 16, 2
    peak = simulate("interleaved", pp, m, vpp=v).peak_inflight_microbatches
    assert peak == [((pp - r - 1) * 2 + (v - 1) * pp + 1) / v for r in range(pp)]
    assert peak[0] == pytest.approx(pp * (1 + (pp - 1) / (pp * v)))


def test_peak_inflight_zb_h1_and_dualpipe():
    pp, m = 8, 32
    assert simulate("zb-h1", pp, m).peak_inflight_microbatches == [pp] * pp  # 1F1B's stage-0 peak
    assert max(simulate("dualpipe", pp, m).peak_inflight_microbatches) == pp + 1  # paper: PP+1


# ---------------------------------------------------------------- uneven stages, p2p


@pytest.mark.parametrize("schedule,pp,m,vpp", SCHEDULES)
def test_slowest_stage_dominates(schedule, pp, m, vpp):
    fwd, bwd = [1.0, 1.0, 2.0, 1.0], [2.0, 2.0, 4.0, 2.0]
    even = simulate(schedule, pp, m, vpp=vpp)
    uneven = simulate(schedule, pp, m, vpp=vpp, stages=StageTimes(forward_s=fwd, backward_s=bwd))
    slow = m * 6.0
    if schedule == "dualpipe":  # stage 2 runs on ranks 2 and 1, half the micro-batches each
        slow = m / 2 * 6.0 + m / 2 * 3.0
    assert max(uneven.stage_busy_s) == pytest.approx(slow)
    assert uneven.makespan_s >= slow
    assert uneven.makespan_s > even.makespan_s
    assert uneven.bubble_fraction > even.bubble_fraction


def test_gpipe_p2p_exact():
    pp, m, c = 4, 8, 0.25
    result = simulate("gpipe", pp, m, p2p_s=c)
    assert result.makespan_s == pytest.approx((m + pp - 1) * 3.0 + 2 * (pp - 1) * c)


@pytest.mark.parametrize("schedule,pp,m,vpp", SCHEDULES)
def test_p2p_increases_makespan(schedule, pp, m, vpp):
    base = simulate(schedule, pp, m, vpp=vpp).makespan_s
    assert simulate(schedule, pp, m, vpp=vpp, p2p_s=0.1).makespan_s > base


@pytest.mark.parametrize("schedule,vpp", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_single_stage_has_no_bubble(schedule, vpp):
    result = simulate(schedule, 1, 4, vpp=vpp, p2p_s=0.5)
    assert result.bubble_fraction == pytest.approx(0.0, abs=1e-12) and result.makespan_s == pytest.approx(12.0)


# ---------------------------------------------------------------- timeline invariants


def _check_timeline(result, p2p_s: float) -> None:
    pp, m, eps = result.pp, result.num_microbatches, 1e-9
    by_stage = defaultdict(list)
    for e in result.timeline:
        by_stage[e.stage].append(e)
    for r, events in by_stage.items():  # one op at a time per rank, busy time adds up
        events.sort(key=lambda e: e.start_s)
        for a, b in zip(events, events[1:]):
            assert a.end_s <= b.start_s + eps
        assert sum(e.end_s - e.start_s for e in events) == pytest.approx(result.stage_busy_s[r])

    def vstage(rank: int, chunk: int) -> int:
        if result.schedule == "dualpipe":
            return rank if chunk == 0 else pp - 1 - rank
        return chunk * pp + rank

    fwd, bwd, wgt = {}, {}, {}
    for e in result.timeline:
        if e.kind in ("F", "FB"):
            key = (e.microbatch, vstage(e.stage, e.chunk))
            assert key not in fwd
            fwd[key] = e
        if e.kind in ("B", "FB"):
            mb, ch = (e.backward_microbatch, e.backward_chunk) if e.kind == "FB" else (e.microbatch, e.chunk)
            key = (mb, vstage(e.stage, ch))
            assert key not in bwd
            bwd[key] = e
        if e.kind == "W":
            wgt[(e.microbatch, vstage(e.stage, e.chunk))] = e
    num_v = pp * result.vpp if result.schedule != "dualpipe" else pp
    assert set(fwd) == set(bwd) == {(mb, v) for mb in range(m) for v in range(num_v)}
    for (mb, v), f in fwd.items():
        b = bwd[(mb, v)]
        assert f.end_s <= b.start_s + eps or f is b  # F before B of the same micro-batch and stage
        if v > 0:
            prev = fwd[(mb, v - 1)]
            hop = p2p_s if prev.stage != f.stage else 0.0
            assert prev.end_s + hop <= f.start_s + eps
        if v < num_v - 1:
            nxt = bwd[(mb, v + 1)]
            hop = p2p_s if nxt.stage != b.stage else 0.0
            assert nxt.end_s + hop <= b.start_s + eps
        if (mb, v) in wgt:
            assert b.end_s <= wgt[(mb, v)].start_s + eps
    assert result.makespan_s == pytest.approx(max(e.end_s for e in result.timeline))


@pytest.mark.parametrize("schedule,pp,m,vpp", SCHEDULES + [("interleaved", 4, 12, 3), ("dualpipe", 8, 20, 1)])
def test_timeline_respects_dependencies(schedule, pp, m, vpp):
    fwd = [1.0 + 0.1 * i for i in range(pp)]
    bwd = [2.0 + 0.3 * (i % 3) for i in range(pp)]
    result = simulate(schedule, pp, m, vpp=vpp, stages=StageTimes(forward_s=fwd, backward_s=bwd, weight_grad_s=[0.8] * pp), p2p_s=0.05)
    _check_timeline(result, 0.05)
    if schedule in ("zb-h1", "dualpipe"):
        assert any(e.kind == "W" for e in result.timeline)
    else:
        assert all(e.kind in ("F", "B") for e in result.timeline)


@settings(max_examples=60, deadline=None)
@given(
    schedule=st.sampled_from([s.value for s in Schedule]),
    half_pp=st.integers(1, 4), k=st.integers(1, 4),
    times=st.lists(st.tuples(st.floats(0.1, 3.0), st.floats(0.1, 3.0), st.floats(0.0, 1.0)), min_size=8, max_size=8),
    p2p=st.floats(0.0, 0.5),
)
def test_invariants_random(schedule, half_pp, k, times, p2p):
    pp = 2 * half_pp
    m, vpp = (2 * pp * k, 1) if schedule != "interleaved" else (pp * k, 2)
    fwd = [t[0] for t in times[:pp]]
    bwd = [t[1] for t in times[:pp]]
    wgt = [t[1] * t[2] for t in times[:pp]]
    result = simulate(schedule, pp, m, vpp=vpp, stages=StageTimes(forward_s=fwd, backward_s=bwd, weight_grad_s=wgt), p2p_s=p2p)
    _check_timeline(result, p2p)
    assert 0.0 <= result.bubble_fraction < 1.0
    assert result.makespan_s >= max(result.stage_busy_s) - 1e-9


def test_record_timeline_off_gives_same_numbers():
    on = simulate("interleaved", 8, 32, vpp=4, p2p_s=0.01)
    off = simulate("interleaved", 8, 32, vpp=4, p2p_s=0.01, record_timeline=False)
    assert off.timeline == []
    assert off.makespan_s == on.makespan_s and off.peak_inflight_microbatches == on.peak_inflight_microbatches


def test_to_dict_is_json():
    d = simulate("dualpipe", 4, 8).to_dict()
    json.dumps(d)
    for key in ("bubble_fraction", "peak_inflight_microbatches", "makespan_s", "closed_form_bubble_fraction",
                "timeline", "stage_busy_s"):
        assert key in d
    assert "timeline" not in simulate("1f1b", 2, 2).to_dict(include_timeline=False)
    fb = [e for e in d["timeline"] if e["kind"] == "FB"]
    assert fb and all(e["backward_microbatch"] is not None for e in fb)


# ---------------------------------------------------------------- rendering


def test_render_ascii_and_mermaid():
    result = simulate("1f1b", 4, 8)
    text = render_ascii(result, width=80)
    rows = [line for line in text.splitlines() if line.startswith("rank")]
    assert len(rows) == 4 and all(len(r) == len(rows[0]) for r in rows)
    assert "F0" in rows[0] and "B7" in rows[0]
    block = render_mermaid(simulate("dualpipe", 4, 8))
    assert block.startswith("```mermaid\ngantt") and block.endswith("```")
    assert block.count("section rank") == 4 and "FB" in block
    with pytest.raises(InputError):
        render_ascii(simulate("1f1b", 2, 2, record_timeline=False))


# ---------------------------------------------------------------- input errors


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(schedule="1f1b", pp=0, num_microbatches=4), "pp must be"),
    (dict(schedule="1f1b", pp=4, num_microbatches=0), "num_microbatches must be"),
    (dict(schedule="pipedream", pp=4, num_microbatches=4), "unknown schedule"),
    (dict(schedule="1f1b", pp=4, num_microbatches=4, stages=StageTimes(forward_s=[1.0, 1.0])), "forward_s has 2 values but pp=4"),
    (dict(schedule="1f1b", pp=2, num_microbatches=4, stages=StageTimes(backward_s=-1.0)), "backward_s must be"),
    (dict(schedule="zb-h1", pp=2, num_microbatches=4, stages=StageTimes(weight_grad_s=3.0)), "cannot exceed"),
    (dict(schedule="interleaved", pp=4, num_microbatches=6, vpp=2), "divisible by pp"),
    (dict(schedule="interleaved", pp=4, num_microbatches=8, vpp=1), "vpp >= 2"),
    (dict(schedule="1f1b", pp=4, num_microbatches=8, vpp=2), "only used by the interleaved"),
    (dict(schedule="dualpipe", pp=3, num_microbatches=12), "dualpipe needs"),
    (dict(schedule="dualpipe", pp=4, num_microbatches=6), "dualpipe needs"),
    (dict(schedule="1f1b", pp=2, num_microbatches=2, p2p_s=-0.1), "p2p_s"),
])
def test_bad_input_raises_input_error(kwargs, fragment):
    with pytest.raises(InputError, match=fragment):
        simulate(**kwargs)


# ---------------------------------------------------------------- CLI


runner = CliRunner()


def test_cli_text():
    out = runner.invoke(app, ["bubble", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8"])
    assert out.exit_code == 0, out.output
    assert "bubble_fraction: 0.2727" in out.output and "closed form" in out.output
    assert "peak_inflight_microbatches: [4.0, 3.0, 2.0, 1.0]" in out.output
    assert "makespan_s: 33" in out.output and "rank 3" in out.output


def test_cli_default_schedule_and_mermaid():
    out = runner.invoke(app, ["bubble", "--pp", "4", "--microbatches", "8", "--vpp", "2", "--mermaid"])
    assert out.exit_code == 0, out.output
    assert "schedule interleaved" in out.output and "```mermaid" in out.output
    out = runner.invoke(app, ["bubble", "--schedule", "dualpipe", "--pp", "4", "--microbatches", "8"])
    assert out.exit_code == 0 and "paper's formula: 2 s" in out.output


def test_cli_json():
    out = runner.invoke(app, ["bubble", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8",
                              "--forward", "1,1,1.5,1", "--backward", "2", "--weight-grad", "0.8", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    for key in ("bubble_fraction", "peak_inflight_microbatches", "makespan_s", "closed_form_bubble_fraction"):
        assert key in data
    assert data["closed_form_bubble_fraction"] is None and len(data["peak_inflight_microbatches"]) == 4
    assert "timeline" not in data   # opt-in: every event would be embedded
    out = runner.invoke(app, ["bubble", "--pp", "4", "--microbatches", "8", "--json", "--timeline"])
    events = json.loads(out.output)["timeline"]
    assert len(events) == 2 * 4 * 8 and {e["kind"] for e in events} == {"F", "B"}


def test_sizes_are_bounded_with_a_clear_message():
    """pp x microbatches x vpp is capped (SIMULATE_MAX_UNITS), and lower with the timeline."""
    with pytest.raises(InputError, match="use fewer micro-batches"):
        simulate("1f1b", 256, 65536, record_timeline=False)
    with pytest.raises(InputError, match="no-timeline"):
        simulate("1f1b", 16, TIMELINE_MAX_UNITS // 16 + 16)
    _validate(Schedule.one_f_one_b, 16, SIMULATE_MAX_UNITS // 16, 1)            # at the cap: runs
    _validate(Schedule.one_f_one_b, 16, TIMELINE_MAX_UNITS // 16, 1, record_timeline=True)


@pytest.mark.parametrize("args", [
    ["--schedule", "interleaved", "--pp", "4", "--microbatches", "6", "--vpp", "2"],
    ["--schedule", "nope", "--pp", "4", "--microbatches", "8"],
    ["--pp", "4", "--microbatches", "8", "--forward", "1,x"],
    ["--pp", "256", "--microbatches", "65536", "--no-timeline"],
    ["--pp", "16", "--microbatches", "16384", "--json", "--timeline"],
])
def test_cli_bad_input_one_error_line(args):
    proc = in_process("bubble", *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr


def test_ascii_timeline_never_cuts_a_microbatch_id():
    """Every op shows its full id (F10, not 'Ff'), widening the grid, or its letter alone with a note."""
    import re

    from trainplan.tools.perf.pipeline import simulate as run
    from trainplan.tools.perf.pipeline_render import render_ascii as draw

    text = draw(run("1f1b", 4, 12, record_timeline=True))
    grid = [line.split("|")[1] for line in text.splitlines() if line.startswith("rank")]
    ids = {int(m) for row in grid for m in re.findall(r"[FB](\d+)", row)}
    assert ids == set(range(12)), ids
    crowded = draw(run("interleaved", 4, 16, vpp=2, record_timeline=True))
    crowded_ids = [int(m) for line in crowded.splitlines() if line.startswith("rank")
                   for m in re.findall(r"[FB](\d+)", line.split("|")[1])]
    assert all(0 <= i < 16 for i in crowded_ids)
    assert "letter alone" in crowded
