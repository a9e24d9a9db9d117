"""The grounding check: which numbers are read, and which sources ground them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainplan.agent.grounding import UNGROUNDED_MARK, RequestText, check_grounding, mark_ungrounded
from trainplan.agent.number_mentions import extract_numbers

RESULT = {
    "params": {"total": 70_553_706_496, "active": 70_553_706_496},
    "memory_gib": {"weights": 16.43, "optimizer": 12.32, "total": 74.53, "capacity": 79.65},
    "fits": True,
    "time": {"step_s": 8.412, "tokens_per_s": 124_652.3, "mfu": 0.41237, "bubble_fraction": 0.0625},
    "training": {"tokens": 15.6e12, "steps": 3_719_329, "days": 38.6, "gpu_hours": 1_234_567.8,
                 "cost_usd": 2_469_135.6, "goodput": 0.9},
    "config": {"tp": 8, "pp": 4, "dp": 2, "cp": 1, "zero": 1, "mbs": 1, "gbs": 1024, "seq": 131072,
               "schedule": "1f1b"},
}
REQUEST = "Plan llama3-405b on 1024 h100-sxm-80gb GPUs for 15.6T tokens at $2.10 per GPU-hour."
SOURCES = [RESULT, REQUEST]


def texts(text: str) -> list[str]:
    return [m.text for m in extract_numbers(text)]


def ungrounded(text: str, sources: list = SOURCES) -> list[str]:
    return [m.text for m in check_grounding(text, sources).ungrounded]


# --- what is read --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("74.5 GiB of 80 GB", ["74.5 GiB", "80 GB"]),
    ("80GB and 900 GB/s", ["80GB", "900 GB/s"]),
    ("MFU 41.2% (41.2 percent)", ["41.2%", "41.2 percent"]),
    ("$1.23M, $ 2,469,136 and 1,234,567.8", ["$1.23M", "$ 2,469,136", "1,234,567.8"]),
    ("15.6T tokens = 15.6e12 = 1.56 x 10^13", ["15.6T", "15.6e12", "1.56 x 10^13"]),
    ("2 million GPU-hours, 1.5M, 8k, 2B", ["2 million", "1.5M", "8k", "2B"]),
    ("step 8.41s, 450ms, 450 ms, 3h", ["8.41s", "450ms", "450 ms", "3h"]),
    ("8x faster on 8xH100; grid 8x8x16", ["8x", "8x", "8x", "8x", "16"]),
    ("4-8 GPUs; 8-GPU nodes; 1/3 of the time", ["4", "8", "8", "1", "3"]),
    ("989 TFLOPs dense, 1979TFLOPS sparse", ["989", "1979TFLOPS"]),
])
def test_numbers_and_units_are_read(text, expected):
    assert texts(text) == expected


@pytest.mark.parametrize(("text", "value", "quantum", "unit"), [
    ("$1.23M", 1.23e6, 1e4, "$"),
    ("41.2%", 41.2, 0.1, "%"),
    ("15.6e12", 15.6e12, 1e11, None),
    ("1,234,567", 1234567, 1, None),
    ("1,200", 1200, 100, None),  # trailing zeros: two significant digits at least
    ("2048", 2048, 1, None),
    ("100000", 100000, 1e4, None),
    ("80 GB", 80, 1, "GB"),
    ("2 million", 2e6, 1e6, None),
])
def test_value_precision_and_unit(text, value, quantum, unit):
    (mention,) = extract_numbers(text)
    assert mention.value == pytest.approx(value)
    assert mention.quantum == pytest.approx(quantum)
    assert mention.unit == unit
    assert text[mention.start:mention.end] == mention.text


@pytest.mark.parametrize("text", [
    "llama3-70b, llama3-405b, gpt3-175b, deepseek-v3",
    "H100, H100s, A100-SXM-80GB, a100-sxm-40gb, h200-sxm-141gb, B200",
    "bf16, fp8, FP8, 1F1B, 1f1b, zb-h1, ZB-H1, interleaved-1f1b",
    "Llama-3, GPT-3, v3.1, version 1.2.3, x86_64, the 3rd stage, 2D and 3D parallelism",
])
def test_identifiers_are_not_numbers(text):
    assert texts(text) == []


@pytest.mark.parametrize("text", [
    "1. Layout\n2. Memory\n  3) Cost\n(4) Risks\n- 5. nested",
    "## 1. Recommended layout\n### 2.1 Memory",
    "as shown in [1] and [12]; the #1 candidate",
    "Option 2 and Alternative 3 beat Candidate 1; see Table 2, Fig. 3 and Section 4.",
    "Korthikanti et al. 2022 showed it (Narayanan et al., 2021).",
    "Llama-3 (Meta, 2024) was released in 2024.",
    "Published in July 2024, since 2023.",
])
def test_markers_ordinals_and_years_are_exempt(text):
    assert texts(text) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("2024 GPUs", ["2024"]),  # a year-like count is still a number
    ("in 2000 steps", ["2000"]),
    ("Option 32 of 40", ["32", "40"]),  # ordinal exemption only up to 20
    ("It takes\n3.5 days.", ["3.5"]),
    ("Use 2 nodes.\n1024 GPUs", ["2", "1024"]),
])
def test_exemptions_are_narrow(text, expected):
    assert texts(text) == expected


def test_layout_tokens_are_read_as_their_degree():
    mentions = extract_numbers(
        "Use TP8 x PP4, tp8xpp4, VPP2, DP128, EP64, CP2, tp=8, PP 4 and ZeRO-1 with mbs=1.")
    assert [(m.text, m.value, m.layout_key) for m in mentions] == [
        ("TP8", 8, "tp"), ("PP4", 4, "pp"), ("tp8", 8, "tp"), ("pp4", 4, "pp"), ("VPP2", 2, "vpp"),
        ("DP128", 128, "dp"), ("EP64", 64, "ep"), ("CP2", 2, "cp"), ("tp=8", 8, "tp"), ("PP 4", 4, "pp"),
        ("ZeRO-1", 1, "zero"), ("1", 1, None)]


def test_layout_tokens_need_their_own_key():
    # 4 and 8 are both in RESULT, but under pp and tp respectively.
    assert ungrounded("Use TP8 x PP4 (tp=8, pp=4).") == []
    assert ungrounded("Use TP4 x PP8.") == ["TP4", "PP8"]
    assert ungrounded("Use ZeRO-3 or ZeRO-1.") == ["ZeRO-3"]
    assert ungrounded("Use TP16.", ["please use tp=16", {"x": 2}]) == []
    assert ungrounded("Use TP16.", ['{"config": {"tp": 16}}']) == []  # tool content as JSON text
    assert ungrounded("Use TP16 with 16 GPUs.", [{"gpus": 16}]) == ["TP16"]


def test_k_reads_as_thousand_or_1024():
    assert ungrounded("8K and 128K context", [{"seq": 8192}, {"seq": 131072}]) == []
    assert ungrounded("8K", [{"seq": 8000}]) == []
    assert ungrounded("9K", [{"seq": 8192}]) == ["9K"]


# --- what grounds it -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    # GiB/GB: the same number, or a GiB figure converted to GB (x 2^30/1e9)
    "Peak memory 74.5 GiB of 79.65 GiB.",
    "Peak memory 74.53 GB.",
    "Peak memory 80.0 GB (74.5 GiB); the weights take 17.6 GB.",
    # % vs fraction
    "MFU 41.2%, 41%, 41.24 percent; bubble 6.25%; goodput 90%.",
    "MFU 0.41, bubble fraction 0.0625.",
    # K/M/B/T suffixes and words, rounding at the stated precision
    "70.6B parameters, 70.55 billion, 124.7K tokens/s, 125k tokens/s, 1.23M GPU-hours, 1.2 million.",
    "15.6T tokens, 15.6e12 tokens, 1.56 x 10^13 tokens, 3.72M steps, 3,719,329 steps.",
    "128K context (131,072 tokens).",
    # $ and commas
    "Cost $2.47M ($2,469,136, about $2.5M, 2.469 million dollars).",
    "The run takes 38.6 days (39 days) and 1,234,568 GPU-hours; 1,200,000 is too rough? no: 1.2M.",
    # time, plain numbers
    "A step takes 8.41 s (8.4s, 8412 ms).",
    # layout and config values
    "TP8 x PP4 x DP2 with ZeRO-1, mbs 1, gbs 1,024, seq 131072, 1F1B.",
    # numbers from the user's request, including inside its identifiers
    "Llama 3 405B on 1,024 GPUs at $2.10/GPU-hour ($2.1).",
])
def test_grounded(text):
    assert ungrounded(text) == []


@pytest.mark.parametrize(("text", "bad"), [
    ("Peak memory 75.1 GiB.", ["75.1 GiB"]),
    ("Peak memory 81 GB.", ["81 GB"]),
    ("MFU 45%.", ["45%"]),
    ("MFU 41.3%.", ["41.3%"]),  # 0.41237 rounds to 41.2
    ("It costs $3.1M.", ["$3.1M"]),
    ("It costs $2.48M.", ["$2.48M"]),
    ("1,234,000 GPU-hours.", ["1,234,000"]),  # read at 4 significant digits: 1,235,000
    ("15.7T tokens", ["15.7T"]),
    ("64K context", ["64K"]),
    ("on 2048 GPUs for 52 days, 7 nodes", ["2048", "52", "7"]),
    ("A step takes 9.1 s.", ["9.1"]),
])
def test_ungrounded(text, bad):
    assert ungrounded(text) == bad


def test_small_integers_need_a_source():
    assert ungrounded("Use 2 nodes and 3 stages.", [{"nodes": 2}]) == ["3"]
    assert ungrounded("Use 2 nodes.", [{"fits": True}]) == ["2"]  # booleans are not numbers


def test_sources_nest_and_strings_are_scanned():
    sources = [{"candidates": [{"config": {"tp": 16}}, {"rejected": {"tp*pp>gpus": 37}}]},
               '{"step_s": 3.25}', "budget $2M"]
    assert ungrounded("TP16, 37 rejected, 3.25 s per step, $2M budget, $2.0M.", sources) == []


def test_report_counts_and_share():
    report = check_grounding("74.5 GiB, 41.2%, $9M and 13 days.", SOURCES)
    assert [g.mention.text for g in report.grounded] == ["74.5 GiB", "41.2%"]
    assert report.grounded[1].source_value == pytest.approx(0.41237)
    assert [m.text for m in report.ungrounded] == ["$9M", "13"]
    assert report.share_grounded == 0.5 and not report.ok
    assert check_grounding("No numbers here.", []).ok
    assert check_grounding("No numbers here.", []).share_grounded is None  # nothing checked: no share


def test_mark_ungrounded():
    text = "It costs $9M over 13 days; MFU 41.2%."
    report = check_grounding(text, SOURCES)
    assert mark_ungrounded(text, report.ungrounded) == \
        "It costs $9M [ungrounded] over 13 [ungrounded] days; MFU 41.2%."


# --- properties ----------------------------------------------------------------------------------


@given(value=st.floats(min_value=1e-3, max_value=1e15, allow_nan=False), digits=st.integers(1, 6))
def test_any_value_quoted_at_any_precision_is_grounded(value, digits):
    quoted = f"{value:.{digits}g}"
    if "e" in quoted:
        mantissa, exponent = quoted.split("e")
        quoted = f"{mantissa}e{int(exponent)}"
    assert ungrounded(f"The value is {quoted}.", [{"x": value}]) == []


@given(value=st.floats(min_value=1.0, max_value=1e12, allow_nan=False),
       suffix=st.sampled_from([("M", 1e6), ("B", 1e9), ("T", 1e12)]))
def test_suffixed_values_round_both_ways(value, suffix):
    letter, scale = suffix
    quoted = f"{value / scale:.2f}{letter}"
    assert ungrounded(f"About {quoted} in total.", [{"x": value}]) == []
    off_by = 0.02 * scale  # two steps of the last digit away
    assert ungrounded(f"About {quoted} in total.", [{"x": value + off_by}]) == [quoted]


@given(fraction=st.floats(min_value=0.0005, max_value=1.0, allow_nan=False))
def test_fraction_quoted_as_percent(fraction):
    quoted = f"{fraction * 100:.1f}%"
    assert ungrounded(f"MFU is {quoted}.", [{"mfu": fraction}]) == []


@given(gib=st.floats(min_value=0.5, max_value=2000, allow_nan=False))
def test_gib_quoted_as_gb(gib):
    assert ungrounded(f"It needs {gib * 2**30 / 1e9:.1f} GB or {gib:.1f} GB.", [{"memory_gib": {"total": gib}}]) == []


# --- units fit fields; weak, request and empty answers; markers outside code (issue 12 item 4) ------


@pytest.mark.parametrize(("text", "source", "bad"), [
    ("about 8 GiB", {"gpus": 8}, ["8 GiB"]),  # a GPU count is not memory
    ("about 8 GiB", {"memory_gib": {"activations": 8.2}}, []),
    ("8 GB/s", {"memory_gib": {"total": 8}}, ["8 GB/s"]),  # a bandwidth is not memory
    ("900 GB/s", {"intra_node_bw": 900}, []),
    ("8% of the step", {"config": {"tp": 8}}, ["8%"]),  # a TP degree is not a share
    ("8% of the step", {"time": {"bubble_fraction": 0.081}}, []),
    ("8 days", {"num_layers": 8}, ["8"]),  # a layer count is not a duration
    ("8 days", {"training": {"days": 8.2}}, []),
    ("a 30-day deadline", {"deadline_days": 30}, []),
    ("$80", {"memory_gib": {"capacity": 80}}, ["$80"]),  # memory is not money
    ("$80", {"training": {"cost_usd": 80.4}}, []),
    ("2.5 s per step", {"training": {"days": 2.5}}, ["2.5"]),  # days are not seconds
    ("2.5 s per step", {"time": {"step_s": 2.5}}, []),
    ("450 ms", {"time": {"step_s": 0.45}}, []),
    ("comm 0.31 s", {"time": {"breakdown": {"comm/tp": 0.312}}}, []),
    ("36 hours", {"training": {"days": 1.5}}, []),
    ("12.5K tokens/s", {"time": {"tokens_per_s": 12_500}}, []),  # a rate is not a time
    ("12.5 s", {"time": {"tokens_per_s": 12.5}}, ["12.5"]),
])
def test_a_unit_is_grounded_only_by_a_field_of_its_kind(text, source, bad):
    assert ungrounded(text, [source]) == bad


def test_units_in_source_prose_give_the_kind():
    sources = [RequestText("Llama 3 70B on 64 H100s at $2/GPU-hour within 30 days"),
               {"notes": ["needs 85.3 GiB, more than the 79.65 GiB capacity"]}]
    assert ungrounded("$2 per GPU-hour, 30 days, 85.3 GiB > 79.65 GiB", sources) == []
    assert ungrounded("2 GiB, 30%, $85.3", sources) == ["2 GiB", "30%", "$85.3"]


def test_one_or_two_digit_matches_are_weak_and_reported_apart():
    report = check_grounding("About 16 GiB of weights (16.43 GiB), MFU 41% (41.2%), 39 days, TP8, mbs 1.", SOURCES)
    assert [g.mention.text for g in report.weak] == ["16 GiB", "41%", "39", "1"]
    assert [g.mention.text for g in report.grounded] == ["16.43 GiB", "41.2%", "TP8"]  # layout keys are never weak
    assert report.ok and report.share_grounded == 1.0
    assert [m.digits for m in extract_numbers("10 GiB, 8%, 0.41, 1,024, 1,200, 2.0, $2M")] == [1, 1, 2, 4, 2, 2, 1]


def test_numbers_found_only_in_the_request_are_marked_as_such():
    report = check_grounding("1,024 sequences per step at $2.10 per GPU-hour; 74.53 GiB per GPU.",
                             [RESULT, RequestText(REQUEST)])
    assert report.ok
    assert [(g.mention.text, g.origin) for g in report.grounded] == [
        ("1,024", "tool"), ("$2.10", "request"), ("74.53 GiB", "tool")]
    assert [g.mention.text for g in report.from_request] == ["$2.10"]
    assert report.grounded[2].kind == "memory"


def test_an_empty_answer_is_not_grounded():
    for text in ("", "  \n"):
        report = check_grounding(text, SOURCES)
        assert report.empty and not report.ok and report.share_grounded is None and report.checked == 0
    assert check_grounding("It fits.", SOURCES).ok  # a non-empty answer without numbers has nothing wrong


def test_markers_never_go_inside_code():
    text = ("Run `--tensor-model-parallel-size 7` and:\n\n```bash\ntorchrun --nproc-per-node 9 train.py\n```\n"
            "It costs $9M.")
    marked = mark_ungrounded(text, check_grounding(text, SOURCES).ungrounded)
    assert marked == ("Run `--tensor-model-parallel-size 7` [ungrounded] and:\n\n```bash\n"
                      "torchrun --nproc-per-node 9 train.py\n```\n[ungrounded] in the block above: 9\n"
                      "It costs $9M [ungrounded].")
    # an unclosed fence runs to the end of the text
    assert mark_ungrounded("```\nx = 9\n", check_grounding("```\nx = 9\n", []).ungrounded) == \
        "```\nx = 9\n\n[ungrounded] in the block above: 9"


@given(numbers=st.lists(st.integers(2, 10**6), min_size=1, max_size=5), fence=st.sampled_from(["```", "~~~"]))
def test_marking_leaves_every_code_block_intact(numbers, fence):
    block = f"{fence}text\n" + "\n".join(f"value {n}" for n in numbers) + f"\n{fence}"
    text = f"Numbers {numbers[0]} and `{numbers[-1]}`:\n{block}\nend {numbers[0]}."
    marked = mark_ungrounded(text, check_grounding(text, []).ungrounded)
    assert block in marked and f"`{numbers[-1]}`" in marked
    assert marked.count(UNGROUNDED_MARK) == 4
