"""The parser reads the engine, the pipeline schedule and 'at least N GPUs' as users write them (issue 11,
parser): an engine named in the text restricts the plan as `trainplan plan --engine` does (the flag wins),
a schedule is pinned as `estimate --schedule` pins it, and a lower bound on the count is planned at that
count and said so in the assumptions."""

from __future__ import annotations

import pytest

from trainplan.agent.job_defaults import complete_request
from trainplan.agent.planner import plan
from trainplan.agent.request import merge, parse_partial
from trainplan.tools.core.enums import Schedule
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.engines import ENGINES


@pytest.mark.parametrize("text, engine", [
    ("Train Llama 3 70B on 512 H100s using DeepSpeed", "deepspeed"),
    ("llama3-8b, 64 H100s, deepspeed zero-3", "deepspeed"),
    ("Llama 3 8B with torchtitan on 64 H100s", "torchtitan"),
    ("Llama 3 70B in Megatron-LM on 1024 H100s", "megatron"),
    ("plan llama 3 405b w/ megatron core, 16k H100", "megatron"),
    ("fine-tune Llama 3 8B with Axolotl on 8 H100s", "axolotl"),
    ("Llama 3 8B LoRA, LLaMA-Factory, 8 A100s", "llamafactory"),
    ("SFT Llama 3 8B on 8 H100s with TRL", "trl"),
    ("Mistral 7B on 8 A100s using HF Accelerate", "accelerate"),
    ("Llama 3 70B on 512 H100s, not DeepSpeed but Megatron", "megatron"),
])
def test_an_engine_named_in_the_text_is_the_plans_engine(text, engine):
    got = parse_partial(text)
    assert got.engine == engine and engine in ENGINES
    assert not any(w.lower() in ("deepspeed", "torchtitan", "megatron", "axolotl", "trl", "accelerate")
                   for w in got.unparsed or [])


def test_llama_factory_is_an_engine_not_a_model_and_megatron_turing_no_engine():
    got = parse_partial("Mistral 7B with LLaMA-Factory on 8 H100s")
    assert (got.model, got.engine) == ("mistral-7b", "llamafactory")
    assert parse_partial("Megatron-Turing NLG on 512 A100s").engine is None


@pytest.mark.parametrize("text", ["Llama 3 70B on 512 H100s, not DeepSpeed",
                                  "Llama 3 70B on 512 H100s without Megatron-LM",
                                  "Llama 3 8B on 8 H100s, don't use TRL"])
def test_a_refused_engine_sets_none_and_is_reported_as_not_understood(text):
    got = parse_partial(text)
    assert got.engine is None
    assert got.unparsed  # the report lists the refusal: a plan names one engine or none


def test_two_engines_named_is_one_clear_error():
    with pytest.raises(InputError, match="names 2 engines.*deepspeed.*megatron|megatron.*deepspeed"):
        parse_partial("Llama 3 70B on 512 H100s with DeepSpeed or Megatron")


@pytest.mark.parametrize("text, schedule", [
    ("Llama 3 70B on 512 H100s with DualPipe", "dualpipe"),
    ("DeepSeek-V3 on 2048 H800s, dualpipe schedule", "dualpipe"),
    ("Llama 3 70B on 512 H100s, interleaved 1F1B", "interleaved"),
    ("Llama 3 70B on 512 H100s using the interleaved pipeline schedule", "interleaved"),
    ("Llama 3 70B on 512 H100s, 1F1B, PP 4", "1f1b"),
    ("Llama 3 70B on 512 H100s with a zero bubble schedule", "zb-h1"),
    ("Llama 3 70B on 512 H100s, ZB-H1", "zb-h1"),
    ("Llama 3 70B on 512 H100s, zero-bubble, ZeRO-1", "zb-h1"),
    ("Llama 3 70B on 512 H100s with GPipe", "gpipe"),
])
def test_a_schedule_named_in_the_text_is_pinned(text, schedule):
    got = parse_partial(text)
    assert got.schedule == schedule and Schedule(schedule)
    assert got.gpu and got.gpus and not got.unparsed


def test_zero_bubble_is_no_zero_stage_and_zero_stages_still_read():
    assert parse_partial("Llama 3 70B on 512 H100s, zero bubble").zero is None
    assert parse_partial("Llama 3 70B on 512 H100s, zero-bubble, ZeRO-1").zero == 1


def test_a_refused_schedule_pins_nothing():
    got = parse_partial("Llama 3 70B on 512 H100s, no DualPipe")
    assert got.schedule is None and "DualPipe" in got.unparsed


@pytest.mark.parametrize("text", ["Llama 3 70B on at least 256 H100s",
                                  "Llama 3 70B, 256 H100s or more",
                                  "Llama 3 70B on no fewer than 256 H100s",
                                  "Llama 3 70B, minimum of 256 H100s"])
def test_at_least_is_a_lower_bound_planned_at_that_count_and_said_so(text):
    got = parse_partial(text)
    assert (got.gpus, got.max_gpus, got.gpus_at_least, got.unparsed) == (256, None, True, None)
    _, assumptions = complete_request(got)
    assert any("at least 256" in a and "planned at 256" in a for a in assumptions)


def test_an_exact_count_is_no_lower_bound_and_a_follow_up_clears_it():
    assert parse_partial("Llama 3 70B on 256 H100s").gpus_at_least is None
    before = parse_partial("Llama 3 70B on at least 256 H100s")
    after = merge(before, parse_partial("what if I only have 128 GPUs?"))
    assert (after.gpus, after.gpus_at_least) == (128, None)
    _, assumptions = complete_request(after)
    assert not any("was planned at" in a for a in assumptions)


def test_the_text_engine_restricts_the_plan_and_an_explicit_engine_wins():
    text = "Llama 3 8B on 8 H100s for 10B tokens using DeepSpeed"
    from_text = plan(text, backend="offline")
    assert from_text.launch.engine == "deepspeed"
    assert any("deepspeed can run" in a for a in from_text.assumptions)
    explicit = plan(text, backend="offline", engine="megatron")
    assert explicit.launch.engine == "megatron"
    assert not any("deepspeed" in a for a in explicit.assumptions)
