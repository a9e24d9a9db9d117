"""Rank by evidence and say what the evals say (issue 20, items 1 and 7): departures from the layouts the
passing eval runs validate, the margin a layout outside them must clear, the experts' layouts against
the recommendation, and each plan's error band and known gaps, from evals/summary.json."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.evals.cases import DEFAULT_TOLERANCE, expert_vs_best
from trainplan.evals.dataset import load_dataset
from trainplan.evals.summary import build
from trainplan.tools.search.eval_summary import load_summary
from trainplan.tools.core.errors import InputError
from trainplan.tools.search.evidence import Shape, departures_of, region
from trainplan.tools.config.plan_defaults import EVIDENCE_MARGIN
from trainplan.tools.search.driver import search

DENSE_80 = Shape(layers=80, is_moe=False, seq=8192, gpus_per_node=8)
DSV3 = Shape(layers=61, is_moe=True, seq=4096, gpus_per_node=8)


def _layout(tp=1, pp=1, cp=1, ep=1, vpp=1, zero=1, schedule="1f1b") -> dict:
    return dict(tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, zero=zero, schedule=schedule)


def test_summary_is_not_stale():
    """evals/summary.json is what the prediction cases give now: rerun `python -m trainplan.evals.summary`
    after changing the model or the cases."""
    fresh, stored = build(), load_summary()
    assert [c["id"] for c in fresh["cases"]] == [c["id"] for c in stored["cases"]], "run python -m trainplan.evals.summary"
    for new, old in zip(fresh["cases"], stored["cases"]):
        assert new["layout"] == old["layout"] and new["passed"] == old["passed"], (new["id"], "stale summary.json")
        if new["error"] is not None:
            assert new["error"] == pytest.approx(old["error"], abs=2e-3), (new["id"], "stale summary.json")
        assert new["run"] == old["run"] and new["memory_gib"] == pytest.approx(old["memory_gib"], abs=0.15), new["id"]
        assert new["figures"].keys() == old["figures"].keys(), (new["id"], "stale summary.json")
        for name, figure in new["figures"].items():
            assert figure["published"] == old["figures"][name]["published"], (new["id"], name, "stale summary.json")
            assert figure["error"] == pytest.approx(old["figures"][name]["error"], abs=2e-3), (new["id"], name)
    assert fresh["gaps"] == stored["gaps"]


def test_the_issue_layouts_depart_and_the_published_ones_do_not():
    """The shapes the issue found the search recommending are outside the evidence; the published
    layouts of Llama 3 405B and DeepSeek-V3 are inside it."""
    assert len(departures_of(_layout(tp=2, pp=14, cp=4, schedule="dualpipe"), DENSE_80)) == 3
    assert any("vpp 20" in d for d in departures_of(_layout(tp=2, pp=4, cp=2, vpp=20, schedule="interleaved"), DENSE_80))
    assert any("CP64" in d for d in departures_of(_layout(tp=1, pp=1, cp=64), Shape(80, False, 131072, 8)))
    assert departures_of(_layout(tp=8, pp=16, vpp=8, zero=2, schedule="interleaved"), Shape(126, False, 8192, 8)) == []
    assert departures_of(_layout(pp=16, ep=64, schedule="dualpipe"), DSV3) == []
    assert any("EP128" in d for d in departures_of(_layout(pp=16, ep=128, schedule="dualpipe"), DSV3))
    assert any("PP2" in d for d in departures_of(_layout(pp=2, ep=8, schedule="dualpipe"), DSV3))


def test_a_failing_eval_case_validates_nothing():
    """Qwen3-30B-A3B on H100 at PP2 vpp 24 misses by 49%: its vpp does not widen the MoE region."""
    summary = load_summary()
    failing = {c["id"] for c in summary["cases"] if not c["passed"]}
    assert "mbridge-h100-qwen3-30b-a3b-fp8" in failing
    passing_moe_vpp = max(c["layout"]["vpp"] for c in summary["cases"] if c["passed"] and c["is_moe"])
    assert region().vpp_max[True] == passing_moe_vpp < 24


@pytest.fixture(scope="module")
def job_70b_by_margin() -> dict:
    job = dict(model="llama3-70b", gpu="h100", gpus=64, gbs=512, seq=8192, top_k=8)
    return {margin: search(**job, evidence_margin=margin) for margin in (0.0, EVIDENCE_MARGIN, 10.0)}


def test_a_layout_outside_the_evidence_must_clear_the_margin(job_70b_by_margin):
    """With no margin the search may lead with a layout outside the evidence; with the default one it
    leads with the best inside unless the other wins by 5%; the note states the margin and the reason."""
    default = job_70b_by_margin[EVIDENCE_MARGIN]
    first = default.candidates[0]
    assert default.evidence_margin == EVIDENCE_MARGIN
    outside = departures_of(first["config"], DENSE_80)
    if outside:   # kept only by beating every exactly scored layout inside the evidence by the margin
        inside = [c for c in default.candidates if not departures_of(c["config"], DENSE_80)]
        assert all(c["time"]["step_s"] >= (1 + EVIDENCE_MARGIN) * first["time"]["step_s"] for c in inside)
    strict = job_70b_by_margin[10.0].candidates[0]
    assert departures_of(strict["config"], DENSE_80) == []
    loose = job_70b_by_margin[0.0].candidates[0]
    assert loose["time"]["step_s"] <= strict["time"]["step_s"]
    if departures_of(loose["config"], DENSE_80):
        assert "must win by at least 1000%" in job_70b_by_margin[10.0].evidence


def test_evidence_margin_is_checked():
    with pytest.raises(InputError, match="evidence_margin"):
        search("llama3-8b", "h100", 8, evidence_margin=-0.1)


DATASET = load_dataset()
CASES = {case.id: case for case in DATASET.select(kind="planning")}


@pytest.mark.parametrize("case_id", ["megatron-gpt3-175b-plan", "deepseek-v3-plan", "nemotron-4-340b-plan",
                                     "llama3-405b-plan"])
def test_expert_layouts_rank_within_3_percent_of_the_recommendation(case_id):
    """GPT-3 175B's TP8 PP16 (1,024 A100), DeepSeek-V3's PP16 EP64 DualPipe (2,048 H800), Nemotron-4 340B's TP8
    PP12 (6,144 H100) and Llama 3 405B's TP8 PP16 (16,384 H100), each with its recipe (its selective recompute's
    modules too): at least 97% of the throughput of what the planner recommends for the same job, which keeps its
    memory headroom."""
    expert = expert_vs_best(DATASET.case(CASES[case_id].reference_case).kwargs())
    assert expert["vs_recommended"] >= 1 - DEFAULT_TOLERANCE["expert_vs_recommended"]


def test_the_405b_layout_is_the_recommendation_and_the_best_without_headroom_is_stated():
    """Llama 3 405B at 8K: with no headroom the search's best is TP4 PP16 CP2 (NVIDIA's 405B recipes run CP2 at 8K),
    5% faster than Meta's TP8 PP16 by its less exposed TP all-gathers, at 71.7 of 79.6 GiB: past the 10% every
    recommendation keeps free, so the planner recommends Meta's layout itself; the eval reports both."""
    expert = expert_vs_best(DATASET.case(CASES["llama3-405b-plan"].reference_case).kwargs())
    recommended, best = expert["recommended"], expert["best"]
    assert (recommended["tp"], recommended["pp"], recommended["cp"]) == (8, 16, 1)
    assert expert["vs_recommended"] == pytest.approx(1.0)
    assert 1 - DEFAULT_TOLERANCE["expert_vs_best"] <= expert["ratio"] < 0.97 and best["tp"] == 4 and best["cp"] == 2


def test_a_plan_states_its_error_band_and_the_known_gaps_of_its_model():
    """Qwen3-30B-A3B on H100: its eval rows miss by 30-49%; the plan says so, with the measured errors,
    and states the MoE band."""
    report = trainplan.plan("Qwen3-30B-A3B on 16 H100s for 100B tokens", backend="offline")
    assert report.error_band and "MoE" in report.error_band and "MAPE" in report.error_band
    row = next(c for c in load_summary()["cases"] if c["id"] == "mbridge-h100-qwen3-30b-a3b-fp8")
    measured = f"{row['error'] * 100:+.1f}%"   # the eval's own error, about -49%
    assert row["error"] < -0.3
    assert any("mbridge-h100-qwen3-30b-a3b-fp8" in g and measured in g for g in report.known_gaps)
    assert all(g in report.risks for g in report.known_gaps)
    assert report.evidence and f"at least {EVIDENCE_MARGIN:.0%}" in report.evidence[0]
    text = report.to_markdown()
    assert "## How far to trust it" in text and measured in text


def test_llama_70b_plans_carry_the_gpu_hours_gap():
    report = trainplan.plan("Llama 3 70B on 64 H100s for 1T tokens", backend="offline")
    assert any("llama31-70b-gpu-hours" in g and "gpu_hours" in g for g in report.known_gaps)
    assert "dense" in report.error_band and "GPU-hours" in report.error_band


def test_an_moe_fine_tune_says_no_fine_tuning_row_covers_its_experts():
    """The fine-tuning band is measured on dense models only: a LoRA plan of an MoE model adds the MoE band as the
    nearest measure of its expert layers; a dense LoRA plan does not."""
    from trainplan.agent.advice import error_band
    from trainplan.tools.search.eval_summary import load_summary

    assert not any(c["adapters"] and c["is_moe"] for c in load_summary()["cases"])
    moe = error_band("qwen3-30b-a3b", 2, False, adapters=True)
    assert moe.startswith("expected error for LoRA and QLoRA fine-tunes") and "nearest measure is the MoE band" in moe
    assert "nearest measure" not in error_band("llama3-8b", 2, False, adapters=True)
    assert "nearest measure" not in error_band("qwen3-30b-a3b", 16, False)
