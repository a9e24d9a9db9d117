"""The limits fine-tuners ask first, in plain language: the request's solve and the report's answer."""

from __future__ import annotations

import pytest

from trainplan import plan
from trainplan.agent.request import parse_partial
from trainplan.tools.hardware.catalog import load_gpu
from trainplan.tools.search.limits import solve


@pytest.mark.parametrize(("text", "limit"), [
    ("longest context I can QLoRA Llama 3.1 8B on a 24 GB 4090", "seq"),
    ("what is the maximum sequence length for LoRA of Llama 3 8B on one H100", "seq"),
    ("largest micro-batch for LoRA of Llama 3 8B on one H100 at seq 4096", "mbs"),
    ("biggest batch size that fits for QLoRA of Llama 3 8B on 2 RTX 4090s", "mbs"),
    ("cheapest GPU to QLoRA Llama 3 70B", "gpu"),
    ("smallest GPU that fits a LoRA of Llama 3 8B", "gpu"),
])
def test_a_limit_is_read_from_the_request(text, limit):
    request = parse_partial(text)
    assert request.solve == limit
    assert not request.unparsed


def test_cheapest_without_a_gpu_word_stays_the_objective():
    request = parse_partial("the cheapest plan for Llama 3 8B on 8 H100s")
    assert request.solve is None and request.objective == "cost"


@pytest.mark.parametrize(("text", "gpu", "gpus"), [
    ("QLoRA Llama 3 8B on a 24 GB 4090", "rtx-4090", 1),
    ("QLoRA Llama 3 8B on one 4090", "rtx-4090", 1),
    ("QLoRA Llama 3 8B on two 4090s", "rtx-4090", 2),
    ("QLoRA Llama 3 8B on a 4090 with TRL", "rtx-4090", 1),   # an article before the card is one card
    ("LoRA Llama 3 8B on an H100", "h100-sxm-80gb", 1),
    ("QLoRA Llama 3 8B on my 24 GB 3090", "rtx-3090", 1),
    ("Llama 3 8B on a H100 node for 10B tokens", "h100-sxm-80gb", 8),   # one node of them
    ("Llama 3 8B on a cluster of H100s for 1T tokens", "h100-sxm-80gb", None),
])
def test_a_bare_card_number_after_an_article_is_the_card(text, gpu, gpus):
    request = parse_partial(text)
    assert request.gpu == gpu and request.gpus == gpus and not request.unparsed


def test_a_number_of_tokens_after_an_article_stays_a_number():
    assert parse_partial("a 4090-token sequence of Llama 3 8B on 8 H100s").gpu == "h100-sxm-80gb"


def test_the_report_answers_the_longest_context():
    report = plan("longest context I can QLoRA Llama 3.1 8B on a 24 GB 4090", backend="offline")
    limit = report.limit
    assert limit["solve"] == "seq" and limit["gpu"] == "rtx-4090" and limit["gpus"] == 1
    config = report.recommended["config"]
    same = solve("seq", "llama3-8b", "rtx-4090", 1, method="qlora", lora_rank=config["lora_rank"],
                 attention=config["attention"], fused_kernels=config["fused_kernels"], recompute="full",
                 loss_kernel=config["loss_kernel"], fp32_norms=config["fp32_norms"], zero=config["zero"])
    assert limit["seq"] == same["seq"]
    assert limit["memory_gib_at_limit"] <= load_gpu("rtx-4090").memory_gib < limit["memory_gib_one_past"]
    assert "longest sequence that fits" in report.to_markdown()
    # the same limit keeping the plan's 10% free, and both in the short report's first lines
    kept = report.limit["kept_free"]
    capacity = load_gpu("rtx-4090").memory_gib
    assert kept["headroom_gib"] == pytest.approx(0.1 * capacity) and 0 < kept["seq"] < limit["seq"]
    assert kept["seq"] == solve("seq", "llama3-8b", "rtx-4090", 1, headroom_gib=kept["headroom_gib"], method="qlora",
                                lora_rank=config["lora_rank"], attention=config["attention"],
                                fused_kernels=config["fused_kernels"], recompute="full",
                                loss_kernel=config["loss_kernel"], fp32_norms=config["fp32_norms"],
                                zero=config["zero"])["seq"]
    head = report.to_summary().split("**TP", 1)[0]
    assert f"longest sequence that fits: {limit['seq']}" in head and f"{kept['seq']} keeping 10% of memory free" in head


def test_the_cheapest_gpu_is_where_the_plan_runs():
    report = plan("cheapest GPU to QLoRA Llama 3 70B", backend="offline")
    assert report.limit["solve"] == "gpu"
    assert any(a.startswith("GPU not given: the cheapest catalog GPU") for a in report.assumptions)
    chosen = report.recommended["config"]["gpu"]
    assert chosen in {row["gpu"] for row in report.limit["fits_on"]}


def test_the_gpus_that_fit_are_those_the_gpu_was_chosen_from():
    """The limit section lists the catalog GPUs with the leanest layout, the one the GPU was chosen with, not the
    recommended layout (recompute none, micro-batch 2 at 8K fit only the 180-290 GB parts: 6 rows where the choice
    saw 14)."""
    import re

    report = plan("what's the cheapest GPU to LoRA Qwen2.5 7B at 8k context", backend="offline")
    chosen = next(a for a in report.assumptions if a.startswith("GPU not given"))
    assert len(report.limit["fits_on"]) == int(re.search(r"(\d+) fit\)", chosen).group(1))
    assert report.limit["layout"].startswith("the leanest layout") and "recompute full" in report.limit["layout"]
    assert {"a100-sxm-40gb", "l40s"} <= {row["gpu"] for row in report.limit["fits_on"]}
