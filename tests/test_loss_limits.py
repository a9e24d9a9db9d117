"""The loss kernel's logits (tools/perf/loss.py) and the limits solved over the memory model (tools/search/limits.py)."""

from __future__ import annotations

import json

from cli_inprocess import run_cli as in_process
import pytest

import trainplan
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.engines import engine_knobs
from trainplan.tools.search.limits import solve
from trainplan.tools.perf.loss import LOSS_BYTES
from trainplan.tools.core.enums import LossKernel

GIB = 2**30
QLORA_4090 = dict(model="llama3-8b", gpu="rtx-4090", gpus=1, method="qlora", lora_rank=32, recompute="full",
                  attention="flash2", zero=0, fused_kernels=False)


def test_materialised_logits_hold_eight_bytes_per_token_and_vocab_entry_more_than_fused():
    seq, vocab = 4096, load_model("llama3-8b").vocab_size
    fused = trainplan.estimate(**QLORA_4090, seq=seq, loss_kernel="fused").memory_gib.total
    materialised = trainplan.estimate(**QLORA_4090, seq=seq, loss_kernel="materialised").memory_gib.total
    chunked = trainplan.estimate(**QLORA_4090, seq=seq, loss_kernel="chunked").memory_gib.total
    fused_linear = trainplan.estimate(**QLORA_4090, seq=seq, loss_kernel="fused_linear").memory_gib.total
    per_byte = seq * vocab / GIB * (1 + 0.05)   # the allocator reserve is 5% of the activations
    assert materialised - fused == pytest.approx(8 * per_byte, rel=1e-6)
    assert chunked - fused == pytest.approx(2.5 * per_byte, rel=1e-6)
    assert fused - fused_linear == pytest.approx(4 * per_byte, rel=1e-6)
    assert LOSS_BYTES[LossKernel.materialised] == 12.0


def test_the_default_follows_the_method_and_keeps_pre_training_as_it_was():
    full = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=8, seq=8192)
    assert full.config.loss_kernel is LossKernel.fused
    assert full.memory_gib.total == trainplan.estimate(model="llama3-8b", gpu="h100", gpus=8, seq=8192,
                                                       loss_kernel="fused").memory_gib.total
    lora = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=1, method="lora", seq=2048)
    assert lora.config.loss_kernel is LossKernel.materialised


def test_engines_decide_the_loss_kernel():
    assert engine_knobs("megatron")["loss_kernel"] == "fused"
    assert {engine_knobs(e)["loss_kernel"] for e in ("trl", "axolotl", "llamafactory", "torchtitan")} == {"materialised"}


def test_an_unknown_loss_kernel_is_one_clear_error():
    with pytest.raises(InputError, match="loss_kernel='softmax' is not one of"):
        trainplan.estimate(model="llama3-8b", gpu="h100", gpus=1, loss_kernel="softmax")


@pytest.mark.parametrize("target", ["seq", "mbs"])
def test_the_limit_fits_and_one_past_it_does_not(target):
    fields = {k: v for k, v in QLORA_4090.items() if k not in ("model", "gpu", "gpus")}
    if target == "mbs":
        fields["seq"] = 2048
    answer = solve(target, "llama3-8b", "rtx-4090", 1, **fields)
    capacity = load_gpu("rtx-4090").memory_gib
    assert answer[target] >= 1
    assert answer["memory_gib_at_limit"] <= capacity < answer["memory_gib_one_past"]
    at = trainplan.estimate(**{**QLORA_4090, target: answer[target], **({"seq": 2048} if target == "mbs" else {})})
    assert at.fits and at.memory_gib.total == pytest.approx(answer["memory_gib_at_limit"])


def test_a_longer_context_fits_with_a_fused_linear_loss():
    base = {k: v for k, v in QLORA_4090.items() if k not in ("model", "gpu", "gpus")}
    hf = solve("seq", "llama3-8b", "rtx-4090", 1, **base)["seq"]
    fused = solve("seq", "llama3-8b", "rtx-4090", 1, **base, loss_kernel="fused_linear")["seq"]
    assert fused > 2 * hf


def test_the_gpus_that_fit_are_ranked_per_token_and_the_smallest_and_lowest_price_are_named():
    answer = trainplan.limits("gpu", model="llama3-8b", gpus=1, method="qlora", seq=4096, recompute="full")
    rows = answer["fits_on"]
    per_token = [row["usd_per_million_tokens"] for row in rows]
    assert per_token == sorted(per_token)
    for row in rows:   # dollars per million tokens = price per hour / tokens per hour, each row's own figures
        assert row["usd_per_million_tokens"] == pytest.approx(row["price_per_hour"] / (row["tokens_per_s"] * 3600) * 1e6,
                                                              rel=1e-3)
    assert answer["smallest"] == min(rows, key=lambda r: r["capacity_gib"])["gpu"]
    assert answer["lowest_price"] == min(rows, key=lambda r: r["price_per_hour"])["gpu"]
    assert all(row["memory_gib"] <= row["capacity_gib"] for row in rows)
    # full fine-tuning of a 70B model fits on no single catalog card of under 1 TB
    assert "h100-sxm-80gb" not in {r["gpu"] for r in trainplan.limits("gpu", model="llama3-70b", gpus=1)["fits_on"]}


@pytest.mark.parametrize(("assumed", "fitted", "chosen"), [(0.90, 1.0, "assumed-gpu"), (0.97, 1.0, "fitted-gpu"),
                                                          (1.10, 1.0, "fitted-gpu")])
def test_the_cheapest_gpu_is_ranked_by_evidence(assumed, fitted, chosen):
    """A GPU whose efficiencies no public run fitted is named cheapest only when it beats the cheapest fitted GPU per
    token by more than the evidence margin (5%), and the answer says why."""
    from trainplan.tools.search.limits import _cheapest_by_evidence

    rows = sorted([{"gpu": "assumed-gpu", "usd_per_million_tokens": assumed, "efficiency_basis": "assumed"},
                   {"gpu": "fitted-gpu", "usd_per_million_tokens": fitted, "efficiency_basis": "fitted"}],
                  key=lambda r: r["usd_per_million_tokens"])
    name, why = _cheapest_by_evidence(rows)
    assert name == chosen
    assert ("assumed" in why) == (assumed < fitted)


def test_the_cheapest_gpu_costs_the_least_per_token_not_per_hour():
    """QLoRA of a 70B model: the lowest price per hour (h20) is not the cheapest per token."""
    answer = trainplan.limits("gpu", model="llama3-70b", gpus=1, method="qlora", seq=2048, recompute="full", mbs=1)
    cheapest = next(r for r in answer["fits_on"] if r["gpu"] == answer["cheapest"])
    lowest = next(r for r in answer["fits_on"] if r["gpu"] == answer["lowest_price"])
    assert lowest["price_per_hour"] < cheapest["price_per_hour"]
    assert cheapest["usd_per_million_tokens"] < lowest["usd_per_million_tokens"]


def test_nothing_fits_says_so():
    answer = solve("seq", "llama3-70b", "rtx-4090", 1)
    assert answer["seq"] is None and "nothing fits" in answer["note"]


def test_an_unknown_target_is_one_clear_error():
    with pytest.raises(InputError, match="solve='context' is not one of: seq, mbs, gpu"):
        solve("context", "llama3-8b", "h100", 1)


def test_estimate_solve_on_the_command_line():
    run = in_process("estimate", "--model", "llama3-8b", "--gpu", "4090",
                          "--gpus", "1", "--method", "qlora", "--recompute", "full", "--solve", "seq", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["seq"] == solve("seq", "llama3-8b", "rtx-4090", 1, method="qlora",
                                                  recompute="full")["seq"]


def test_the_find_limit_tool_answers_as_the_api():
    from trainplan.agent.registry import dispatch

    out = dispatch("find_limit", {"model": "llama3-8b", "gpu": "rtx-4090", "gpus": 1, "method": "qlora",
                                  "solve": "mbs", "seq": 2048})
    assert out["mbs"] == trainplan.limits("mbs", model="llama3-8b", gpu="rtx-4090", gpus=1, method="qlora",
                                          seq=2048)["mbs"]


def test_fp32_norms_hold_the_residual_stream_in_fp32():
    """Under full recompute the checkpoint is each layer's input: 4 B per element with fp32 norms instead of 2,
    and the block's saved tensors grow; full training with fp32 norms still saves its linears' inputs."""
    spec = load_model("llama3-8b")
    seq = 4096
    for method in ("qlora", "full"):
        base = dict(model="llama3-8b", gpu="h100", gpus=1, method=method, seq=seq, recompute="full", zero=0,
                    fused_kernels=False, loss_kernel="fused")
        bf16 = trainplan.estimate(**base, fp32_norms=False).memory_gib.activations
        fp32 = trainplan.estimate(**base, fp32_norms=True).memory_gib.activations
        checkpoints = 2 * seq * spec.hidden_size * spec.num_layers / GIB * 1.05
        assert fp32 - bf16 > checkpoints
    assert trainplan.estimate(model="llama3-8b", gpu="h100", gpus=1, method="qlora").config.fp32_norms
    assert not trainplan.estimate(model="llama3-8b", gpu="h100", gpus=1, method="lora").config.fp32_norms


def test_the_gpu_limit_refuses_a_layout_whose_sizes_do_not_divide_in_one_line():
    """A layout error is the layout's, not every GPU's: one line, not 'fits on no catalog GPU'."""
    with pytest.raises(InputError, match="gbs=7 is not divisible by dp\\*mbs=3\\*1=3"):
        trainplan.limits("gpu", model="llama3-8b", gpus=3, gbs=7)
    # full training at an odd count is timed at the default batch, rounded to a multiple of dp x mbs
    answer = trainplan.limits("gpu", model="llama3-8b", gpus=3, recompute="full")
    assert answer["fits_on"] and all(row["tokens_per_s"] > 0 for row in answer["fits_on"])


def test_find_limit_takes_no_gpu_for_the_gpu_limit_and_asks_for_it_otherwise():
    from trainplan.agent.registry import dispatch

    every = dispatch("find_limit", {"model": "llama3-8b", "gpu": None, "solve": "gpu", "gpus": 1, "method": "qlora"})
    assert every["fits_on"] and every["cheapest"] in {row["gpu"] for row in every["fits_on"]}
    refused = dispatch("find_limit", {"model": "llama3-8b", "gpu": None, "solve": "seq", "gpus": 1})
    assert refused == {"error": "find_limit: gpu: required with solve=seq (only solve=gpu tries every catalog GPU)"}
