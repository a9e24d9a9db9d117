"""The offline parser of plain-language requests."""

from __future__ import annotations

import pytest

from trainplan.agent.request import PlanRequest, merge, parse_partial, parse_request, resolve_gbs
from trainplan.tools.core.errors import InputError


@pytest.mark.parametrize(("text", "expected"), [
    ("Llama 3 70B on 512 H100s for 15T tokens",
     {"model": "llama3-70b", "gpu": "h100-sxm-80gb", "gpus": 512, "tokens": 15e12}),
    ("DeepSeek-V3, 2048 H800, $2/GPU-hour",
     {"model": "deepseek-v3", "gpu": "h800-sxm-80gb", "gpus": 2048, "price": 2.0}),
    ("llama3-405b on 16k H100", {"model": "llama3-405b", "gpu": "h100-sxm-80gb", "gpus": 16384}),
    ("Llama 3.1 405B, 16,384 H100s, 15.6e12 tokens",
     {"model": "llama3-405b", "gpu": "h100-sxm-80gb", "gpus": 16384, "tokens": 15.6e12}),
    ("llama3-8b on 64 H100, sequence length 8192", {"seq": 8192}),
    ("llama3-8b on 64 H100, seq 4k", {"seq": 4096}),
    ("llama3-8b on 64 H100 with an 8k context", {"seq": 8192}),
    ("llama3-8b on 64 H100, global batch 1024", {"gbs": 1024}),
    ("llama3-8b on 64 H100, gbs=256", {"gbs": 256}),
    ("llama3-8b on 64 H100, 4M tokens per batch", {"batch_tokens": 4 * 2**20}),
    ("llama3-70b on 512 H100s within 30 days", {"deadline_days": 30.0}),
    ("llama3-70b on 512 H100s in 4 weeks", {"deadline_days": 28.0}),
    ("llama3-70b on 512 H100s, budget $2M", {"budget_usd": 2e6}),
    ("llama3-70b on 512 H100s, fp8", {"precision": "fp8"}),
    ("llama3-70b on 512 H100s under $2.5/GPU-hour", {"price": 2.5, "budget_usd": None}),
    ("llama3-70b on 512 H100s, within $3 million", {"budget_usd": 3e6, "price": None}),
    ("GPT-3 175B on 1,024 A100 80GB GPUs for 300 billion tokens with TP8, PP 16 and ZeRO-1",
     {"model": "gpt3-175b", "gpu": "a100-sxm-80gb", "gpus": 1024, "tokens": 3e11, "tp": 8, "pp": 16, "zero": 1}),
    ("mixtral 8x7b on 64xH100 at $2.5 per GPU hour", {"model": "mixtral-8x7b", "gpus": 64, "price": 2.5}),
    ("llama3-8b on 8 nodes of H100", {"gpu": "h100-sxm-80gb", "gpus": 64}),
    ("Llama 3 70B, 200B tokens, on 64 B200", {"gpu": "b200", "gpus": 64, "tokens": 2e11}),
    ("train llama 70b on 128 h200", {"model": "llama3-70b", "gpu": "h200-sxm-141gb", "gpus": 128}),
])
def test_parse(text, expected):
    got = parse_request(text).given()
    assert {k: got.get(k) for k in expected} == expected


def test_numbers_inside_names_are_not_read_as_counts():
    request = parse_request("Llama 3 70B 200B tokens on 64 B200")
    assert request.gpus == 64 and request.gpu == "b200" and request.tokens == 2e11
    assert parse_partial("Llama 3 70B for 1T tokens").gpu is None


def test_batch_in_tokens_becomes_gbs():
    request = parse_request("llama3-8b on 64 H100, 4M tokens per batch")
    assert resolve_gbs(request, 8192)[0] == 512
    assert resolve_gbs(request, 4096)[0] == 1024
    assert resolve_gbs(parse_request("llama3-8b on 64 H100, gbs 64"), 8192) == (64, None)


@pytest.mark.parametrize(("text", "fragments"), [
    ("train something big on 512 H100s", ["needs a model", "llama3-70b", "e.g. \"Llama 3 70B on 512 H100s"]),
    ("llama3-70b please", ["the hardware", "512 H100s"]),
    ("llama3-70b on H100s", ["how many GPUs"]),
    ("llama3-70b on 512 GPUs", ["the GPU type", "h100-sxm-80gb"]),
])
def test_missing_model_or_hardware_names_what_is_needed(text, fragments):
    with pytest.raises(InputError) as caught:
        parse_request(text)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_follow_ups_are_partial_and_merge():
    base = parse_request("Llama 3 70B on 512 H100s for 15T tokens, seq 8192, gbs 512")
    assert parse_partial("what if I only have 256 GPUs?").given() == {"gpus": 256}
    assert parse_partial("use fp8").given() == {"precision": "fp8"}
    fewer = merge(base, parse_partial("what if I only have 256 GPUs?"))
    assert (fewer.model, fewer.gpu, fewer.gpus, fewer.tokens, fewer.gbs) == ("llama3-70b", "h100-sxm-80gb", 256,
                                                                               15e12, 512)
    h200 = merge(fewer, parse_partial("switch to H200"))
    assert (h200.gpu, h200.gpus) == ("h200-sxm-141gb", 256)
    shorter = merge(base, parse_partial("seq 4k"))
    assert shorter.seq == 4096 and shorter.gbs is None  # the default rule chooses gbs again
    assert merge(base, PlanRequest()) == base
