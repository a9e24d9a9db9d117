"""What the search recommends and shows (issues 11, 20): one default headroom, a simpler layout within the
margin, structurally different alternatives with why they lost, and an engine-aware search."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.tools.engines import export
from trainplan.tools.engines.common import ExportError
from trainplan.tools.config.engines import ENGINES
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.hardware.catalog import load_model
from trainplan.tools.config.plan_defaults import DEFAULT_HEADROOM, EVIDENCE_MARGIN, SIMPLER_MARGIN
from trainplan.tools.search.driver import label, search
from trainplan.tools.search.evidence import Shape
from trainplan.tools.search.choice import FAMILIES, departures, simplicity
from trainplan.tools.search.evidence import columns
from trainplan.tools.search.rank import result_objective
from trainplan.tools.core.enums import Objective

JOB = dict(model="llama3-70b", gpu="h100", gpus=64, gbs=512, seq=8192)


@pytest.fixture(scope="module")
def job_70b() -> dict:
    return search(**JOB, top_k=8)


def _layout(tp=1, pp=1, cp=1, ep=1, vpp=1, zero=1, schedule="1f1b"):
    return columns(dict(tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, zero=zero, schedule=schedule))


def _dense(seq: int, layers: int = 80) -> Shape:
    return Shape(layers=layers, is_moe=False, seq=seq, gpus_per_node=8)


def test_context_parallelism_departs_from_the_evidence_below_4k_tokens_per_rank():
    """NeMo's Llama 3.1 405B recipe runs CP2 at 8K (4,096 tokens per rank) and Llama 3 405B CP16 at 131K
    (8,192), both eval runs that pass; CP4 at 8K (2,048 per rank) is a departure."""
    assert int(departures(_layout(tp=4, pp=4, cp=2, vpp=5, schedule="interleaved"), _dense(8192))) == 0
    assert int(departures(_layout(tp=8, pp=16, cp=16, vpp=8, schedule="interleaved"), _dense(131072, 126))) == 0
    assert int(departures(_layout(tp=2, pp=16, cp=4, vpp=5, schedule="interleaved"), _dense(8192))) == 1
    assert int(departures(_layout(tp=4, pp=16, cp=4, vpp=5, schedule="interleaved"), _dense(8192))) == 2  # and across nodes


def test_a_departure_weighs_as_much_as_a_parallel_dimension():
    """Dropping TP for CP4 at 8K trades a dimension for a departure: not simpler, so the faster one stays."""
    with_tp = _layout(tp=2, pp=4, cp=2, zero=2, schedule="interleaved")
    without_tp = _layout(tp=1, pp=8, cp=4, zero=2, schedule="interleaved")
    assert int(simplicity(with_tp, _dense(8192))) == int(simplicity(without_tp, _dense(8192)))
    assert int(simplicity(_layout(tp=8, pp=4, schedule="interleaved"), _dense(8192))) < int(
        simplicity(without_tp, _dense(8192)))


def test_search_keeps_the_default_headroom(job_70b):
    capacity = job_70b.candidates[0]["memory_gib"]["capacity"]
    assert job_70b.job.headroom_gib == pytest.approx(DEFAULT_HEADROOM * capacity)
    assert all(c["memory_gib"]["total"] <= (1 - DEFAULT_HEADROOM) * capacity for c in job_70b.candidates)
    assert search(**JOB, top_k=1, headroom_gib=0).feasible > job_70b.feasible


def test_recommendation_is_the_simplest_within_the_margin_inside_the_evidence(job_70b):
    """The leader is the best layout inside the evals' evidence (no faster one outside it by the 5%
    margin here); the recommendation is the simplest within 3% of that leader."""
    first, shape = job_70b.candidates[0], _dense(JOB["seq"])
    inside = [c for c in job_70b.candidates if int(departures(columns(c["config"]), shape)) == 0]
    assert first in inside
    lead = min(inside, key=lambda c: c["time"]["step_s"])
    fastest = min(job_70b.candidates, key=lambda c: c["time"]["step_s"])
    assert lead["time"]["step_s"] <= (1 + EVIDENCE_MARGIN) * fastest["time"]["step_s"]
    if fastest is not lead:
        note = next(n for n in job_70b.notes if n.startswith("ranked") and "outside it" in n)
        assert label(lead["config"]) in note and f"at least {EVIDENCE_MARGIN:.0%}" in note
    assert first["time"]["step_s"] <= (1 + SIMPLER_MARGIN) * lead["time"]["step_s"]
    for other in inside:
        if other["time"]["step_s"] <= (1 + SIMPLER_MARGIN) * lead["time"]["step_s"]:
            assert simplicity(columns(first["config"]), shape) <= simplicity(columns(other["config"]), shape)
    if first is not lead:
        note = next(n for n in job_70b.notes if n.startswith("preferred the simpler"))
        gap = lead["time"]["tokens_per_s"] / first["time"]["tokens_per_s"] - 1
        assert f"{gap:.1%}" in note


def test_alternatives_are_structurally_different_and_say_why_in_numbers(job_70b):
    best = job_70b.candidates[0]
    alternatives = job_70b.alternatives
    names = [a.family for a in alternatives]
    assert len(names) == len(set(names)) >= 2
    for alt in alternatives:
        member = dict((name, test) for name, _, test in FAMILIES)[alt.family]
        assert not member(columns(best["config"]))          # the recommendation is not of this family
        if alt.candidate is not None:
            assert member(columns(alt.candidate["config"]))
            assert alt.worse_by == pytest.approx(
                result_objective(Objective.throughput, alt.candidate, 0, None)
                / result_objective(Objective.throughput, best, 0, None) - 1)
            assert alt.worse_by >= 0 and "%" in alt.why
        else:
            assert "rejected" in alt["why"]


def _exports(engine: str, config: dict) -> bool:
    cfg = resolve_config(load_model(config["model"]), config["gpus"], **{
        k: config[k] for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "recompute", "schedule",
                               "precision")})
    try:
        export(engine, load_model(config["model"]), cfg, model_ref=config["model"])
    except ExportError:
        return False
    return True


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_aware_search_keeps_only_layouts_the_engine_exports(engine):
    # 16K: at 32K the Hugging Face engines' materialised fp32 logits (tools/perf/loss.py, 12 B x 32768 x 128256 =
    # 50 GB per GPU) fit no data-parallel layout of an 80 GB card
    result = search(model="llama3-8b", gpu="h100", gpus=16, gbs=64, seq=16384, top_k=6, engine=engine)
    assert result.candidates, result.notes
    for candidate in result.candidates + [a.candidate for a in result.alternatives if a.candidate]:
        assert _exports(engine, candidate["config"]), candidate["config"]
    if engine != "torchtitan":   # torchtitan runs every layout of this dense job
        assert result.rejected["the engine cannot run it"] > 0


def test_plan_with_deepspeed_recommends_what_deepspeed_runs():
    report = trainplan.plan("Llama 3 8B on 16 H100 at 32K context for 100B tokens", backend="offline",
                            engine="deepspeed")
    assert report.recommended["config"]["cp"] == 1
    assert report.launch.error is None and report.launch.engine == "deepspeed"
    assert any("deepspeed" in line for line in report.assumptions)


def _candidate(step_s: float, memory: float, **config) -> dict:
    base = {"gpus": 144, "tp": 16, "pp": 9, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "zero": 0, "mbs": 4,
            "recompute": "none", "schedule": "1f1b"}
    return {"time": {"step_s": step_s, "breakdown": {"compute": step_s}, "bubble_fraction": 0.0},
            "memory_gib": {"total": memory}, "config": {**base, **config}}


def test_a_faster_runner_up_is_never_called_the_same_time():
    """llama3-70b on 144 GB200 at TP16: the runner-up (zb-h1) was 2.4% faster than the recommended, simpler
    1f1b layout, and the line read 'same time; more memory (56.54 vs 56.54 GiB)'."""
    from trainplan.tools.search.explain import explain_runner_up

    best = _candidate(17.35, 56.54)
    line = explain_runner_up(best, _candidate(16.94, 56.54, schedule="zb-h1"))
    assert "2.4% faster" in line and "same time" not in line and "simpler" in line
    tie = explain_runner_up(best, _candidate(17.35, 56.54, schedule="zb-h1"))
    assert "more memory" not in tie and "schedule zb-h1 vs 1f1b" in tie
    assert "more memory (57.00 vs 56.54 GiB)" in explain_runner_up(best, _candidate(17.35, 57.0, mbs=2))
