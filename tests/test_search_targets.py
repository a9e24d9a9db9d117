"""Issue 11's targets for the search, on the evals' own cases: an expert's published layout ranks within
10% of the best layout the search finds for its job, and a DeepSeek-V3 plan in FP8 lands within 25% of
its published GPU-hours. The requests and the published figures come from evals/runs."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.evals.dataset import Dataset, load_dataset
from trainplan.tools.search import search


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return load_dataset()


def _case(dataset: Dataset, case_id: str):
    return next(c for c in dataset.cases if c.id == case_id)


def test_meta_llama3_405b_layout_ranks_within_10_percent_of_the_best(dataset):
    """Meta's TP8 PP16 layout (Llama 3 paper Table 4) against the best the search finds for the same job."""
    published = _case(dataset, "llama3-405b-8k-16384gpu").kwargs()
    plan = _case(dataset, "llama3-405b-plan").kwargs()
    job = {k: plan[k] for k in ("model", "gpu", "gpus", "seq", "gbs")}
    best = search(**job, top_k=1)["candidates"][0]
    theirs = trainplan.estimate(**published).model_dump(mode="json")
    assert theirs["time"]["tokens_per_s"] >= 0.9 * best["time"]["tokens_per_s"]


def test_deepseek_v3_layout_ranks_within_10_percent_of_the_best(dataset):
    """DeepSeek's TP1 PP16 EP64 DualPipe with its FP8 recipe, against the search's best with the same recipe."""
    published = _case(dataset, "deepseek-v3-pretrain").kwargs()
    recipe = {k: published[k] for k in ("fp8_activations", "bf16_moments", "recompute_modules") if k in published}
    job = {k: published[k] for k in ("model", "gpu", "gpus", "seq", "gbs", "precision")}
    best = search(**job, **recipe, top_k=1)["candidates"][0]
    theirs = trainplan.estimate(**published).model_dump(mode="json")
    assert theirs["time"]["tokens_per_s"] >= 0.9 * best["time"]["tokens_per_s"]


def test_deepseek_v3_fp8_plan_is_within_25_percent_of_the_published_gpu_hours(dataset):
    case = _case(dataset, "deepseek-v3-plan")
    request = case.kwargs()
    report = trainplan.plan(backend="offline", **request)
    published = case.published["gpu_hours"].value
    hours = report.recommended["training"]["gpu_hours"]
    assert report.recommended["config"]["precision"] == "fp8"
    assert abs(hours / published - 1) <= 0.25, hours
