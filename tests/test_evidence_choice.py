"""The evidence rule (tools/search/evidence.py) beyond one search (issue 20, item 1): a deadline's GPU count
(agent/sizing.py _inside_evidence) and the engine a plan is carried by (agent/offline_plan.py _engine_evidence).
A layout outside the evals' evidence leads only by beating the best one inside it by EVIDENCE_MARGIN, and the
plan states the trade either way."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import trainplan
from trainplan.agent import advice, tradeoffs
from trainplan.agent.offline_plan import _engine_evidence
from trainplan.agent.sizing import _inside_evidence
from trainplan.tools.config.plan_defaults import EVIDENCE_MARGIN

JOB = {"model": "llama3-70b", "gpu": "h100-sxm-80gb", "seq": 8192, "gbs": 512, "tokens": 2e12}


def _result(gpus: int, cost: float, **layout) -> dict:
    result = trainplan.estimate(model="llama3-70b", gpu="h100", gpus=gpus, seq=8192, gbs=512, tokens=2e12,
                                **layout).model_dump(mode="json")
    result["training"] = {**result["training"], "cost_usd": cost, "days": 10.0}
    return result


OUTSIDE = dict(tp=4, pp=4, vpp=20, zero=1, mbs=1, recompute="selective", schedule="interleaved")
INSIDE = dict(tp=4, pp=1, zero=3, mbs=1, recompute="none")


def _table(inside_cost: float) -> tradeoffs.Table:
    inside = _result(2048, inside_cost, **INSIDE)
    return tradeoffs.Table(JOB, lambda job, gpus: inside if gpus == 2048 else None)


def test_the_layouts_the_tests_use_are_on_either_side_of_the_evidence():
    assert advice.departures("llama3-70b", _result(1024, 1.0, **OUTSIDE)["config"])
    assert advice.departures("llama3-70b", _result(2048, 1.0, **INSIDE)["config"]) == []


@pytest.mark.parametrize("inside_cost, kept", [(1.10e6, True), (1.02e6, False)])
def test_a_deadline_count_outside_the_evidence_must_beat_the_cheapest_inside_by_the_margin(inside_cost, kept):
    chosen = (1024, _result(1024, 1.0e6, **OUTSIDE))
    (gpus, best), note = _inside_evidence(_table(inside_cost), JOB, chosen, days=27.0, top=16384)
    gain = inside_cost / 1.0e6 - 1
    assert "vpp 20" in note and f"{gain:.1%}" in note and "2,048 GPUs with TP4 PP1 DP512" in note
    if kept:
        assert gpus == 1024 and best is chosen[1] and f"over the {EVIDENCE_MARGIN:.0%} margin" in note
    else:
        assert gpus == 2048 and best["config"]["pp"] == 1 and "so the plan takes 2,048 GPUs" in note


def test_a_deadline_count_inside_the_evidence_or_with_nothing_inside_to_compare():
    inside = (2048, _result(2048, 1.0e6, **INSIDE))
    assert _inside_evidence(_table(1.0e6), JOB, inside, days=27.0, top=16384) == (inside, None)
    chosen = (1024, _result(1024, 1.0e6, **OUTSIDE))
    late = _table(1.0e6)
    late.best(2048)["training"]["days"] = 28.0   # misses the date: nothing inside the evidence meets it
    kept, note = _inside_evidence(late, JOB, chosen, days=27.0, top=16384)
    assert kept == chosen and "no standard count up to 4,096 GPUs finishes by then inside it" in note


def _draft(cost: float, layout: dict) -> SimpleNamespace:
    return SimpleNamespace(job=JOB, recommended=_result(1024, cost, **layout), cost=cost)


@pytest.mark.parametrize("outside_cost, carrier", [(0.99e6, "megatron"), (0.90e6, "torchtitan")])
def test_an_engine_whose_best_is_outside_the_evidence_must_win_by_the_margin(outside_cost, carrier):
    fitting = {"megatron": _draft(1.0e6, INSIDE), "torchtitan": _draft(outside_cost, OUTSIDE)}
    engine, why = _engine_evidence(fitting, "torchtitan", lambda draft: draft.cost)
    assert engine == carrier and "torchtitan's best layout is outside the evals' evidence (vpp 20" in why
    assert f"{1.0e6 / outside_cost - 1:.1%}" in why
    assert _engine_evidence(fitting, "megatron", lambda draft: draft.cost) is None   # the winner is inside

