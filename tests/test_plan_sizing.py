"""The planner's request handling: a GPU count left open by a deadline or an upper bound is chosen,
and a request its own count cannot meet is told which count would (agent/sizing.py)."""

from __future__ import annotations

import json
import os
import subprocess

from cli_inprocess import run_cli as in_process
import pytest

from trainplan.agent.planner import plan
from trainplan.tools.core.errors import InputError

DEADLINE = "Train Llama 3 8B for 200B tokens in 4 days on H100s, seq 4096, gbs 256"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TRAINPLAN_MODEL")}
    return in_process(*args, env=env)


@pytest.fixture(scope="module")
def deadline_report():
    return plan(DEADLINE, backend="offline")


def test_a_deadline_without_a_count_gets_the_fewest_gpus_that_meet_it(deadline_report):
    request, training = deadline_report.request, deadline_report.recommended["training"]
    assert request["deadline_days"] == 4.0 and request["objective"] == "cost"
    assert training["days"] <= 4.0
    # the fewest GPUs that meet it, or the cheapest count inside the evals' evidence that does (agent/sizing.py)
    how = next(a for a in deadline_report.assumptions if a.startswith(f"gpus not given: {request['gpus']:,} GPUs"))
    assert ", the fewest GPUs" in how or "inside the evals' evidence and finishes by 3.6 days" in how
    # fewer GPUs miss it: the planner says so and names the count that meets it
    fewer = plan(DEADLINE.replace("on H100s", f"on {request['gpus'] // 2} H100s"), backend="offline")
    assert fewer.recommended["training"]["days"] > 4.0
    risk = next(risk for risk in fewer.risks if " GPUs meet the 4-day deadline" in risk)
    named = int(risk.split("; ")[-1].split(" GPUs meet")[0].replace(",", ""))
    assert request["gpus"] // 2 < named <= request["gpus"]   # the fewest that meet it, whatever their layout


def test_up_to_and_cheapest_try_fewer_gpus():
    report = plan("the cheapest way to train Llama 3 8B for 100B tokens with up to 64 H100s, seq 4096, gbs 256",
                  backend="offline")
    request = report.request
    assert (request["objective"], request["max_gpus"]) == ("cost", 64)
    assert report.recommended["config"]["gpus"] == request["gpus"] <= 64
    on_max = plan("Llama 3 8B for 100B tokens on 64 H100s, seq 4096, gbs 256, cheapest", backend="offline")
    assert report.recommended["training"]["cost_usd"] <= on_max.recommended["training"]["cost_usd"]


def test_a_model_that_does_not_fit_is_told_how_many_gpus_fit_it():
    # 8B now fits one H100 with the optimizer on the CPU; 70B bf16 weights (131 GiB) fit no one GPU
    report = plan("Llama 3 70B on 1 H100 for 10B tokens, seq 4096, gbs 64", backend="offline")
    assert report.recommended is None
    risk = next(r for r in report.risks if r.startswith("no layout fits"))
    count = int(risk.split("; ")[1].split(" GPUs fit it")[0].replace(",", ""))
    assert count > 1
    assert plan(f"Llama 3 70B on {count} H100s for 10B tokens, seq 4096, gbs 64",
                backend="offline").recommended is not None


def test_request_json_shows_the_bounds_and_the_words_not_understood():
    result = run_cli("plan", "--backend", "offline", "--json",
                     "Llama 3 8B on 8 H100s for 10B tokens, seq 4096, gbs 64, no tensor parallelism, frobnicate")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for key in ("objective", "max_gpus", "deadline_days", "budget_usd"):
        assert key in data["request"]
    assert data["request"]["tp"] == 1 and data["recommended"]["config"]["tp"] == 1
    assert data["not_understood"] == ["frobnicate"]
    markdown = plan("Llama 3 8B on 8 H100s for 10B tokens, seq 4096, gbs 64, frobnicate", backend="offline")
    assert "Not understood (rephrase them if they matter): frobnicate." in markdown.to_markdown()


@pytest.mark.parametrize("text", ["Llama 3 70B on -512 H100s", "Llama 3 70B on 8 MI400X"])
def test_cli_refuses_with_one_line(text):
    result = run_cli("plan", "--backend", "offline", text)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr


def test_a_budget_without_a_count_gets_the_most_gpus_it_buys():
    text = "Llama 3 8B for 100B tokens on H100s, budget $20K, seq 4096, gbs 256"
    report = plan(text, backend="offline")
    request = report.request
    assert request["objective"] == "time" and report.recommended["training"]["cost_usd"] <= 20_000
    twice = plan(text.replace("on H100s", f"on {2 * request['gpus']} H100s"), backend="offline")
    assert twice.recommended["training"]["cost_usd"] > 20_000
    assert any(risk.startswith(f"no layout on {2 * request['gpus']:,} GPUs meets the $20,000 budget")
               for risk in twice.risks)


def test_a_fine_tune_that_does_not_fit_is_told_which_adapter_method_fits():
    """Issue 11: "a 48 GB GPU needs QLoRA": full fine-tuning of an 8B model does not fit on one 48 GB
    L40S, and the report says LoRA does (tools/perf/finetune.py's memory). A fine-tune that names no method
    is planned with LoRA instead (agent/method_choice.py)."""
    report = plan("Full fine-tune Llama 3 8B on 1 L40S for 1B tokens, seq 2048, gbs 64", backend="offline")
    assert report.recommended is None
    risk = next(r for r in report.risks if r.startswith("no layout fits"))
    assert "with LoRA (adapters beside a frozen bf16 base) it fits" in risk and "--method lora" in risk
    chosen = plan("Fine-tune Llama 3 8B on 1 L40S for 1B tokens, seq 2048, gbs 64", backend="offline")
    assert chosen.recommended["config"]["method"] == "lora"
    assert any(a.startswith("method not given: LoRA") and "full fine-tuning fits no layout" in a
               for a in chosen.assumptions)
    pretrain = plan("Llama 3 8B on 1 L40S for 1B tokens, seq 2048, gbs 64", backend="offline")
    assert not any("LoRA" in r for r in pretrain.risks)  # adapters are no substitute for pre-training


def test_adapter_methods_are_not_planned_as_full_training():
    # The search takes method and lora_rank as fixed knobs, so the plan is a QLoRA layout.
    report = plan("QLoRA fine-tune Llama 3 70B on 1 L40S, rank 64, seq 512", backend="offline")
    config = report.model_dump(mode="json")["recommended"]["config"]
    assert (config["method"], config["lora_rank"]) == ("qlora", 64)


def test_a_deadline_no_count_meets_plans_on_the_most_gpus_the_engine_can_use():
    """A data-parallel-only engine (Axolotl) uses at most one GPU per sequence of the batch; the largest
    count tried (16,384) fits no layout, so a deadline none meets once fell back to it and reported
    'no layout fits'. It plans on the most GPUs a layout can use, and says the deadline is missed."""
    report = plan("Train Llama 3 70B in under 30 days on H100s for 2T tokens", backend="offline", engine="axolotl")
    config = report.recommended["config"]
    assert (config["tp"], config["pp"], config["cp"]) == (1, 1, 1)
    assert config["gpus"] == config["dp"] <= config["gbs"] // config["mbs"]
    assert report.recommended["training"]["days"] > 30
    assert any("none meets the 30-day deadline" in a and "the most GPUs a layout can use" in a
               for a in report.risks)


def test_the_short_report_says_how_the_planner_chose_the_gpu_count(deadline_report):
    """The count a deadline, budget or bound left open heads the short report's table, as the sizing assumption
    words it (without the counts tried); a request that gave the count, or whose count missed (a risk says so),
    has no such row."""
    row = next(line for line in deadline_report.to_summary().splitlines() if line.startswith("| GPUs |"))
    assert row.startswith(f"| GPUs | {deadline_report.request['gpus']:,} GPUs, ") and "days" in row and "tried" not in row
    given = plan("Llama 3 8B on 8 H100s for 10B tokens", backend="offline")
    assert given.sizing_text() == "" and "| GPUs |" not in given.to_summary()


def test_a_fine_tune_deadline_finds_its_count_though_large_counts_have_no_layout():
    """A fine-tune's 16-sequence batch spreads over no more than 16 data-parallel GPUs, so the counts at the top of
    the ladder have no layout at all; the bisection takes them as too many GPUs, not too few, and finds the fewest
    that finish inside the margin (it said 'with less than the 10% margin' of a 1-GPU run taking 7 hours of a day)."""
    report = plan("LoRA Llama 3 8B for 100M tokens in 1 day on A100s", backend="offline")
    row = report.sizing_text()
    assert row.startswith("1 GPU, the fewest GPUs that finish 10% inside the 1-day deadline"), row
    assert report.recommended["training"]["days"] <= 0.9


def test_a_fine_tune_budget_finds_the_most_gpus_it_buys_and_hours_are_a_deadline():
    """The budget bisection, like the deadline's, takes a count with no layout at all as too many GPUs: a LoRA that
    costs $97.64 on 4 A100s said no count met its $100 budget. 'In 12 hours' is a deadline of half a day."""
    budget = plan("LoRA Llama 3 8B for 1B tokens with a $100 budget on A100s", backend="offline")
    assert budget.recommended["training"]["cost_usd"] <= 100 and "none meets" not in budget.sizing_text()
    # the cost is not monotone in the count (1 and 2 A100s over $100, 4 $97.64): the bisection alone misses 4; the
    # look-ahead past its answer, or with no answer the cheapest plan's count, finds it
    text = budget.sizing_text()
    assert text.startswith("4 GPUs, ") and "within the $100 budget" in text, text
    from trainplan.agent.request import parse_partial

    assert parse_partial("full fine-tune Llama 3 8B for 1B tokens in 12 hours on H100s").deadline_days == 0.5
    assert parse_partial("Llama 3 70B in 8 H100s for 1T tokens").deadline_days is None   # 'H100' is no hour


def test_a_fine_tune_on_more_gpus_than_its_default_batch_gets_one_sequence_per_gpu():
    """The fine-tuning stacks are data parallel, so the default batch holds a sequence per GPU: a full fine-tune of
    a 70B on 32 A100s with DeepSpeed ZeRO-3 failed with 'gbs=16 is not divisible by dp*mbs=32*1=32'."""
    from trainplan.tools.config.plan_defaults import FINETUNE_GBS, default_finetune_gbs

    assert [default_finetune_gbs(g) for g in (1, 8, 16, 32, 48)] == [FINETUNE_GBS, FINETUNE_GBS, 16, 32, 64]
    report = plan("full fine-tune Llama 3 70B on 4 nodes of 8 A100 80GB with deepspeed zero3, seq 4096",
                  backend="offline")
    assert report.recommended["config"]["gbs"] == 32 and report.recommended["config"]["dp"] == 32


def test_a_fine_tune_naming_no_gpu_count_is_planned_on_up_to_one_node_by_cost():
    """'how much does it cost to fine-tune ... on A100s?' answered 'the request needs how many GPUs'; a fine-tune
    is planned on up to one node of its GPU, by cost when it names no objective, and says so. A pre-training
    request still needs its count."""
    report = plan("how much does it cost to fine-tune Llama 3 70B with QLoRA on 100M tokens on A100s?",
                  backend="offline")
    assert report.assumptions[0].startswith("GPU count not given: a fine-tune is planned on up to one node (8 x ")
    assert report.request["max_gpus"] == 8 and report.request["objective"] == "cost"
    assert 1 <= report.recommended["config"]["gpus"] <= 8 and report.recommended["training"]["cost_usd"] > 0
    with pytest.raises(InputError, match="needs how many GPUs"):
        plan("Llama 3 70B on H100s for 1T tokens", backend="offline")
