"""The plan report of a fine-tuning request: it states the method's memory convention, shows the method
and rank, and uses the fine-tuning defaults (plan_defaults.FINETUNE_*), not pre-training ones."""

from __future__ import annotations

import re

import pytest

from trainplan.agent.planner import plan
from trainplan.tools.perf import finetune
from trainplan.tools.perf.finetune import ADAPTER_OPTIMIZER_BYTES, NF4_BYTES_PER_PARAM
from trainplan.tools.config.resolve import DEFAULT_LORA_RANK
from trainplan.tools.config.plan_defaults import FINETUNE_GBS, FINETUNE_SEQ, finetune_seqs
from trainplan.tools.search.driver import search


@pytest.fixture(scope="module")
def qlora_70b():
    """At a stated 512 tokens (QLoRA's Guanaco length), where axolotl's data-parallel layouts fit; with no seq the
    plan is at the longest that fits (test_a_fine_tune_with_no_seq_...)."""
    return plan("fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq 512", backend="offline")


@pytest.fixture(scope="module")
def lora_8b():
    return plan("LoRA fine-tune Llama 3 8B on 1 RTX 4090", backend="offline")


def _memory_sentence(report) -> str:
    markdown = report.to_markdown()
    return markdown.split("## Memory per GPU", 1)[1].split("|", 1)[0]


def test_qlora_memory_sentence_states_the_nf4_base_and_paged_adapter_states(qlora_70b):
    sentence = _memory_sentence(qlora_70b)
    assert "NF4 with double quantisation" in sentence and f"{NF4_BYTES_PER_PARAM:.4g} B/param" in sentence
    assert "paged" in sentence and "fp32 master" not in sentence and "Megatron" not in sentence


def test_lora_memory_sentence_states_the_frozen_bf16_base_and_adapter_states(lora_8b):
    sentence = _memory_sentence(lora_8b)
    assert "frozen bf16 base" in sentence and f"Adam m + v ({ADAPTER_OPTIMIZER_BYTES:.4g})" in sentence
    assert "NF4" not in sentence and "fp32 master" not in sentence


def test_the_sentence_is_derived_from_the_byte_figures(monkeypatch):
    config = {"method": "qlora", "zero": 3, "lora_rank": 64, "lora_targets": "attention"}
    monkeypatch.setattr(finetune, "NF4_BYTES_PER_PARAM", 0.75)
    sentence = finetune.model_states_sentence(config)
    assert "6.000 bits = 0.75 B/param" in sentence and "rank-64" in sentence and "attention" in sentence
    assert "ZeRO-3" in sentence
    full = finetune.model_states_sentence({"zero": 1})
    assert "fp32 master + Adam m + v (12)" in full and "ZeRO-1" in full


def test_request_table_shows_method_and_rank(qlora_70b, lora_8b):
    for report, method in ((qlora_70b, "qlora"), (lora_8b, "lora")):
        assert report.request["method"] == method and report.request["lora_rank"] == DEFAULT_LORA_RANK
        assert f"| method | {method}, LoRA rank {DEFAULT_LORA_RANK}, targets all-linear |" in report.to_markdown()
    ranked = plan("QLoRA fine-tune Llama 3 8B on 1 RTX 4090, rank 64", backend="offline")
    assert "| method | qlora, LoRA rank 64, targets all-linear |" in ranked.to_markdown()


@pytest.mark.parametrize(("text", "method", "targets"), [
    ("fine-tune Llama 3 8B with LoRA on attention only on 8 H100s", "lora", "attention"),
    ("QLoRA of Llama 3 8B on 1 RTX 4090 with adapters on the attention projections", "qlora", "attention"),
    ("LoRA rank 32 on all linear layers, Llama 3 8B on 8 H100s", "lora", "all-linear"),
    ("Llama 3 8B on 8 H100s with adapters on the attention layers", "lora", "attention"),
    ("LoRA of Llama 3 8B on q and v on 1 RTX 4090", "lora", "qv"),
    ("QLoRA on the query and value projections of Llama 3 8B on 1 RTX 4090", "qlora", "qv"),
])
def test_plain_language_names_the_adapter_targets(text, method, targets):
    report = plan(text, backend="offline")
    config = report.recommended["config"]
    assert (config["method"], config["lora_targets"]) == (method, targets) and not report.not_understood
    assert f"targets {targets} |" in report.to_markdown()
    layout = report.to_markdown().split("## Recommended layout", 1)[1].split("## Memory per GPU", 1)[0]
    assert ("the attention projections" in layout) is (targets == "attention")


def test_fine_tunes_use_the_fine_tuning_defaults_and_invent_no_token_budget(qlora_70b, lora_8b):
    for report in (qlora_70b, lora_8b):
        assert report.recommended is not None, report.risks   # both fit at the fine-tuning defaults
        config = report.recommended["config"]
        assert config["gbs"] == FINETUNE_GBS   # sequences at any length, as the recipes set it
        assert report.request["tokens"] is None and "training" not in report.recommended
        text = " ".join(report.assumptions)
        assert "fine-tuning default" in text and "QLoRA paper" in text
        assert "per parameter" not in text and "compute-optimal" not in text
    assert lora_8b.recommended["config"]["seq"] == FINETUNE_SEQ
    assert any(a.startswith("seq not given") and "llama3_lora_sft.yaml" in a for a in lora_8b.assumptions)
    pretrain = plan("Llama 3 8B on 8 H100s", backend="offline")
    assert pretrain.request["seq"] == 8192 and pretrain.request["tokens"] > 1e11
    assert "Model states follow Megatron" in pretrain.to_markdown()


def test_a_fine_tune_with_tokens_gets_its_cost():
    report = plan("LoRA fine-tune Llama 3 8B on 1 RTX 4090 for 100M tokens", backend="offline")
    assert report.recommended["training"]["tokens"] == pytest.approx(100e6)
    assert report.recommended["training"]["cost_usd"] > 0


def test_no_fit_says_which_shorter_sequence_would_fit():
    report = plan("fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq 8192", backend="offline")
    assert report.recommended is None
    risk = next(r for r in report.risks if r.startswith("no layout fits"))   # axolotl's: data parallel only
    seq = int(re.search(r"at seq (\d+) it fits on the same 2 GPUs", risk).group(1))
    # data parallelism shards the NF4 base, not a sequence's activations: more such GPUs do not fit seq 8192
    assert seq < 8192 and "else use GPUs with more memory" in risk
    # no engine runs PEFT's adapters tensor- or pipeline-parallel, so no fallback engine fits what axolotl cannot
    assert not any(r.startswith("with deepspeed") for r in report.risks)
    shorter = plan(f"fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq {seq}", backend="offline")
    assert shorter.recommended is not None and shorter.recommended["config"]["tp"] == 1


@pytest.mark.parametrize("text, gpus", [
    ("LoRA fine-tune Llama 3 8B on one RTX 4090", 1),
    ("QLoRA Llama 3 8B on a single H100", 1),
    ("Llama 3 8B on one H100 node", 8),         # a node of 8, not one GPU
])
def test_one_gpu_in_words_is_a_count_of_one(text, gpus):
    from trainplan.agent.request import parse_partial

    assert parse_partial(text).gpus == gpus


def test_adapter_plans_launch_with_a_peft_trainer(qlora_70b, lora_8b):
    """Megatron's arguments carry no adapters: a LoRA/QLoRA plan with no engine named is searched over
    and launched with offline_plan.ADAPTER_ENGINE (data parallel + ZeRO/FSDP, as PEFT fine-tunes run)."""
    for report, method in ((qlora_70b, "qlora"), (lora_8b, "lora")):
        assert report.launch.engine == "axolotl" and report.launch.error is None
        assert f"adapter: {method}" in report.launch.content
        assert report.recommended["config"]["tp"] == report.recommended["config"]["pp"] == 1


def test_an_adapter_plan_is_never_model_parallel():
    """QLoRA 70B on two 24 GB cards at 1,024 tokens: no data-parallel layout fits, and no engine runs PEFT's adapters
    tensor- or pipeline-parallel (DeepSpeed's AutoTP and pipeline engine refuse them), so the plan says what fits
    instead of recommending a layout no launch file runs."""
    from trainplan.tools.config.engines import ADAPTER_FALLBACK

    report = plan("fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq 1024", backend="offline")
    assert report.recommended is None
    assert not any(a.startswith("no engine named:") for a in report.assumptions)
    for engine in ADAPTER_FALLBACK:
        assert not any(r.startswith(f"with {engine}") for r in report.risks)


def test_the_recommended_layout_says_what_is_trained(qlora_70b, lora_8b):
    for report in (qlora_70b, lora_8b):
        config = report.recommended["config"]
        layout = report.to_markdown().split("## Recommended layout", 1)[1].split("## Memory per GPU", 1)[0]
        name = {"qlora": "QLoRA", "lora": "LoRA"}[config["method"]]
        assert f"- {name}: rank-{config['lora_rank']} adapters on every linear layer" in layout
        assert ("4-bit NF4" in layout) is (config["method"] == "qlora")
    full = plan("Llama 3 8B on 8 H100s for 10B tokens", backend="offline")
    assert "adapters" not in full.to_markdown().split("## Memory per GPU", 1)[0]


def test_the_estimates_notes_reach_the_plan(qlora_70b):
    assumptions = qlora_70b.to_markdown().split("## Assumptions", 1)[1]
    assert qlora_70b.recommended["notes"]
    for note in qlora_70b.recommended["notes"]:  # QLoRA's paged optimizer, the RTX 4090's assumed efficiencies
        assert f"- {note}" in assumptions
    assert "paged" in assumptions and "rtx-4090: GEMM and attention efficiencies are assumed" in assumptions


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_every_entry_point_gives_a_fine_tune_the_planners_defaults(method):
    """estimate, search, the search tool and export fill a LoRA/QLoRA job's seq and gbs as the planner does
    (plan_defaults.FINETUNE_*), and say so; full training keeps the pre-training defaults."""
    from trainplan.tools.perf.estimate import estimate
    from trainplan.agent.registry import dispatch
    from trainplan.tools.search.driver import search

    planned = plan(f"{method} fine-tune Llama 3 8B on 8 H100s", backend="offline").recommended["config"]
    estimated = estimate("llama3-8b", "h100", 8, method=method).model_dump(mode="json")
    found = search(model="llama3-8b", gpu="h100", gpus=8, method=method, top_k=1)
    tool = dispatch("search_configs", {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "method": method, "top_k": 1})
    for seq, gbs in ((planned["seq"], planned["gbs"]), (estimated["config"]["seq"], estimated["config"]["gbs"]),
                     (found.job.seq, found.job.gbs)):
        assert (seq, gbs) == (FINETUNE_SEQ, FINETUNE_GBS)
    for notes in (estimated["notes"], tool["notes"]):
        assert any(note.startswith("gbs not given") and "a fine-tuning default" in note for note in notes)
    full = estimate("llama3-8b", "h100", 8).model_dump(mode="json")
    assert full["config"]["seq"] == 8192 and full["config"]["gbs"] > FINETUNE_GBS


def test_a_fine_tune_with_no_seq_is_planned_at_the_longest_length_that_fits():
    """QLoRA 70B on two 24 GB cards: no engine fits a layout at the recipes' 2,048 tokens, so the plan is at the
    longest power of two below that fits, and says so; at twice that length no plan fits."""
    report = plan("fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s", backend="offline")
    assert report.recommended is not None, report.risks
    seq = report.recommended["config"]["seq"]
    assert seq in finetune_seqs(8192)[1:] and report.request["seq"] == seq
    note = next(a for a in report.assumptions if a.startswith("seq not given"))
    assert f"planned at {seq:,} tokens, the longest that fits" in note and f"recipes use {FINETUNE_SEQ:,}" in note
    longer = plan(f"fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq {2 * seq}", backend="offline")
    assert longer.recommended is None


def test_the_lengths_a_fine_tune_may_be_planned_at_halve_from_the_recipes_to_the_shortest():
    from trainplan.tools.config.plan_defaults import FINETUNE_SHORTEST_SEQ

    assert finetune_seqs(131072) == [FINETUNE_SEQ, FINETUNE_SEQ // 2, FINETUNE_SHORTEST_SEQ] == [2048, 1024, 512]
    assert finetune_seqs(1024) == [1024, 512]   # capped at the model's maximum
    assert finetune_seqs(300) == [300]


def test_a_stated_seq_is_never_changed_even_when_nothing_fits():
    report = plan(f"fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq {FINETUNE_SEQ}", backend="offline")
    assert report.request["seq"] == FINETUNE_SEQ and report.recommended is None
    assert not any(a.startswith("seq not given") for a in report.assumptions)
    assert any("it fits on the same 2 GPUs" in r for r in report.risks)   # the shorter seq that would


def test_without_ten_percent_headroom_the_plan_keeps_what_it_can(qlora_70b):
    """No layout of QLoRA 70B on two 24 GiB cards leaves 10% free. The plan keeps 5% where a layout can,
    else takes the best that fits at all. On the Hugging Face stack (fp32 norms and materialised logits,
    tools/perf/finetune_tensors.py fp32_norm_changes, tools/perf/loss.py) none leaves 5% either: the plan says so."""
    capacity = qlora_70b.recommended["memory_gib"]["capacity"]
    job = dict(model="llama3-70b", gpu="rtx-4090", gpus=2, method="qlora", seq=512, gbs=16, engine="axolotl")
    half = search(**job, headroom_gib=0.05 * capacity).candidates
    if half:
        assert qlora_70b.recommended["memory_gib"]["total"] <= 0.95 * capacity
        assert any("the plan uses the best that leaves 5%" in a for a in qlora_70b.assumptions)
    else:
        assert any("the plan uses the best that fits at all" in a for a in qlora_70b.assumptions)
    at_all = search(**job, headroom_gib=0.0)
    assert qlora_70b.recommended["memory_gib"]["total"] <= capacity
    assert at_all.candidates[0]["memory_gib"]["total"] > 0.95 * capacity  # the fastest that fits is tighter


# --- the method of a fine-tune that names none (agent/method_choice.py) ---------------------------------------


def _method_note(report) -> str:
    return next(a for a in report.assumptions if a.startswith("method not given"))


def test_a_fine_tune_naming_no_method_that_full_training_cannot_fit_is_planned_with_adapters():
    """Llama 3 8B on one 24 GB card: full fine-tuning (18 B/param of model states) fits no layout, LoRA's frozen
    bf16 base does, so the plan is LoRA, and it says why and what QLoRA would give."""
    report = plan("fine-tune Llama 3 8B on one RTX 4090", backend="offline")
    assert report.recommended is not None and report.recommended["config"]["method"] == "lora"
    note = _method_note(report)
    assert note.startswith("method not given: LoRA") and "full fine-tuning fits no layout" in note
    assert "QLoRA (NF4 base) would give" in note and "tokens/s" in note
    assert report.layout.endswith(f"LoRA r{DEFAULT_LORA_RANK} all-linear")
    stack = next(a for a in report.assumptions if a.startswith("the figures assume this fine-tuning stack"))
    assert "the whole fp32 logits of the transformers models" in stack and "--loss-kernel" in stack


def test_a_fine_tune_naming_no_method_trains_every_weight_where_that_fits():
    report = plan("fine-tune Llama 3 8B on 8 H100s", backend="offline")
    assert report.recommended["config"]["method"] == "full"
    note = _method_note(report)
    assert note.startswith("method not given: full fine-tuning") and "LoRA (bf16 base) would give" in note
    assert not any(a.startswith("the figures assume this fine-tuning stack") for a in report.assumptions)


def test_adapters_in_gpu_memory_come_before_a_full_fine_tune_with_the_optimizer_on_the_cpu():
    """Llama 3 70B on 8 H100s: full fine-tuning fits only with ZeRO-Offload; LoRA fits in GPU memory."""
    report = plan("fine-tune Llama 3 70B on 8 H100s", backend="offline")
    assert report.recommended["config"]["method"] == "lora"
    assert not report.recommended["config"].get("optimizer_offload")
    assert "full fine-tuning fits only with the optimizer offloaded to the CPU" in _method_note(report)


def test_with_no_seq_and_nothing_fitting_at_the_recipe_length_the_leanest_method_that_fits_shorter_wins():
    report = plan("fine-tune Llama 3 70B on 2 RTX 4090s", backend="offline")
    config = report.recommended["config"]
    assert config["method"] == "qlora" and config["seq"] < FINETUNE_SEQ
    note = _method_note(report)
    assert f"none does at {FINETUNE_SEQ:,} tokens, QLoRA (NF4 base) does at {config['seq']:,}" in note
    assert "LoRA (bf16 base) fits no layout" in note


@pytest.mark.parametrize("text, method", [
    ("full fine-tune Llama 3 8B on one RTX 4090", "full"),   # said: kept, and nothing fits
    ("fine-tune Llama 3 8B with QLoRA on one RTX 4090", "qlora"),
    ("fine-tune Llama 3 8B on one RTX 4090 with Megatron", "full"),   # Megatron runs no adapters
])
def test_a_method_the_request_fixes_is_kept(text, method):
    report = plan(text, backend="offline")
    assert report.request["method"] == method
    assert not any(a.startswith("method not given: LoRA") or "the first that fits" in a for a in report.assumptions)


def test_a_lora_plan_is_warned_by_the_fine_tuning_rows_that_miss_not_by_pre_training_ones():
    from trainplan.agent.advice import known_gaps
    from trainplan.tools.search.eval_summary import load_summary

    gaps = load_summary()["gaps"]
    assert "llama31-8b-gpu-hours" in gaps and "torchtune-llama31-8b-lora-4090" in gaps
    lora = known_gaps("llama3-8b", "rtx-4090", adapters=True)
    full = known_gaps("llama3-8b", "rtx-4090")
    assert any("torchtune-llama31-8b-lora-4090" in g and "tokens_per_s" in g for g in lora)
    assert any("unsloth-hf-llama31-8b-24gb" in g and "peak memory" in g for g in lora)
    assert not any("gpu-hours" in g for g in lora) and any("llama31-8b-gpu-hours" in g for g in full)


def test_a_bounded_open_gpu_count_chooses_the_method_at_its_bound():
    """'up to 8 H100s': the method is chosen as on 8 GPUs (full fine-tuning of 70B fits there only offloaded), and
    the count is then sized for LoRA."""
    report = plan("fine-tune Llama 3 70B on up to 8 H100s", backend="offline")
    config = report.recommended["config"]
    assert config["method"] == "lora" and not config.get("optimizer_offload") and config["gpus"] <= 8
    assert "on 8 GPUs, the most the request allows, full fine-tuning fits only with the optimizer offloaded" in (
        _method_note(report))


def test_a_fine_tune_up_to_a_bound_is_planned_at_the_longest_length_that_fits_there():
    """'up to 2 RTX 4090s': nothing fits at the recipes' 2,048 tokens on 2 cards, so the probe runs at the bound, as
    for a stated count, and the plan is QLoRA at the length that fits instead of no plan."""
    bounded = plan("QLoRA Llama 3 70B on up to 2 RTX 4090s", backend="offline")
    stated = plan("QLoRA Llama 3 70B on 2 RTX 4090s", backend="offline")
    assert bounded.recommended is not None and bounded.recommended["config"]["gpus"] == 2
    assert bounded.recommended["config"]["seq"] == stated.recommended["config"]["seq"] < FINETUNE_SEQ
    note = next(a for a in bounded.assumptions if a.startswith("seq not given"))
    assert "the longest that fits on 2 GPUs, the most the request allows" in note


def test_a_request_its_engine_refuses_says_the_engine_s_line_not_memory():
    """Pure bf16 with DeepSpeed ZeRO-3: DeepSpeed refuses every layout (its bf16 optimizer keeps an fp32 master), so
    the no-fit line leads with DeepSpeed's own reason, and the CLI's one line is that reason, not 'no memory'."""
    report = plan("full fine-tune Qwen2.5 7B on 8 A100s in pure bf16 with DeepSpeed ZeRO-3", backend="offline")
    assert report.recommended is None
    risk = next(r for r in report.risks if " (rejected: " in r)
    assert risk.startswith("deepspeed refuses the request's layouts: pure_bf16") and "use --mixed-precision" in risk
    memory = plan("full fine-tune Llama 3 70B on 2 RTX 4090s, seq 8192, mbs 4", backend="offline")
    assert any(r.startswith("no layout fits in 2 x rtx-4090 memory") for r in memory.risks if " (rejected: " in r)


def test_an_offloaded_full_fine_tune_names_the_pure_bf16_recipe_that_fits_on_the_gpu():
    """Llama 3 8B on one H100: mixed precision (18 B/param) fits only with the optimizer on the CPU, 4x slower than
    torchtune's pure bf16 recipe (8 B/param), which fits on the GPU. The plan says so, with the trade, unless the
    request pinned the storage."""
    import re

    import trainplan

    open_storage = trainplan.plan("full fine-tune Llama 3 8B on one H100", backend="offline")
    assert open_storage.recommended["config"]["optimizer_offload"] is True
    line = next(r for r in open_storage.risks if r.startswith("in pure bf16"))
    speedup = float(re.search(r"([\d.]+)x this plan's", line).group(1))
    assert speedup > 2 and "without the offload" in line and "fp32 master" in line
    pinned = trainplan.plan("full fine-tune Llama 3 8B on one H100 with mixed precision", backend="offline")
    assert not any(r.startswith("in pure bf16") for r in pinned.risks)
