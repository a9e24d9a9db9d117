"""The parser reads requests as users write them: every row of issue 11's table and issue 13's
plain-language cases, free word order, nodes x GPUs per node, bounds, objectives, negations and
CJK text, and it refuses what cannot be meant with one clear line."""

from __future__ import annotations

import pytest

from trainplan.agent.request import parse_partial, parse_request
from trainplan.agent.request_text import MAX_CHARS, MAX_DIGITS
from trainplan.tools.core.errors import InputError

H100 = "h100-sxm-80gb"


def read(text: str, *fields: str) -> dict:
    got = parse_partial(text).model_dump()
    return {k: got[k] for k in fields}


# --- issue 11's table: each request as written there -----------------------------------------------------

def test_nodes_of_gpus_multiply():
    assert read("Llama 3 70B on 64 nodes of 8 H100s", "model", "gpu", "gpus", "gpus_per_node") == {
        "model": "llama3-70b", "gpu": H100, "gpus": 512, "gpus_per_node": 8}


def test_cheapest_with_up_to_is_a_cost_objective_and_a_bound():
    got = read("What's the cheapest way to train Llama 3 70B with up to 512 H100s?",
               "model", "gpu", "gpus", "max_gpus", "objective")
    assert got == {"model": "llama3-70b", "gpu": H100, "gpus": None, "max_gpus": 512, "objective": "cost"}


def test_deadline_without_a_count_is_complete():
    request = parse_request("Train Llama 3 70B for 2T tokens in 30 days on H100s")
    assert (request.model, request.gpu, request.gpus, request.tokens, request.deadline_days) == (
        "llama3-70b", H100, None, 2e12, 30.0)


def test_not_fp8_is_bf16():
    assert read("Llama 3 70B on 512 H100s, not fp8", "precision") == {"precision": "bf16"}


def test_no_tensor_parallelism_pins_tp_to_one():
    assert read("Llama 3 70B on 512 H100s, no tensor parallelism", "tp") == {"tp": 1}


@pytest.mark.parametrize(("text", "model"), [
    ("train a 70B Llama 3 model on 256 H100s", "llama3-70b"),
    ("a 7B Mistral on 8 A100s", "mistral-7b"),
])
def test_free_word_order_models(text, model):
    assert parse_partial(text).model == model


def test_chinese_request():
    got = read("用512张H100训练Llama 3 70B，15T token", "model", "gpu", "gpus", "tokens")
    assert got == {"model": "llama3-70b", "gpu": H100, "gpus": 512, "tokens": 15e12}


# --- many phrasings ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    # nodes x GPUs per node
    ("Llama 3 8B on 4 nodes with 8 H100s each", {"gpus": 32, "gpus_per_node": 8}),
    ("llama3-8b, 16 servers x 8 A100 80GB", {"gpus": 128, "gpus_per_node": 8, "gpu": "a100-sxm-80gb"}),
    ("Llama 3 8B on 8 H100s per node, 4 nodes", {"gpus": 32, "gpus_per_node": 8}),
    ("Llama 3 8B on 4 x 8 A100 80GB", {"gpus": 32, "gpus_per_node": 8}),
    ("llama3-8b on 16 nodes of 4 H100s", {"gpus": 64, "gpus_per_node": 4}),
    ("llama3-8b on 8 nodes of H100", {"gpus": 64, "gpus_per_node": None}),
    ("64台8卡H100训练Llama 3 70B，30天内完成", {"gpus": 512, "gpus_per_node": 8, "deadline_days": 30.0}),
    # counts written around the GPU
    ("H100 x 512 for llama3-8b", {"gpus": 512}),
    ("llama3-8b on 8xH100", {"gpus": 8}),
    ("Llama 3 70B on 1.5k H100s", {"gpus": 1536}),
    ("Llama 3 70B, 16,384 H100s", {"gpus": 16384}),
    ("Llama 3 70B on 512 NVIDIA H100 GPUs", {"gpus": 512}),
    ("Ｌｌａｍａ ３ ７０Ｂ on ５１２ Ｈ１００ｓ", {"model": "llama3-70b", "gpus": 512}),  # full-width
    # upper bounds
    ("Llama 3 70B with at most 256 H100s", {"gpus": None, "max_gpus": 256}),
    ("Llama 3 70B, no more than 1024 GPUs, H100", {"max_gpus": 1024}),
    ("Llama 3 70B on 512 H100s at most", {"max_gpus": 512}),
    ("用最多512张H100训练Llama 3 70B", {"max_gpus": 512}),
    # objectives
    ("Llama 3 8B on 64 H100s, minimise cost", {"objective": "cost"}),
    ("Llama 3 8B on 64 H100s, minimize the total cost", {"objective": "cost"}),
    ("the most cost-effective plan for Llama 3 8B on 64 H100s", {"objective": "cost"}),
    ("fastest way to train Llama 3 8B on 64 H100s", {"objective": "time"}),
    ("Llama 3 8B on 64 H100s as fast as possible", {"objective": "time"}),
    ("Llama 3 8B on 64 H100s, maximize throughput", {"objective": "throughput"}),
    ("最便宜的方案：用64张H100训练Llama 3 8B", {"objective": "cost"}),
    # deadlines and budgets
    ("Llama 3 8B on 64 H100s for 1T tokens, done in 2 weeks", {"deadline_days": 14.0}),
    ("Llama 3 8B on 64 H100s for 1T tokens within a month", {"deadline_days": 30.0}),
    ("Llama 3 8B on 64 H100s for 1T tokens, budget of $250K", {"budget_usd": 2.5e5}),
    ("Llama 3 8B on 64 H100s for 1T tokens, spend no more than 2 million dollars", {"budget_usd": 2e6}),
    ("Llama 3 70B on 512 H100s, budget $2M, under $2.5/GPU-hour", {"budget_usd": 2e6, "price": 2.5}),
    # negations and pins
    ("Llama 3 70B on 512 H100s without pipeline parallelism", {"pp": 1}),
    ("Llama 3 70B on 512 H100s, without pipeline", {"pp": 1}),
    ("Llama 3 70B on 512 H100s, no PP, no CP", {"pp": 1, "cp": 1}),
    ("Llama 3 70B on 512 H100s, don't use fp8", {"precision": "bf16"}),
    ("Llama 3 70B on 512 H100s, fp8 off", {"precision": "bf16"}),
    ("Llama 3 70B on 512 H100s, no activation checkpointing", {"recompute": "none"}),
    ("Llama 3 70B on 512 H100s with full recompute", {"recompute": "full"}),
    ("Llama 3 70B on 512 H100s, 8-way TP and 4 pipeline stages", {"tp": 8, "pp": 4}),
    ("Llama 3 70B on 512 H100s, tensor parallelism of 4", {"tp": 4}),
    ("Llama 3 70B on 512 H100s with FSDP", {"zero": 3}),
    ("Llama 3 70B on 512 H100s, no interleaving", {"vpp": 1}),
    ("DeepSeek-V3 on 2048 H800s, no expert parallelism, FP8", {"ep": 1, "precision": "fp8"}),
    # free word order and families
    ("a Mistral model on 8 H100s", {"model": "mistral-7b"}),
    ("on 64 H100s, train Qwen 2.5 72B", {"model": "qwen2.5-72b"}),
    ("Llama 3.1 405B on 16k H100s", {"model": "llama3-405b", "gpus": 16384}),
    ("train the 8B Llama on 8 H100s", {"model": "llama3-8b"}),
    ("Llama 3 70B 200B tokens on 64 B200", {"model": "llama3-70b", "tokens": 2e11, "gpu": "b200", "gpus": 64}),
    ("train Llama 3 8B for 1T on 64 H100s", {"model": "llama3-8b", "tokens": 1e12, "gpus": 64}),
    ("Llama 3 70B on 64 H100s for 300B", {"tokens": 3e11}),
    # fine-tuning
    ("QLoRA fine-tune Llama 3 70B on 1 L40S, rank 64", {"method": "qlora", "lora_rank": 64, "fine_tuning": True}),
    ("Fine-tune Llama 3 8B on 8 A100s with LoRA r=16", {"method": "lora", "lora_rank": 16}),
    ("full fine-tuning of Llama 3 8B on 8 H100s with full recompute", {"method": "full", "recompute": "full"}),
    ("SFT Llama 3 8B on 8 H100s", {"method": None, "fine_tuning": True}),
    ("Llama 3 8B on 8 H100s for 1T tokens", {"method": None, "fine_tuning": None}),
    # CJK amounts
    ("用1024张H100训练Llama 3 70B，15万亿token", {"gpus": 1024, "tokens": 15e12}),
    ("H100を512枚でLlama 3 70Bを学習", {"gpus": 512, "model": "llama3-70b"}),
])
def test_phrasings(text, expected):
    assert read(text, *expected) == expected


def test_words_not_understood_are_listed_and_stop_words_are_not():
    request = parse_partial("Please plan llama3-8b on 64 H100s for 1T tokens with frobnication and zorp")
    assert request.unparsed == ["frobnication", "zorp"]
    assert parse_partial("Llama 3 70B on 512 H100s for 15T tokens").unparsed is None
    assert parse_partial("64台8卡H100训练Llama 3 70B，尽快").unparsed == ["尽快"]
    assert "unparsed" not in parse_partial("use fp8 please, blah").given()


# --- refusals ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fragments"), [
    ("Llama 3 70B on -512 H100s", ["'-512 H100s'", "positive whole number"]),
    ("Llama 3 70B on 512.5 H100s", ["'512.5 H100s'", "whole number"]),
    ("Llama 3 70B on 512 H100s for -15T tokens", ["'-15T tokens'", "negative"]),
    ("Llama 3 70B on 0 GPUs", ["'0 GPUs'", "at least 1"]),
    ("Llama 3 70B on 512 H100s for 0 tokens", ["'0 tokens'"]),
    ("Llama 3 70B on 64 nodes of -8 H100s", ["'-8 H100s'"]),
    ("Llama 3 70B on 512 H100s for 1e999 tokens", ["too large"]),
    ("Llama 3 70B on 512 H100s for 1e300 tokens", ["more than"]),
    ("Llama 3 70B on 2000000 H100s", ["more than 1,048,576"]),
    ("Llama 3 70B on 512 H100s, ZeRO-4", ["ZeRO stages are 0-3"]),
    ("Llama 3 70B on 512 H100s within -3 days", ["not a deadline"]),
])
def test_impossible_numbers_are_refused(text, fragments):
    with pytest.raises(InputError) as caught:
        parse_partial(text)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(("text", "written"), [
    ("Llama 3 70B on 512 H100 NVL", "H100 NVL"),
    ("Llama 3 70B on 8 MI400X", "MI400X"),
    ("Llama 3 70B on 8 RTX 9090", "RTX 9090"),
    ("Llama 3 8B on 64 V100s", "V100"),
    ("Llama 3 8B on 64 V100 GPUs", "V100"),
    ("Llama 3 8B on 64 Gaudi 3 cards", "Gaudi 3"),
    ("Llama 3 8B on 64 A100 24GB", "A100 24GB"),
])
def test_gpus_the_catalog_lacks_are_named_with_the_fix(text, written):
    with pytest.raises(InputError) as caught:
        parse_partial(text)
    message = str(caught.value)
    assert message.startswith(f"gpu '{written}' is not in the catalog")
    assert "GPU JSON file" in message and "bf16_tflops" in message and "./my-gpu.json" in message
    assert "\n" not in message


def test_close_names_are_offered():
    assert "rtx-4090" in str(pytest.raises(InputError, parse_partial, "Llama 3 8B on 8 RTX 9090").value)
    other = str(pytest.raises(InputError, parse_partial, "Llama 3 70B on 512 H100 NVL").value)
    assert "h100-sxm-80gb" in other and "other parts" in other


@pytest.mark.parametrize(("text", "gpu", "gpus"), [
    ("Llama 3 70B on 512 H100 PCIe", "h100-pcie-80gb", 512),
    ("Llama 3 70B on 512 H100 SXM5", H100, 512),
    ("Llama 3 70B on 8 MI300X", "mi300x", 8),
    ("Llama 3 8B on 512 NVIDIA H100 PCIe GPUs", "h100-pcie-80gb", 512),
    ("Llama 3 8B on 16 AMD Instinct MI300X", "mi300x", 16),
    ("Llama 3 8B on 8x RTX 4090", "rtx-4090", 8),
])
def test_catalog_parts_beside_sxm(text, gpu, gpus):
    """'H100 PCIe' is the PCIe entry, never the SXM part (issue 13); new entries need no parser change."""
    from trainplan.tools.hardware import catalog

    if gpu not in catalog.gpu_names():
        pytest.skip(f"{gpu} is not in the catalog")
    assert read(text, "gpu", "gpus") == {"gpu": gpu, "gpus": gpus}


def test_unknown_model_of_a_known_family_is_refused_with_its_members():
    with pytest.raises(InputError) as caught:
        parse_partial("Llama 2 13B on 64 H100s")
    assert str(caught.value).startswith("model 'Llama 2 13B' is not in the catalog (its family in the catalog: ")
    assert "llama3-8b" in str(caught.value) and "config.json" in str(caught.value)


@pytest.mark.parametrize(("text", "written"), [
    ("Train Phi-3 14B on 8 H100s", "Phi-3 14B"),
    ("a 14B Phi model on 8 H100s", "14B Phi"),
])
def test_a_model_of_no_catalog_family_is_refused(text, written):
    with pytest.raises(InputError, match=f"model '{written}' is not in the catalog \\(known: "):
        parse_partial(text)
    with pytest.raises(InputError, match="'13B-parameter' alone does not name a model: no catalog model has that size"):
        parse_partial("a 13B-parameter model on 8 H100s")  # a size alone names a model only when one has it
    with pytest.raises(InputError, match="'14B-parameter' alone does not name a model: the catalog has 2: "
                                         "qwen2.5-14b, qwen3-14b"):
        parse_partial("a 14B-parameter model on 8 H100s")  # nor when two have it


def test_the_input_is_bounded():
    with pytest.raises(InputError, match="more than 4,000"):
        parse_partial("Llama 3 70B on 512 H100s for " + "9" * 100_000 + " tokens")
    with pytest.raises(InputError, match=f"more than any count a plan needs \\({MAX_DIGITS} digits\\)"):
        parse_partial("Llama 3 70B on 512 H100s for " + "9" * 3_000 + " tokens")
    # a long but ordinary request is read
    filler = " and please keep it simple" * ((MAX_CHARS - 200) // 26)
    assert parse_partial("Llama 3 70B on 512 H100s" + filler).gpus == 512


def test_gpu_and_model_files_written_in_the_request(tmp_path):
    """The route the refusals name: a GPU JSON path where the GPU goes, a config.json path for the model."""
    import json

    from trainplan.tools.hardware.catalog.entries import GPUS_DIR, MODELS_DIR

    gpu = tmp_path / "my-gpu.json"
    gpu.write_text(json.dumps({**json.loads((GPUS_DIR / "h100-sxm-80gb.json").read_text()), "name": "my-gpu"}))
    model = tmp_path / "config.json"
    model.write_text((MODELS_DIR / "llama3-8b.json").read_text())
    request = parse_request(f"{model} on 64 x {gpu} for 1T tokens")
    assert (request.model, request.gpu, request.gpus, request.tokens) == (str(model), str(gpu), 64, 1e12)


def test_follow_ups_replace_a_bound_with_a_count_and_back():
    from trainplan.agent.request import merge

    bounded = parse_request("the cheapest way to train Llama 3 70B with up to 512 H100s")
    counted = merge(bounded, parse_partial("what if I use 256 GPUs?"))
    assert (counted.gpus, counted.max_gpus, counted.objective) == (256, None, "cost")
    again = merge(counted, parse_partial("switch to H200, at most 128 GPUs"))
    assert (again.gpu, again.gpus, again.max_gpus) == ("h200-sxm-141gb", None, 128)
    assert again.unparsed is None  # the words of the last turn only, all understood
    with pytest.raises(InputError):
        parse_partial("what if I use -256 GPUs?")


def test_deadline_phrasings():
    for text in ("in 30 days", "within 30 days", "up to 30 days", "a 30 day deadline", "30 days or less",
                 "in less than 30 days", "30天内", "deadline: 30 days"):
        assert parse_partial(f"Llama 3 8B on 64 H100s {text}").deadline_days == 30.0, text


def test_the_readme_requests_are_complete():
    """Every documented example is also a test: the README's plain-language requests parse completely."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```requests\n(.*?)```", readme, flags=re.S).group(1)
    for line in filter(None, block.splitlines()):
        request = parse_request(line)
        assert request.unparsed is None, (line, request.unparsed)


@pytest.mark.parametrize(("text", "expected"), [
    # a refused adapter is full training, and no fine-tune by itself
    ("Train Llama 3 70B for 15T tokens on 512 H100s, not using LoRA", {"method": "full", "fine_tuning": None}),
    ("Fine-tune Llama 3 8B on 8 H100s for 1B tokens without LoRA", {"method": "full", "fine_tuning": True}),
    ("SFT Llama 3 8B on 8 H100s, 1B tokens, no QLoRA", {"method": "full", "fine_tuning": True}),
    # a full-width comma after a digit is no thousands separator
    ("在1024块H100上训练DeepSeek-V3，15万亿token", {"model": "deepseek-v3", "gpus": 1024, "tokens": 15e12}),
    ("在1024块H100上训练DeepSeek V3，14.8万亿token", {"tokens": 14.8e12}),
    # tokens in Japanese and Korean
    ("Llama 3 8B を 64 枚の H100 で 1T トークン学習", {"gpus": 64, "tokens": 1e12, "unparsed": None}),
    ("Llama3 8B 64장 H100 으로 1T 토큰 학습", {"gpus": 64, "tokens": 1e12, "unparsed": None}),
    # money as people write it
    ("Train Llama 3 70B on H100s for 1T tokens with $500k", {"budget_usd": 5e5, "unparsed": None}),
    ("Llama 3 70B for 15T tokens on 512 H100s at 1.99 $/GPU-hour", {"price": 1.99, "unparsed": None}),
    # the node size stated apart from the count
    ("Llama 3 70B for 15T tokens on 512 H100s, 8 GPUs per node", {"gpus": 512, "gpus_per_node": 8}),
    ("Llama 3 70B for 15T tokens on 512 H100s, 4 GPUs/node", {"gpus": 512, "gpus_per_node": 4}),
])
def test_phrasings_once_misread(text, expected):
    assert read(text, *expected) == expected


@pytest.mark.parametrize(("text", "expected"), [
    # 'micro-batch size 4' holds 'batch size 4': it was read as the global batch
    ("Llama 3 70B 1T tokens 256 H100, micro-batch size of 4, global batch size 1024", {"mbs": 4, "gbs": 1024}),
    ("Llama 3 70B 1T tokens 256 H100, micro batch size 2", {"mbs": 2, "gbs": None}),
    ("Llama 3 70B 1T tokens 256 H100, mbs=2, gbs=512", {"mbs": 2, "gbs": 512, "unparsed": None}),
    # a negation written after the feature: 'FP8 not allowed' was read as fp8
    ("Llama 3 70B on 512 H100s for 15T tokens, FP8 not allowed", {"precision": "bf16", "unparsed": None}),
    ("Llama 3 70B on 512 H100s for 15T tokens, TP is not allowed", {"tp": 1}),
    # a price per GPU per hour, labelled tokens, a goodput
    ("Llama 3 70B, 1T tokens, $3/GPU/hr, 256 H100", {"price": 3.0, "unparsed": None}),
    ("Llama 3 70B on 512 H100s, tokens: 15T", {"tokens": 15e12, "unparsed": None}),
    ("Llama 3 70B trained on 15T tokens using 512 H100 GPUs at 80% goodput", {"goodput": 0.8, "unparsed": None}),
    ("Llama 3 70B, 512 H100, 15T tokens, goodput 0.95", {"goodput": 0.95}),
])
def test_phrasings_read_silently_wrong_before(text, expected):
    assert read(text, *expected) == expected


def test_a_goodput_above_one_is_refused():
    with pytest.raises(InputError, match="not a goodput"):
        parse_partial("Llama 3 70B, 512 H100, 15T tokens, goodput of 150%")


@pytest.mark.parametrize(("text", "expected"), [
    # the mission's own example read nothing but the method: 'a 70B' named no model, 'two 4090s' no GPU
    ("can I QLoRA-tune a 70B on two 4090s?",
     {"model": "llama3-70b", "model_from_size": "70B", "gpu": "rtx-4090", "gpus": 2, "method": "qlora",
      "unparsed": None}),
    ("Llama 3 70B on two RTX 4090", {"gpus": 2, "unparsed": None}),
    ("Llama 3 8B on a pair of A100s", {"gpus": 2, "gpu": "a100-sxm-80gb"}),
    ("eight H100s for Llama 3 8B", {"gpus": 8, "model": "llama3-8b"}),
    ("Llama 3 8B on two H100 nodes", {"gpus": 16, "gpus_per_node": 8, "unparsed": None}),
    ("8x7B on 16 H100s", {"model": "mixtral-8x7b", "model_from_size": "8x7B"}),
    ("a 70B Llama 3 model on 64 H100s", {"model": "llama3-70b", "model_from_size": None}),
])
def test_counts_in_words_bare_card_numbers_and_sizes_alone(text, expected):
    assert read(text, *expected) == expected


@pytest.mark.parametrize("text", [
    "Llama 3 70B, 512 H100s, 15T tokens: how do I lay it out, will it fit, how long, how much?",
    "Llama 3 70B on 512 H100s for 15T tokens, how much will it cost and how long will it take?",
])
def test_the_missions_questions_are_read_whole(text):
    """The mission's own question: its question words were listed as 'not understood'."""
    assert read(text, "model", "gpus", "tokens", "unparsed", "objective") == {
        "model": "llama3-70b", "gpus": 512, "tokens": 15e12, "unparsed": None, "objective": None}


@pytest.mark.parametrize("text", ["Llama 3 8B on 8 H100s for 4090 steps", "Llama 3 8B on 8 H100s, budget $4090"])
def test_a_bare_card_number_is_a_gpu_only_as_a_plural(text):
    assert parse_partial(text).gpu == H100


@pytest.mark.parametrize(("text", "fragments"), [
    ("fine-tune a 7B on one A100", ("'7B' alone does not name a model", "falcon-7b", "mistral-7b", "qwen2.5-7b")),
    ("a 13B on 8 H100s", ("'13B' alone does not name a model", "no catalog model has that size")),
])
def test_a_size_alone_that_names_no_single_model_is_refused(text, fragments):
    with pytest.raises(InputError) as error:
        parse_partial(text)
    assert all(fragment in str(error.value) for fragment in fragments)


def test_a_model_named_later_drops_the_size_alone_reading():
    from trainplan.agent.request import merge

    first = parse_partial("a 70B on 64 H100s")
    assert first.model_from_size == "70B"
    assert merge(first, parse_partial("use Llama 3 8B instead")).model_from_size is None


@pytest.mark.parametrize("text, dispatcher", [
    ("DeepSeek-V3 on 2048 H800s with DeepEP, 14.8T tokens", "deepep"),
    ("Qwen3-30B-A3B on 16 H100s using Deep-EP kernels", "deepep"),
    ("Mixtral 8x7B on 64 H100s with the allgather dispatcher", "allgather"),
    ("Mixtral 8x7B on 64 H100s, all-to-all token dispatcher", "alltoall"),
    ("Mixtral 8x7B on 64 H100s, the all-to-all is slow", None),      # a collective, not the dispatcher
    ("Qwen3-30B-A3B on 16 H100s without DeepEP", None),              # refused: listed as not understood
])
def test_the_moe_token_dispatcher_is_read(text, dispatcher):
    request = parse_request(text)
    assert request.dispatcher == dispatcher
    assert ("DeepEP" in (request.unparsed or [])) == ("without DeepEP" in text)


def test_a_named_dispatcher_reaches_the_search_pins():
    from trainplan.agent.planner import plan

    report = plan("Qwen3-30B-A3B on 16 H100s with DeepEP")
    assert report.request["dispatcher"] == "deepep"
    assert report.recommended["config"]["dispatcher"] == "deepep"


# --- the Hugging Face Trainer's words: per-device batch, accumulation, epochs, checkpointing, 4-bit ------------

@pytest.mark.parametrize(("text", "mbs", "gbs"), [
    # per_device_train_batch_size x gradient_accumulation_steps x data-parallel GPUs is the global batch
    ("LoRA Llama 3 8B on 4 A100s, per_device_train_batch_size=4, gradient_accumulation_steps=4", 4, 64),
    # a bare 'batch size' beside accumulation is the per-device batch (the Qwen README's 'batch 1, accumulation 8')
    ("LoRA Qwen2.5 7B on one A100, batch size 1, gradient accumulation 8", 1, 8),
    ("Llama 3 8B on 8 H100s, tp 2, micro batch 2, grad accum 4", 2, 32),   # 4 data-parallel replicas
    # a global batch said as such gives the micro-batch
    ("Llama 3 70B on 512 H100s, global batch size 4096, gradient accumulation 4", 2, 4096),
    ("LoRA Llama 3 8B on 8 H100s, batch size per device 2", 2, None),
])
def test_hugging_face_batch_words_make_the_global_batch(text, mbs, gbs):
    assert read(text, "mbs", "gbs") == {"mbs": mbs, "gbs": gbs}


@pytest.mark.parametrize(("text", "message"), [
    ("LoRA Llama 3 8B with gradient accumulation 8 on H100s", "give the GPU count"),
    ("Llama 3 70B on 512 H100s, global batch size 1024, gradient accumulation 4", "is not gradient accumulation 4"),
])
def test_accumulation_that_cannot_make_a_batch_is_one_line(text, message):
    with pytest.raises(InputError, match=message) as refused:
        parse_partial(text)
    assert "\n" not in str(refused.value)


def test_epochs_gradient_checkpointing_full_sft_and_4_bit_are_read():
    request = parse_partial("LoRA Llama 3 8B, 2 epochs over 50M tokens, on one A100 40GB with gradient checkpointing")
    assert (request.tokens, request.recompute, request.unparsed) == (1e8, "full", None)
    assert parse_partial("Llama 3 8B on 8 H100s for 3 epochs").unparsed == ["3", "epochs"]   # no tokens to repeat
    assert parse_partial("Llama 3 8B on 8 H100s without gradient checkpointing").recompute == "none"
    assert (parse_partial("full SFT of Qwen2.5-7B on 8 A100s").method, parse_partial("QLoRA 4-bit Llama 3 8B on an L4")
            .method, parse_partial("LoRA on a 4-bit Llama 3 8B on an L4").method) == ("full", "qlora", "qlora")


def test_a_data_set_as_samples_of_a_length_is_its_tokens_and_its_sequence():
    request = parse_partial("Llama 3 8B LoRA, 3 epochs on 10k samples of 512 tokens, 1 A100")
    assert (request.tokens, request.seq, request.unparsed) == (10_000 * 512 * 3, 512, None)   # not 512 x 3 tokens
    request = parse_partial("LoRA Llama 3 8B on 50,000 examples of 2k tokens each on 2 H100s")
    assert (request.tokens, request.seq) == (50_000 * 2048, 2048)
    assert read("Llama 3 8B on 8 H100s, micro batch 2, batch 256", "mbs", "gbs") == {"mbs": 2, "gbs": 256}


def test_liger_and_cut_cross_entropy_name_the_kernels_the_plan_assumes():
    liger = parse_partial("QLoRA Llama 3 8B on a 4090 with Liger kernels")
    assert (liger.fused_kernels, liger.loss_kernel, liger.unparsed) == (True, "fused_linear", None)
    cce = parse_partial("LoRA Llama 3 8B on a 4090 with Cut Cross-Entropy")
    assert (cce.fused_kernels, cce.loss_kernel) == (None, "fused_linear")


def test_a_liger_plan_is_scored_and_launched_with_liger():
    """The request's kernels reach the search (the engine's own are the default) and the Axolotl file switches
    Liger on, so the plan's memory is the memory the run holds."""
    from trainplan.agent.planner import plan

    with_liger = plan("QLoRA Llama 3 8B on a 4090 with Liger", backend="offline")
    config = with_liger.recommended["config"]
    assert (config["fused_kernels"], config["loss_kernel"]) == (True, "fused_linear")
    assert "axolotl.integrations.liger.LigerPlugin" in with_liger.launch.content
    plain = plan("QLoRA Llama 3 8B on a 4090", backend="offline").recommended["config"]
    assert (plain["fused_kernels"], plain["loss_kernel"]) == (False, "materialised")


def test_epochs_may_be_fractional_and_the_tokens_they_make_are_bounded():
    assert parse_partial("Llama 3 8B on 8 H100s, 1.5 epochs over 1B tokens").tokens == 1.5e9
    for text in ("Llama 3 8B on 8 H100s, 1e30 epochs over 1B tokens", "Llama 3 8B on 8 H100s, 1e20 samples of 4k tokens"):
        with pytest.raises(InputError, match="more than 1e\\+15"):
            parse_partial(text)
    with pytest.raises(InputError, match="3 GPUs do not divide into tp x pp x cp = 2"):
        parse_partial("Llama 3 8B on 3 H100s, tp 2, grad accum 2")


def test_a_one_digit_gpu_the_catalog_lacks_is_named_and_lora_r16_is_a_rank():
    for text in ("QLoRA Llama 3 8B on a T4", "QLoRA Llama 3 8B on 2 T4s"):
        with pytest.raises(InputError, match="gpu 'T4' is not in the catalog"):
            parse_partial(text)   # it said the request needs the hardware
    assert parse_partial("LoRA Llama 3 8B on an L4").gpu == "l4"
    assert (parse_partial("QLoRA r64 Llama 3 8B on an H100").lora_rank,
            parse_partial("Llama 3 8B on 8 H100s r8").lora_rank) == (64, None)   # r8 is a rank only beside LoRA


@pytest.mark.parametrize(("text", "targets"), [
    ('qlora mistral 7b, target_modules: ["q_proj", "v_proj"], 1 A100', "qv"),
    ("qlora mistral 7b, target modules q_proj,k_proj,v_proj,o_proj, 1 A100", "attention"),
    ("LoRA llama 3 8b target_modules q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj on 2x 3090", "all-linear"),
    ("LoRA llama 3 8b, lora_r=32, target_modules=all-linear, on 1 4090", "all-linear"),
])
def test_peft_target_modules_and_config_words_are_read(text, targets):
    request = parse_partial(text)
    assert (request.lora_targets, request.unparsed) == (targets, None)
    assert request.gpus in (1, 2) and request.gpu is not None   # '1 4090', '2x 3090': a count before a bare card


def test_a_target_module_set_trainplan_does_not_plan_is_one_line():
    with pytest.raises(InputError, match="target_modules k_proj, q_proj is not a set trainplan plans"):
        parse_partial("qlora mistral 7b, target_modules q_proj,k_proj, 1 A100")
    assert parse_partial("Llama 3 8B on 8 H100 for 4090 steps").gpu == "h100-sxm-80gb"   # 4090 steps stay steps
    assert parse_partial("LoRA fine-tuning of meta-llama/Meta-Llama-3-8B on 1 H100 with packing").unparsed is None


@pytest.mark.parametrize("text, alpha, dropout", [
    ("LoRA fine-tune Llama 3 8B on one H100 with lora_alpha=32 and lora_dropout 0.05", 32, 0.05),
    ("QLoRA Qwen2.5 7B on a 4090, r=16 alpha=32, dropout 0.1", 32, 0.1),
    ("LoRA Llama 3 8B on 1 H100, lora_dropout: 0.1", None, 0.1),
])
def test_peft_alpha_and_dropout_are_read(text, alpha, dropout):
    request = parse_partial(text)
    assert (request.lora_alpha, request.lora_dropout, request.unparsed) == (alpha, dropout, None)


def test_a_full_fine_tune_leaves_a_bare_dropout_unread_and_bad_values_are_one_line():
    """A bare 'dropout' of a full fine-tune is the model's own, which trainplan does not plan: it stays in the
    report's not-understood words rather than becoming an adapter dropout."""
    request = parse_partial("full fine-tune Llama 3 8B on 8 H100s, dropout 0.1")
    assert request.lora_dropout is None and "dropout" in request.unparsed
    with pytest.raises(InputError, match="'lora_dropout=1.5' is not a dropout probability"):
        parse_partial("LoRA Llama 3 8B on 1 H100, lora_dropout=1.5")
    with pytest.raises(InputError, match="'alpha 0' is not a LoRA alpha"):
        parse_partial("LoRA Llama 3 8B on a 4090 with alpha 0")


def test_pure_bf16_is_read_and_the_plan_says_no_export_keeps_its_storage():
    request = parse_partial("full fine-tune Llama 3 8B on one H100 in pure bf16")
    assert request.pure_bf16 is True and request.unparsed is None
    assert parse_partial("full fine-tune Llama 3 8B on one H100 in bf16").pure_bf16 is None


def test_mixed_precision_and_an_fp32_master_pin_the_states_to_mixed_precision():
    for text in ("full fine-tune Llama 3 8B on one H100 with mixed precision",
                 "full fine-tune Llama 3 8B on one H100 with bf16 mixed precision",
                 "full fine-tune Llama 3 8B on one H100 keeping an fp32 master"):
        request = parse_partial(text)
        assert request.pure_bf16 is False and request.unparsed is None, text
    assert parse_partial("full fine-tune Llama 3 8B on one H100 with bf16 mixed precision").precision == "bf16"


@pytest.mark.parametrize(("text", "seq", "documents", "tokens"), [
    ("LoRA Llama 3 8B on an H100 with sample packing", None, None, None),
    ("LoRA Llama 3 8B on an H100, packed to 4096 with documents of 300 tokens", 4096, 300, None),
    ("LoRA Llama 3 8B on an H100, packed into 8k with 400-token documents", 8192, 400, None),
    ("LoRA Llama 3 8B on an H100, packing 10k samples of 300 tokens into 4096", 4096, 300, 3e6),
    ("LoRA Llama 3 8B on an H100, mean document length 1,200, seq 8192", 8192, 1200, None),
])
def test_packing_and_its_documents_are_read(text, seq, documents, tokens):
    request = parse_partial(text)
    assert (request.seq, request.document_tokens, request.tokens) == (seq, documents, tokens)
    assert request.unparsed is None
    assert request.packing is (True if "pack" in text else None)
    # ten thousand documents of 300 tokens unpacked are a data set of 300-token sequences, as samples are
    plain = parse_partial("LoRA Llama 3 8B on an H100, 10k documents of 300 tokens")
    assert (plain.seq, plain.document_tokens, plain.tokens) == (300, None, 3e6)


def test_two_sequence_lengths_are_one_line():
    with pytest.raises(InputError, match="disagree: give one length"):
        parse_partial("LoRA Llama 3 8B on an H100, seq 2048, packed to 4096")


def test_a_packed_plan_says_how_it_timed_attention_and_names_its_documents():
    import trainplan

    bare = trainplan.plan("LoRA Llama 3 8B on an H100 with sample packing", backend="offline")
    assert any(a.startswith("packing read:") for a in bare.assumptions)
    packed = trainplan.plan("LoRA Llama 3 8B on an H100 for 100M tokens, packed into 8k with documents of 400 tokens",
                            backend="offline")
    assert packed.recommended["config"]["document_tokens"] == 400
    assert "seq 8192 of 400-token documents" in packed.to_summary()
    assert not any(a.startswith("packing read:") for a in packed.assumptions)


@pytest.mark.parametrize("text", [
    "full fine-tune Llama 3 8B on an L40S with 8-bit Adam",
    "LoRA Llama 3 8B on a 4090, optim=adamw_bnb_8bit",
    "QLoRA Llama 3 70B on an A100 with paged_adamw_8bit",
    "full fine-tune Llama 3 8B on an H100 with an 8bit optimizer",
])
def test_8bit_adam_is_read(text):
    request = parse_partial(text)
    assert request.optimizer_8bit is True and request.unparsed is None
