"""The search's vectorised path and the scalar path (resolve_config + estimate.evaluate) agree on
random layouts: validity exactly (the same first broken rule), memory to rounding, step time
within the pipeline closed form's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.tools.config.codes import RECOMPUTE_BY_CODE, SCHEDULE_BY_CODE
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.search.driver import SearchRequest, exact, prepare
from trainplan.tools.search.scalar import scalar_policy_reason
from trainplan.tools.search.score import fixed_knobs, vector_memory, vector_times
from trainplan.tools.search.space import REASONS, enumerate_space, row, validity
from trainplan.tools.config.validity import RULES, Knobs

STEP_RTOL = 0.12
"""The vectorised pipeline is the simulator in closed form (pipeline_closed_form): exact for equal
stages, within a few percent when the embedding/head make the end stages heavier and m is close to
pp. DualPipe over stages of one or two layers of unequal weight (DeepSeek-V2-Lite's dense first
layer beside MoE layers that host-issued expert GEMMs make several times heavier, moe.py) is the
worst drawn case, about 10% apart. Every other term is the scalar path's own function, so the rest
agrees to rounding."""

JOBS = [  # (model, gpu, gpus, gbs, seq, precision, fixed knobs)
    ("llama3-8b", "h100", 16, 64, 8192, "bf16", {}),
    ("deepseek-v2-lite", "h100", 32, 64, 4096, "bf16", {}),
    ("qwen3-8b", "h800", 16, 32, 4096, "fp8", {}),
    ("mistral-7b", "a100-sxm-80gb", 32, 128, 4096, "bf16", {"optimizer_offload": True}),
    ("llama3-70b", "h100", 64, 128, 8192, "bf16", {"bf16_grads": True, "fp8_activations": False}),
    ("deepseek-v2-lite", "h800", 32, 64, 4096, "fp8", {"bf16_moments": True, "fp8_activations": True}),
    ("qwen1.5-moe-a2.7b", "h100", 16, 64, 4096, "bf16", {"tp_comm_overlap": True}),
    ("qwen1.5-moe-a2.7b", "h100", 16, 64, 4096, "bf16", {"etp": 1, "dispatcher": "allgather"}),
    ("gpt3-175b", "a100-sxm-80gb", 128, 256, 2048, "bf16", {"sequence_parallel": False}),
    ("qwen3-8b", "h100", 16, 32, 4096, "bf16", {"attention": "eager"}),
    ("deepseek-v2-lite", "h100", 16, 32, 4096, "bf16", {"recompute_modules": "layernorm,mla_up_proj,moe_act"}),
    ("llama3-8b", "h100", 8, 32, 4096, "bf16", {"method": "lora", "lora_rank": 16}),
    ("llama3-8b", "h100", 16, 64, 8192, "bf16", {"offload_modules": "core_attn"}),
    ("llama3-70b", "h100", 64, 128, 8192, "bf16", {"fp32_params": True, "bf16_grads": True}),
    # short sequences on A100: small kernels, where layers wait on the host (host.py) unless captured in graphs
    ("qwen3-8b", "a100-sxm-80gb", 16, 16, 512, "bf16", {"attention": "eager"}),
    ("qwen3-8b", "a100-sxm-80gb", 16, 16, 512, "bf16", {"attention": "eager", "launch": "cuda_graphs"}),
]


def _scalar_verdicts(job, layout: dict) -> set[str]:
    """What the scalar path says against a layout: the search policy it breaks and resolve_config's
    refusal (empty when both accept it)."""
    verdicts = {scalar_policy_reason(job, layout)}
    try:
        resolve_config(job.model, layout["gpus"], tp=layout["tp"], pp=layout["pp"], cp=layout["cp"],
                       ep=layout["ep"], vpp=layout["vpp"], zero=layout["zero"], dp_shard=layout["dp_shard"],
                       mbs=layout["mbs"], gbs=job.gbs,
                       seq=job.seq, recompute=RECOMPUTE_BY_CODE[layout["recompute"]],
                       schedule=SCHEDULE_BY_CODE[layout["schedule"]], precision=job.precision,
                       **fixed_knobs(job, layout["tp"], RECOMPUTE_BY_CODE[layout["recompute"]]))
    except InputError as error:
        verdicts.add(str(error))
    return verdicts - {None}


def _messages(job, layout: dict, reason: str) -> set[str]:
    """What the scalar path says for a layout the masks reject under `reason`: the reason itself
    (a search policy) or the message of a rule filed under it."""
    knobs = Knobs(gpus=layout["gpus"], tp=layout["tp"], pp=layout["pp"], cp=layout["cp"], ep=layout["ep"],
                  vpp=layout["vpp"], mbs=layout["mbs"], seq=job.seq, gbs=job.gbs, schedule=layout["schedule"],
                  dp_shard=layout["dp_shard"], zero=layout["zero"], etp=job.etp or None)
    return {reason} | {rule.message(job.model, knobs, job.policies) for rule in RULES if rule.reason == reason}


@pytest.mark.parametrize("case", range(len(JOBS)))
def test_vectorised_and_scalar_paths_agree_on_random_layouts(case):
    model, gpu, gpus, gbs, seq, precision, fixed = JOBS[case]
    job, _, _ = prepare(SearchRequest.of(model, gpu, gpus, gbs=gbs, seq=seq, precision=precision, **fixed))
    space = enumerate_space(job.model, gpus, gbs, seq, job.node, True, job.pins)   # tp across nodes too
    reason, dp, m = validity(job, space)
    rng = np.random.default_rng(case)
    picks = rng.choice(space["tp"].size, size=min(60, space["tp"].size), replace=False)

    # Validity: a layout the vectorised masks keep is one the scalar path accepts, and a rejected
    # one is refused by the same first rule.
    for i in picks:
        layout = row(space, i)
        verdicts = _scalar_verdicts(job, layout)
        if reason[i] < 0:
            assert not verdicts, (layout, verdicts)
        else:
            assert verdicts & _messages(job, layout, REASONS[reason[i]]), (layout, verdicts, REASONS[reason[i]])

    valid = [int(i) for i in picks if reason[i] < 0][:12]
    assert valid, "no valid layout drawn"
    rows = {k: v[valid] for k, v in space.items()}
    rows["dp"], rows["m"] = dp[valid], m[valid]
    memory = vector_memory(job, rows)
    times = vector_times(job.model, job, rows)
    for j in range(len(valid)):
        scalar = exact(job, row(rows, j))
        assert memory["total"][j] == pytest.approx(scalar["memory_gib"]["total"], rel=1e-9)
        assert times["step_s"][j] == pytest.approx(scalar["time"]["step_s"], rel=STEP_RTOL), row(rows, j)
        # Everything but the pipeline is the scalar path's own terms.
        assert times["comm/dp"][j] == pytest.approx(scalar["time"]["breakdown"]["comm/dp"], rel=1e-9, abs=1e-12)
        assert times["optimizer"][j] == pytest.approx(scalar["time"]["breakdown"]["optimizer"], rel=1e-9)


def test_the_scalar_refusal_names_the_rule_the_masks_apply():
    """resolve_config raises the message of the very rule the search counts the layout under."""
    job, _, _ = prepare(SearchRequest.of("llama3-8b", "h100", 16, gbs=48, seq=4096, tp=[1, 2, 16], vpp=[1, 3]))
    space = enumerate_space(job.model, 16, 48, 4096, job.node, False, job.pins)
    reason, _, _ = validity(job, space)
    seen = set()
    for i in np.nonzero(reason >= 0)[0]:
        layout = row(space, i)
        assert _scalar_verdicts(job, layout) & _messages(job, layout, REASONS[reason[i]]), layout
        seen.add(REASONS[reason[i]])
    assert len(seen) >= 4, seen
