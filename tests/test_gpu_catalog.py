"""The GPU catalog: every figure sourced and every price dated, aliases, topology (NVLink/xGMI domain
versus host, PCIe-only cards) and the unknown-GPU error."""

from __future__ import annotations

import json
import re

from cli_inprocess import run_cli as in_process
import pytest

from trainplan.tools.hardware import catalog
from trainplan.tools.perf.collectives import group_layout
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.estimate import estimate
from trainplan.tools.engines import export
from trainplan.tools.config.layout import resolve_config

FIGURES = ("bf16_tflops", "fp8_tflops", "memory_gib", "hbm_bandwidth_gb_s", "intra_node_bw", "inter_node_bw",
           "gpus_per_node", "price", "sm_count", "gemm_efficiency", "attention_efficiency")
ISSUE_14_GPUS = ("mi300x", "mi325x", "mi355x", "gb200-nvl72", "gb300-nvl72", "h20", "l40s", "a10g", "l4",
                 "rtx-4090", "rtx-5090", "h100-pcie-80gb")


@pytest.mark.parametrize("name", catalog.gpu_names())
def test_every_figure_has_a_source_and_the_price_a_date(name):
    raw = json.loads((catalog.GPUS_DIR / f"{name}.json").read_text())
    gpu = catalog.load_gpu(name)
    for figure in FIGURES:
        if figure in raw:
            assert gpu.sources.get(figure, "").strip(), f"{name}: {figure} has no source"
    assert re.fullmatch(r"20\d\d-\d\d", gpu.price_date), f"{name}: price_date '{gpu.price_date}' is not YYYY-MM"
    if gpu.efficiency_basis == "assumed":
        for figure in ("gemm_efficiency", "attention_efficiency"):
            assert "assumed" in gpu.sources[figure].lower(), f"{name}: assumed {figure} must say so in its source"
    # Dense peaks: FP8 doubles BF16 on every tensor core generation listed here.
    if gpu.fp8_tflops is not None:
        assert gpu.fp8_tflops == pytest.approx(2 * gpu.bf16_tflops, rel=0.02)
    assert gpu.host_size <= gpu.gpus_per_node


def test_the_issue_14_gpus_are_in_the_catalog():
    assert set(ISSUE_14_GPUS) <= set(catalog.gpu_names())


def test_aliases_are_unique_and_resolve_to_their_entry():
    seen: dict[str, str] = {}
    for name in catalog.gpu_names():
        for alias in catalog.load_gpu(name).aliases:
            assert alias not in seen, f"alias {alias} of {name} is also {seen[alias]}'s"
            seen[alias] = name
            assert catalog.load_gpu(alias).name == name
    for spelling, name in (("MI300X", "mi300x"), ("GB200", "gb200-nvl72"), ("RTX 4090", "rtx-4090"),
                           ("H100 PCIe", "h100-pcie-80gb"), ("a100", "a100-sxm-80gb"), ("h100", "h100-sxm-80gb")):
        assert catalog.load_gpu(spelling).name == name


def test_an_unknown_gpu_is_not_in_the_catalog_with_close_names_and_the_file_route():
    with pytest.raises(InputError) as err:
        catalog.load_gpu("rtx-4080")
    message = str(err.value)
    assert "not in the catalog" in message and "rtx-4090" in message and "GPU JSON file" in message


def test_pcie_cards_have_no_nvlink_and_pcie_bandwidth():
    for name in ("l40s", "a10g", "l4", "rtx-4090", "rtx-5090", "h100-pcie-80gb"):
        gpu = catalog.load_gpu(name)
        assert gpu.interconnect == "pcie"
        assert gpu.intra_node_bw <= 64     # PCIe Gen5 x16 per direction; NVLink 4 is 450
    assert catalog.load_gpu("mi300x").interconnect == "xgmi"


def test_nvl72_domain_is_72_gpus_and_its_host_4():
    gb200 = catalog.load_gpu("gb200-nvl72")
    assert (gb200.gpus_per_node, gb200.host_size) == (72, 4)
    model = catalog.load_model("llama3-70b")
    cfg = resolve_config(model, 64, tp=64)
    assert group_layout(cfg, gb200.gpus_per_node)["tp"].num_nodes == 1   # TP64 stays on NVLink
    assert group_layout(cfg, 8)["tp"].num_nodes == 8                     # on 8-GPU boards it cannot


def _tp_comm(gpu: str) -> float:
    result = estimate("llama3-70b", gpu, 16, tp=16, gbs=16, zero=3, recompute="full")
    return result.time.breakdown["comm/tp"]


def test_tp16_rides_nvlink_on_gb200_but_the_network_on_b200():
    # Same NVLink 5 link speed; only the domain size differs (72 versus 8 GPUs). On B200 the TP16
    # ring crosses the network between the two boards, 8 NICs of 50 GB/s per board.
    assert _tp_comm("gb200-nvl72") < 0.7 * _tp_comm("b200")


def test_pcie_tensor_parallelism_costs_more_than_nvlink():
    def comm(gpu):
        return estimate("llama3-8b", gpu, 8, tp=8, gbs=8).time.breakdown["comm/tp"]
    assert comm("h100-pcie-80gb") > 4 * comm("h100-sxm-80gb")


def test_assumed_efficiencies_are_named_in_the_estimate():
    notes = estimate("llama3-8b", "mi300x", 8, gbs=64).notes
    assert any("assumed" in note and "mi300x" in note for note in notes)
    assert not any("assumed" in note for note in (estimate("llama3-8b", "h100", 8, gbs=64).notes or []))


def test_accelerate_export_counts_hosts_not_nvlink_domains():
    model = catalog.load_model("llama3-8b")
    cfg = resolve_config(model, 8, zero=3)
    result = export("accelerate", model, cfg, model_ref="llama3-8b",
                    gpus_per_node=catalog.load_gpu("gb200").host_size)
    assert "num_machines: 2" in result.content


def _cli(*args):
    return in_process(*args)


def test_catalog_json_lists_topology_and_basis():
    result = _cli("catalog", "--json")
    assert result.returncode == 0, result.stderr
    gpus = {g["name"]: g for g in json.loads(result.stdout)["gpus"]}
    assert gpus["gb200-nvl72"]["gpus_per_node"] == 72 and gpus["gb200-nvl72"]["gpus_per_host"] == 4
    assert gpus["l40s"]["interconnect"] == "pcie" and gpus["mi300x"]["efficiency_basis"] == "assumed"
    assert "mi300x" in gpus["mi300x"]["aliases"]


def test_cli_accepts_mi300x_and_names_an_unknown_gpu():
    ok = _cli("estimate", "--model", "llama3-8b", "--gpu", "mi300x", "--gpus", "8", "--gbs", "64", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["config"]["gpu"] == "mi300x"
    bad = _cli("estimate", "--model", "llama3-8b", "--gpu", "tpu-v5p", "--gpus", "8")
    assert bad.returncode == 2 and bad.stderr.startswith("error: gpu 'tpu-v5p' is not in the catalog")
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", catalog.gpu_names())
def test_a_plan_on_a_gpu_with_assumed_efficiencies_says_so(name):
    """The plan report renders the estimate's notes: each GPU marked efficiency_basis assumed is named as
    assumed in the Markdown, and a fitted one is not."""
    from trainplan.agent.report import LayoutChoice, ReportOrigin, build_report

    result = estimate("llama3-8b", name, 8, method="lora", gbs=8, seq=1024, timeline=True).model_dump(mode="json")
    request = {"model": "llama3-8b", "gpu": name, "gpus": 8, "tokens": None, "seq": 1024, "gbs": 8,
               "precision": "bf16", "price": None, "deadline_days": None, "budget_usd": None, "max_gpus": None,
               "gpus_per_node": None}
    report = build_report(ReportOrigin(backend="offline", request_text=f"LoRA on 8 {name}"),
                          LayoutChoice(request=request, recommended=result))
    said = f"{name}: GEMM and attention efficiencies are assumed" in report.to_markdown()
    assert said is (catalog.load_gpu(name).efficiency_basis == "assumed")


def test_plain_language_plans_name_the_new_gpus_and_their_assumed_efficiencies():
    from trainplan.agent.planner import plan

    report = plan("fine-tune Llama 3 8B with LoRA on 8 MI300Xs", backend="offline")
    assert report.recommended["config"]["gpu"] == "mi300x"
    assert "mi300x: GEMM and attention efficiencies are assumed" in report.to_markdown()


def test_blackwell_gpus_take_the_blackwell_fit_and_every_blackwell_case_is_fitted_or_held_out():
    """B200 and GB200 read the GEMM efficiency fitted on Blackwell runs, not Hopper's; every eval case on a
    Blackwell GPU is named by the table, as a fitted-on case of some constant or a held-out one of this."""
    from trainplan.evals.dataset import load_dataset
    from trainplan.tools.core.calibration import FAMILY_EFFICIENCY, fitted_case_ids

    fit = FAMILY_EFFICIENCY["blackwell"]["gemm_efficiency"]
    for name in ("b200", "gb200-nvl72"):
        gpu = catalog.load_gpu(name)
        assert gpu.efficiency_basis == "fitted" and gpu.gemm_efficiency == fit.value
    blackwell = {c.id for c in load_dataset().cases if c.kind == "prediction"
                 and catalog.load_gpu(str(c.kwargs()["gpu"])).architecture == "blackwell"}
    assert set(fit.fitted_on) <= blackwell and set(fit.held_out) <= blackwell
    assert blackwell <= set(fit.fitted_on) | set(fit.held_out) | fitted_case_ids()


def test_blackwell_gemm_efficiency_stays_below_the_best_shaped_matmul():
    """A fitted efficiency is a training-sustained share of the peak, so it sits below what the best-shaped
    matmul alone reaches on B200 SXM (ml-engineering MAMF table: 3432.5 of 4500 FP8 and 1745.0 of 2250 BF16
    TFLOP/s), as the Hopper fit sits below H100's (1402.6 of 1979 FP8, 794.5 of 989 BF16)."""
    from trainplan.tools.core.calibration import FAMILY_EFFICIENCY

    assert 0 < FAMILY_EFFICIENCY["blackwell"]["gemm_efficiency"].value < min(3432.5 / 4500, 1745.0 / 2250)
    assert FAMILY_EFFICIENCY["hopper"]["gemm_efficiency"].value < min(1402.6 / 1979, 794.5 / 989)
