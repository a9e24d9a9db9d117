"""The evals: every reference run loads with a source for every figure; the runner's JSON shape;
prediction and claims cases run (fast); the planning scorer with a stand-in planner; the CLI.

Accuracy thresholds are not asserted here (the performance model is still being calibrated):
the eval reports them. These tests check structure and that every error is a finite number.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cli_inprocess import run_cli as in_process
import pytest
import yaml
from typer.testing import CliRunner

import trainplan
from trainplan.cli import app
from trainplan.evals.cases import CLAIM_CHECKS, QUANTITIES, STRUCTURE_CHECKS
from trainplan.evals.dataset import RUNS_DIR, Dataset, calibration_unknown_cases, load_dataset
from trainplan.evals.report import render_markdown, text_plot
from trainplan.evals.runner import crashed, finite_errors, run_eval

PUBLIC_RUNS = Path(__file__).resolve().parents[1] / "evals" / "references" / "public-runs.yaml"
"""The project's copy of the published-runs reference (each figure with its source inside it)."""
CASE_KEYS = {"id", "kind", "predicted", "published", "error", "pass", "source"}


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return load_dataset()


@pytest.fixture(scope="module")
def prediction_report(dataset: Dataset) -> dict:
    return run_eval(dataset, kind="prediction")


def test_every_run_file_loads_with_unique_ids(dataset: Dataset) -> None:
    files = sorted(RUNS_DIR.glob("*.yaml"))
    assert [run.id for run in dataset.runs] == [p.stem for p in files]
    ids = [c.id for c in dataset.cases]
    assert len(ids) == len(set(ids))
    assert {c.kind for c in dataset.cases} == {"prediction", "planning", "claims"}


def test_required_runs_are_present(dataset: Dataset) -> None:
    runs = {run.id for run in dataset.runs}
    assert {"llama3-405b", "deepseek-v3", "megatron-sc21", "megatron-gpt3-175b", "llama31-8b",
            "llama31-70b", "lesson-claims"} <= runs
    sc21 = [c for c in dataset.cases if c.run == "megatron-sc21"]
    assert len(sc21) == 10
    table4 = [c for c in dataset.cases if c.id.startswith("llama3-405b-") and "tflops_per_gpu" in c.published]
    assert sorted(c.published["tflops_per_gpu"].value for c in table4) == [380, 400, 430]


def test_every_figure_has_a_source(dataset: Dataset) -> None:
    for case in dataset.cases:
        for name, figure in case.published.items():
            assert figure.source.strip(), f"{case.id}.{name}"
            assert dataset.citation(case, figure.source), f"{case.id}.{name}: no full citation"
        for name, item in {**case.request, **case.args}.items():
            assert item.source or item.assumed, f"{case.id}.{name} has neither a source nor an assumption"
        if case.kind == "prediction":
            assert case.published, f"{case.id} compares nothing"
            assert set(case.published) <= set(QUANTITIES)
        if case.kind == "claims":
            assert case.check in CLAIM_CHECKS
        assert set(case.structure) <= set(STRUCTURE_CHECKS)


def test_raw_yaml_figures_all_carry_source(dataset: Dataset) -> None:
    """Independent of the pydantic models: every {value: ...} mapping in the files has a source or assumed."""
    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            if "value" in node:
                assert node.get("source") or node.get("assumed"), where
            for key, child in node.items():
                walk(child, f"{where}.{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{where}[{i}]")

    for path in RUNS_DIR.glob("*.yaml"):
        walk(yaml.safe_load(path.read_text()), path.stem)


def test_citations_are_copied_from_public_runs(dataset: Dataset) -> None:
    reference = yaml.safe_load(PUBLIC_RUNS.read_text())
    cites = {key: " ".join(value["cite"].split()) for key, value in reference["sources"].items()}
    run_ids = {run["id"] for run in reference["runs"]}
    for run in dataset.runs:
        if run.public_runs_id:
            assert run.public_runs_id in run_ids
        for key, text in run.sources.items():
            if key in cites:
                assert " ".join(text.split()) == cites[key], f"{run.id}: citation '{key}' differs from public-runs.yaml"


def test_eval_model_configs_load() -> None:
    from trainplan.tools.hardware.catalog import load_model

    configs = sorted((RUNS_DIR / "models").glob("*.json"))
    models = [str(c.kwargs().get("model", "")) for c in load_dataset().cases]
    referenced = {Path(m).name for m in models if m.endswith(".json")}
    assert {p.name for p in configs} == referenced, "every model config is used by a case, and every case's exists"
    for path in configs:
        spec = load_model(str(path))
        if path.name.startswith("megatron-"):     # GPT-2-style Megatron configs: vocab padded to 51200, seq 2048
            assert spec.vocab_size == 51200 and spec.max_seq_len == 2048


def test_prediction_cases_run_with_finite_errors(prediction_report: dict) -> None:
    assert not crashed(prediction_report), [c["message"] for c in prediction_report["cases"] if c["message"]]
    assert finite_errors(prediction_report)
    for case in prediction_report["cases"]:
        assert CASE_KEYS <= set(case)
        assert case["kind"] == "prediction" and case["status"] == "ok"
        assert set(case["error"]) == set(case["published"]) == set(case["source"])
        assert isinstance(case["pass"], bool)
        for quantity, published in case["published"].items():
            predicted = case["predicted"][quantity]
            assert math.isfinite(predicted) and predicted > 0
            assert case["error"][quantity] == pytest.approx(predicted / published - 1)


def test_summary_shape(prediction_report: dict) -> None:
    summary = prediction_report["summary"]
    for key in ("cases", "pass", "fail", "skipped", "errors", "by_kind", "mape", "mape_overall",
                "mape_overall_held_out", "mape_overall_quantities", "calibration_cases", "tolerances"):
        assert key in summary
    assert summary["cases"] == len(prediction_report["cases"])
    for quantity, entry in summary["mape"].items():
        assert quantity in QUANTITIES
        assert entry["n"] >= entry["n_held_out"]
        assert math.isfinite(entry["mape"]) and entry["mape"] >= 0
    assert {"tflops_per_gpu", "hardware_tflops_per_gpu", "gpu_hours", "step_s"} <= set(summary["mape"])


def test_held_out_mape_leaves_out_calibration_cases(dataset: Dataset) -> None:
    from trainplan.evals.cases import CaseResult
    from trainplan.evals.runner import summarise

    results = [CaseResult(id="a", kind="prediction", run="r", error={"mfu": 0.1, "step_s": 0.2},
                          checks={"mfu": True, "step_s": True}),
               CaseResult(id="b", kind="prediction", run="r", error={"mfu": -0.3, "step_s": -0.4},
                          checks={"mfu": False, "step_s": False}, used_for_calibration=True)]
    summary = summarise(results)
    assert summary["mape"]["mfu"]["mape"] == pytest.approx(0.2)
    assert summary["mape"]["mfu"]["mape_held_out"] == pytest.approx(0.1)
    assert summary["mape_overall"] == pytest.approx(0.3)          # step_s only: mfu restates it
    assert summary["mape_overall_held_out"] == pytest.approx(0.2)
    assert summary["calibration_cases"] == ["b"]
    assert summary["pass"] == 1 and summary["fail"] == 1


def test_dense_and_moe_held_out_figures_pool_each_family_once(prediction_report: dict, dataset: Dataset) -> None:
    """Issue 10 sets one target for dense models and one for MoE: each pooled figure takes one
    throughput error per held-out pre-training case of its family, and the two families split the cases
    (fine-tuning cases have their own section)."""
    from trainplan.evals.runner import THROUGHPUT_QUANTITIES, is_fine_tuning
    from trainplan.tools.hardware.catalog import load_model

    summary = prediction_report["summary"]
    dense, moe = summary["dense_throughput_held_out"], summary["moe_throughput_held_out"]
    assert dense["n"] > 0 and moe["n"] > 0
    expected = {True: [], False: []}
    for case in prediction_report["cases"]:
        quantity = next((q for q in THROUGHPUT_QUANTITIES if q in case["error"]), None)
        if case["status"] != "ok" or quantity is None or case["id"] in summary["calibration_cases"]:
            continue
        if is_fine_tuning(dataset, case["id"]):
            continue
        is_moe = load_model(str(dataset.case(case["id"]).kwargs()["model"])).is_moe
        expected[is_moe].append(abs(case["error"][quantity]))
    for pooled, errors in ((dense, expected[False]), (moe, expected[True])):
        assert pooled["n"] == len(errors)
        assert pooled["mape"] == pytest.approx(sum(errors) / len(errors))
    assert "MoE models, held out" in render_markdown(prediction_report)


def test_calibration_table_names_only_real_cases_and_marks_them(dataset: Dataset) -> None:
    """The calibration table is the one place that says which cases a constant was fitted on."""
    from trainplan.tools.core.calibration import constants, fitted_case_ids

    assert calibration_unknown_cases(dataset) == []
    fitted = fitted_case_ids()
    assert fitted, "the table fits its constants on named cases"
    from trainplan.evals.vtrain import CASE_GROUPS

    assert {c.id for c in dataset.cases if c.used_for_calibration} == fitted - set(CASE_GROUPS)
    for name, fit in constants().items():
        assert not set(fit.fitted_on) & set(fit.held_out), f"{name} holds out a case it was fitted on"


def test_a_run_file_cannot_mark_its_own_calibration(tmp_path: Path) -> None:
    from trainplan.evals.dataset import load_run

    text = (RUNS_DIR / "megatron-gpt3-175b.yaml").read_text().replace(
        "  - id: megatron-gpt3-175b\n", "  - id: megatron-gpt3-175b\n    used_for_calibration: true\n", 1)
    (tmp_path / "megatron-gpt3-175b.yaml").write_text(text)
    with pytest.raises(ValueError, match="calibration table"):
        load_run(tmp_path / "megatron-gpt3-175b.yaml")


def test_claims_cases_pass(dataset: Dataset) -> None:
    report = run_eval(dataset, kind="claims")
    assert not crashed(report)
    assert finite_errors(report)
    assert [c["pass"] for c in report["cases"]] == [True] * len(report["cases"])
    by_id = {c["id"]: c for c in report["cases"]}
    states = by_id["lesson-7b-model-states"]["predicted"]
    assert states["tool_megatron_gb"] == pytest.approx(126)      # 2 + 4 + 12 = 18 B/param
    assert states["tool_bf16_grads_gb"] == pytest.approx(112)    # 2 + 2 + 12 = 16 B/param
    assert by_id["lesson-405b-min-gpus"]["predicted"]["gpus_exact"] == pytest.approx(60.75)
    fsdp = by_id["lesson-fsdp-70b"]["predicted"]
    assert fsdp["tool_total_gb"] > fsdp["tool_model_states_gb"] > fsdp["per_gpu_gb"]


def _reference_planner(dataset: Dataset):
    """A stand-in planner that answers with the published layout (so the ratio is exactly 1)."""
    def plan(**request) -> dict:
        case = next(c for c in dataset.cases if c.kind == "planning" and c.kwargs()["model"] == request["model"]
                    and c.kwargs()["gpus"] == request["gpus"])
        layout = dataset.case(case.reference_case).kwargs() if case.reference_case else request
        return {"candidates": [trainplan.estimate(**{**layout, **{k: v for k, v in request.items()
                                                                 if k in ("tokens", "price")}})]}
    return plan


def test_planning_scorer_with_a_stand_in_planner(dataset: Dataset) -> None:
    report = run_eval(dataset, case_id="megatron-gpt3-175b-plan", planner=_reference_planner(dataset))
    case = report["cases"][0]
    assert case["status"] == "ok", case["message"]
    assert CASE_KEYS <= set(case)
    assert case["predicted"]["throughput_ratio"] == pytest.approx(1.0)
    assert case["checks"]["throughput_ratio"] and case["checks"]["fits"]
    assert case["checks"]["structure.tp_within_node"] and case["checks"]["structure.uses_pp"]
    assert case["predicted"]["grounded_share"] is None
    assert "## Planning" in render_markdown(report)


def test_planning_plan_without_cost_is_re_estimated(dataset: Dataset) -> None:
    def plan(**request) -> dict:
        layout = {k: v for k, v in dataset.case("llama3-405b-8k-16384gpu").kwargs().items() if k != "tokens"}
        return trainplan.estimate(**layout)   # no tokens: no "training" block

    case = run_eval(dataset, case_id="llama3-405b-plan", planner=plan)["cases"][0]
    assert case["status"] == "ok", case["message"]
    reference = trainplan.estimate(**dataset.case("llama3-405b-gpu-hours").kwargs())
    assert case["predicted"]["gpu_hours"] == pytest.approx(reference.training.gpu_hours)
    assert math.isfinite(case["error"]["gpu_hours"])


def test_planning_grounding_share_is_scored(dataset: Dataset) -> None:
    def plan(**request) -> dict:
        best = trainplan.estimate(**dataset.case("megatron-gpt3-175b").kwargs())
        return {"recommended": best, "grounding": {"share_grounded": 0.9}}

    case = run_eval(dataset, case_id="megatron-gpt3-175b-plan", planner=plan)["cases"][0]
    assert case["predicted"]["grounded_share"] == 0.9
    assert case["checks"]["grounded_share"] is False and case["pass"] is False


@pytest.mark.slow
def test_full_planning_eval(dataset: Dataset, request: pytest.FixtureRequest) -> None:
    """The real planner on every planning case: opt in with `pytest -m slow`."""
    markexpr = request.config.getoption("markexpr") or ""
    if "slow" not in markexpr or "not slow" in markexpr:
        pytest.skip("slow: run with pytest -m slow")
    report = run_eval(dataset, kind="planning")
    assert not crashed(report), [c["message"] for c in report["cases"]]
    assert finite_errors(report)


def test_text_plot_marks_every_figure(prediction_report: dict) -> None:
    lines = text_plot(prediction_report["cases"])
    figures = sum(len(c["error"]) for c in prediction_report["cases"])
    assert len(lines) == figures + 3


runner = CliRunner()


def test_cli_json_shape() -> None:
    result = runner.invoke(app, ["eval", "--kind", "claims", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report) == {"cases", "summary"}
    assert all(CASE_KEYS <= set(c) for c in report["cases"])


def test_cli_markdown_and_out(tmp_path: Path) -> None:
    out = tmp_path / "eval.md"
    result = runner.invoke(app, ["eval", "--case", "megatron-gpt3-175b", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("# trainplan eval")
    assert "| megatron-gpt3-175b | step_s |" in text and "MAPE" in text and "```" in text


def test_cli_unknown_case_is_one_error_line_and_exit_2() -> None:
    result = in_process("eval", "--case", "megatron-gpt3-175")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown case 'megatron-gpt3-175': did you mean")
    assert "Traceback" not in result.stderr


def test_cli_exits_non_zero_only_on_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setitem(CLAIM_CHECKS, "pipeline_bubble", boom)
    result = runner.invoke(app, ["eval", "--kind", "claims", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    crashed_cases = [c for c in report["cases"] if c["status"] == "error"]
    assert crashed_cases and all(c["message"] == "RuntimeError: boom" for c in crashed_cases)


def test_expert_layout_is_ranked_against_the_best_with_its_own_recipe(dataset: Dataset) -> None:
    """Issue 11: the published layout against the search's best for the same job, with every knob the
    run set but the parallel sizes and micro-batch pinned (Megatron-LM's GPT-3 175B: eager attention,
    no sequence parallelism, ZeRO-0, full recompute, 1F1B)."""
    from trainplan.evals.cases import expert_vs_best

    reference = dataset.case("megatron-gpt3-175b").kwargs()
    expert = expert_vs_best(reference)
    best = expert["best"]
    for knob in ("attention", "sequence_parallel", "zero", "recompute", "schedule", "precision"):
        assert best[knob] == reference[knob], knob
    assert expert["fits"]
    assert 0.9 <= expert["ratio"] <= 1.0 + 1e-9     # the published layout is in the space the best comes from
    assert (expert["rank"] == 1) == (expert["ratio"] >= 1 - 1e-9)
