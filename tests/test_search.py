"""search: the vectorised layout search against the scalar path, its filters, and the CLI."""

from __future__ import annotations

import json
import subprocess

import numpy as np
from cli_inprocess import run_cli as in_process
import pytest

import trainplan
from typer.testing import CliRunner

from trainplan.tools.perf import step
from trainplan.tools.perf.collectives import group_layout
from trainplan.tools.core.errors import InputError
from trainplan.tools.search.results import SearchResult
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.pipeline import _validate, simulate
from trainplan.tools.config.codes import RECOMPUTE_BY_CODE as _RECOMPUTE_BY_CODE, SCHEDULE_BY_CODE as _SCHEDULE_BY_CODE
from trainplan.tools.config.codes import SCHEDULE_CODES as _S
from trainplan.tools.perf.pipeline_closed_form import StageTimes
from trainplan.tools.perf.pipeline_closed_form import makespan_closed_form as pipeline_makespan
from trainplan.tools.search.scalar import R_SCALAR_INVALID, scalar_policy_reason, search_scalar
from trainplan.tools.search.driver import SearchRequest, prepare, search
from trainplan.tools.search.score import dp_optimizer_p2p, stage_counts as _stage_counts, work_pieces as _work_pieces
from trainplan.tools.search.space import (
    KNOBS, R_BUDGET, R_DEADLINE, R_MEMORY, REASONS, Pins, enumerate_space, gpu_counts, validity,
)
from trainplan.tools.config.validity import R_HEADS
from trainplan.tools.core.enums import Schedule

SMALL = dict(model="llama3-8b", gpu="h100", gpus=16, gbs=32, seq=4096)


def _check_counts(result: SearchResult) -> None:
    assert result.evaluated == result.feasible + sum(result.rejected.values())


@pytest.fixture(scope="module")
def small() -> SearchResult:
    return search(**SMALL, top_k=5)


# --- the result ----------------------------------------------------------------------------------


def test_result_shape_winner_fits_and_counts_add_up(small):
    assert set(small.model_dump()) >= {"job", "objective", "candidates", "evaluated", "feasible", "rejected",
                                       "wall_s", "layouts_per_s"}
    assert "pareto" not in small.model_dump()   # left out without pareto=True
    assert 1 <= len(small.candidates) <= 5
    for c in small.candidates:
        assert c["fits"] and c["memory_gib"]["total"] <= c["memory_gib"]["capacity"]
        assert {"params", "memory_gib", "time", "config"} <= set(c)
        assert c["config"]["gpus"] == 16 and c["config"]["gbs"] == 32
    steps = [c["time"]["step_s"] for c in small.candidates]
    assert steps == sorted(steps)
    _check_counts(small)
    assert small.layouts_per_s > 143


def test_pins_are_respected():
    result = search(**SMALL, tp=2, pp=2, zero=1, recompute="selective", schedule="1f1b", top_k=3)
    assert result.candidates
    for c in result.candidates:
        cfg = c["config"]
        assert (cfg["tp"], cfg["pp"], cfg["zero"], cfg["recompute"], cfg["schedule"]) == (2, 2, 1, "selective", "1f1b")
    result = search(**SMALL, vpp=2, top_k=3)
    assert all(c["config"]["vpp"] == 2 and c["config"]["schedule"] == "interleaved" for c in result.candidates)
    assert result.job.pins == {"vpp": 2}


def test_objective_cost_versus_throughput_over_gpu_counts():
    kw = dict(**SMALL, tokens="100B", max_gpus=64, top_k=3)
    fast = search(**kw, objective="throughput").candidates[0]
    cheap = search(**kw, objective="cost").candidates[0]
    assert fast["config"]["gpus"] > cheap["config"]["gpus"]
    assert fast["time"]["tokens_per_s"] > cheap["time"]["tokens_per_s"]
    assert cheap["training"]["cost_usd"] <= fast["training"]["cost_usd"]
    # time ranks like throughput (fixed gbs), in days
    assert search(**kw, objective="time").candidates[0]["config"] == fast["config"]


def test_max_gpus_tries_fewer_gpus():
    assert gpu_counts(16, 64, 8, floor=2) == [64, 32, 16, 8, 4, 2]
    assert gpu_counts(24, 96, 8, floor=16) == [96, 48, 24]
    assert gpu_counts(16, None, 8) == [16]
    result = search(**SMALL, max_gpus=32, top_k=8, objective="cost")
    assert result.job.gpu_counts == [32, 16, 8, 4, 2]
    assert {c["config"]["gpus"] for c in result.candidates} - {16} - {32}, "no smaller count was kept"
    _check_counts(result)
    with pytest.raises(InputError, match="max_gpus=8 is below gpus=16"):
        search(**SMALL, max_gpus=8)


def test_deadline_and_budget_filters():
    base = search(**SMALL, tokens="100B", top_k=3).candidates[0]["training"]
    late = search(**SMALL, tokens="100B", deadline_days=base["days"] * 1.02, top_k=50)
    assert late.candidates and all(c["training"]["days"] <= base["days"] * 1.02 for c in late.candidates)
    assert late.rejected.get(R_DEADLINE, 0) > 0
    _check_counts(late)
    poor = search(**SMALL, tokens="100B", budget_usd=base["cost_usd"] * 1.05, top_k=50)
    assert all(c["training"]["cost_usd"] <= base["cost_usd"] * 1.05 for c in poor.candidates)
    assert poor.rejected.get(R_BUDGET, 0) > 0
    _check_counts(poor)
    none = search(**SMALL, tokens="100B", budget_usd=1.0)
    assert none.candidates == [] and none.feasible == 0 and "no feasible layout" in none.notes[0]
    _check_counts(none)
    with pytest.raises(InputError, match="needs the training tokens"):
        search(**SMALL, deadline_days=10)


def test_headroom_shrinks_the_feasible_set():
    tight = search(**SMALL, headroom_gib=30)
    assert tight.feasible < search(**SMALL).feasible
    assert all(c["memory_gib"]["total"] <= c["memory_gib"]["capacity"] - 30 for c in tight.candidates)
    assert tight.rejected[R_MEMORY] > 0


def test_pareto_front_is_non_dominated():
    result = search(**SMALL, tokens="100B", max_gpus=64, pareto=True, top_k=3)
    front = result.pareto
    assert len(front) >= 2
    for p in front:
        assert p.gpus in result.job.gpu_counts and p.config["gpus"] == p.gpus and p.gpu_hours > 0
        for q in front:
            assert not (q is not p and q.days <= p.days and q.cost_usd <= p.cost_usd
                        and (q.days < p.days or q.cost_usd < p.cost_usd))
    days = [p.days for p in front]
    assert days == sorted(days)
    assert [p.cost_usd for p in front] == sorted((p.cost_usd for p in front), reverse=True)


def test_no_feasible_layout_is_a_result_with_counts():
    result = search(model="llama3-70b", gpu="h100", gpus=8, gbs=16, seq=8192, optimizer_offload=False)
    assert result.candidates == [] and result.feasible == 0
    assert max(result.rejected, key=result.rejected.get) == R_MEMORY
    _check_counts(result)
    assert "more GPUs" in result.notes[0]
    heads = search(model="llama3-70b", gpu="h100", gpus=48, gbs=96, seq=8192, tp=3)
    assert heads.rejected == {R_HEADS: heads.evaluated}


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(zero=4), "zero=4"),
    (dict(tp=0), "tp=0"),
    (dict(recompute="sometimes"), "recompute='sometimes'"),
    (dict(schedule="zigzag"), "schedule='zigzag'"),
    (dict(objective="fast"), "objective='fast'"),
    (dict(tp=3), "no split tp=3 divides gpus=16"),
    (dict(gbs=0), "gbs=0"),
    (dict(headroom_gib=-1), "headroom_gib"),
])
def test_bad_input_raises_input_error(kwargs, fragment):
    with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace("*", r"\*")):
        search(**{**SMALL, **kwargs})


# --- the vectorised path mirrors the scalar one --------------------------------------------------


def _scalar_valid(job, row) -> bool:
    """The scalar rules: the search's policies, resolve_config, and the pipeline simulator's."""
    if scalar_policy_reason(job, row):
        return False
    try:
        cfg = resolve_config(job.model, row["gpus"], tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row["ep"],
                             vpp=row["vpp"], zero=row["zero"], dp_shard=row["dp_shard"], mbs=row["mbs"], gbs=job.gbs,
                             seq=job.seq, recompute=_RECOMPUTE_BY_CODE[row["recompute"]],
                             schedule=_SCHEDULE_BY_CODE[row["schedule"]], precision=job.precision)
        if cfg.pp > 1:
            _validate(cfg.schedule, cfg.pp, cfg.num_microbatches, cfg.vpp)
    except InputError:
        return False
    return True


@pytest.mark.parametrize("model, gpus, gbs, seq, pins", [
    ("llama3-8b", 16, 64, 8192, {}),
    ("qwen2.5-7b", 28, 56, 4096, {}),                        # 28 heads, 4 kv heads: tp=7 breaks the kv rule
    ("deepseek-v2-lite", 16, 32, 4096, {"zero": 1}),         # MoE: ep
    ("llama3-8b", 16, 48, 4096, {"tp": 16, "vpp": 3}),       # pins that break rules
    ("deepseek-v2-lite", 16, 32, 4096, {"dp_shard": [2, 3]}),  # hybrid sharding: dp, zero and expert rules
])
def test_validity_masks_match_resolve_config(model, gpus, gbs, seq, pins):
    job, _, _ = prepare(SearchRequest.of(model, "h100", gpus, gbs=gbs, seq=seq, **pins))
    space = enumerate_space(job.model, gpus, gbs, seq, job.node, False, job.pins)
    reason, _, _ = validity(job, space)
    assert space["tp"].size > 50
    disagree = [(dict(zip(KNOBS, (int(space[k][i]) for k in KNOBS))), REASONS[reason[i]] if reason[i] >= 0 else None)
                for i in range(space["tp"].size)
                if (reason[i] < 0) != _scalar_valid(job, {k: int(space[k][i]) for k in KNOBS})]
    assert not disagree, disagree[:5]


@pytest.mark.parametrize("model, gpu, gpus, gbs, seq, precision", [
    ("llama3-8b", "h100", 8, 16, 8192, "bf16"),
    ("deepseek-v2-lite", "h100", 16, 32, 4096, "bf16"),
    ("qwen3-8b", "h800", 16, 32, 4096, "fp8"),
    ("mistral-7b", "a100-sxm-80gb", 16, 64, 4096, "bf16"),
])
def test_stage_pieces_and_dp_terms_match_step(model, gpu, gpus, gbs, seq, precision):
    """The vectorised time model's building blocks equal step.py's, stage by stage."""
    job, _, _ = prepare(SearchRequest.of(model, gpu, gpus, gbs=gbs, seq=seq, precision=precision))
    cluster = job.cluster(gpus)
    rng = np.random.default_rng(0)
    space = enumerate_space(job.model, gpus, gbs, seq, job.node, False, Pins())
    reason, dp, m = validity(job, space)
    valid = np.nonzero(reason < 0)[0]
    for i in rng.choice(valid, size=12, replace=False):
        row = {k: int(space[k][i]) for k in KNOBS}
        cfg = resolve_config(job.model, gpus, tp=row["tp"], pp=row["pp"], cp=row["cp"], ep=row["ep"], vpp=row["vpp"],
                             zero=row["zero"], mbs=row["mbs"], gbs=gbs, seq=seq, precision=precision,
                             recompute=_RECOMPUTE_BY_CODE[row["recompute"]],
                             schedule=_SCHEDULE_BY_CODE[row["schedule"]])
        dual = cfg.schedule is Schedule.dualpipe and job.model.is_moe
        pieces = _work_pieces(job.model, cluster, job, (cfg.tp, cfg.cp, cfg.ep, cfg.mbs, row["recompute"], row["modules"],
                                                        dual))
        stages = np.einsum("kc,kj->jc", _stage_counts(job.model, cfg.pp), pieces)
        groups = group_layout(cfg, cluster.gpus_per_node)
        work = [step.stage_work(job.model, cfg, cluster, groups, s, ids)
                for s, ids in enumerate(step.stage_layers(job.model, cfg.pp))]
        for s, w in enumerate(work):
            np.testing.assert_allclose(stages[:3, s], [w.forward_s, w.backward_s, w.weight_grad_s], rtol=1e-9)
        forward = np.array([[w.forward_s for w in work]])
        backward = np.array([[w.backward_s for w in work]])
        exposed, optimizer, p2p = dp_optimizer_p2p(
            job.model, cluster, job, (cfg.tp, cfg.cp, cfg.dp, cfg.ep, cfg.dp_shard_size, cfg.pp),
            {"zero": np.array([cfg.zero]), "m": np.array([cfg.num_microbatches]), "schedule": np.array([row["schedule"]]),
             "vpp": np.array([cfg.vpp]), "mbs": np.array([cfg.mbs])}, forward, backward)
        result = step.step_time(job.model, cfg, cluster)
        expect_dp, expect_opt = result.breakdown["comm/dp"], result.breakdown["optimizer"]
        np.testing.assert_allclose([exposed[0], optimizer[0]], [expect_dp, expect_opt], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("schedule, pp, m, vpp", [
    ("1f1b", 4, 16, 1), ("1f1b", 8, 8, 1), ("gpipe", 4, 8, 1), ("interleaved", 4, 16, 2), ("interleaved", 8, 16, 4),
    ("zb-h1", 4, 16, 1), ("zb-h1", 8, 4, 1), ("dualpipe", 4, 16, 1), ("dualpipe", 8, 32, 1),
])
def test_pipeline_closed_forms_follow_the_simulator(schedule, pp, m, vpp):
    """Equal stages, a heavier last stage (the LM head), and some p2p: within 4% of the simulator."""
    for head, p2p in ((0.0, 0.0), (0.6, 0.01), (1.0, 0.03)):
        f, b, w = np.ones(pp), np.full(pp, 2.5), np.ones(pp)
        f[-1], b[-1], w[-1] = f[-1] + 1.2 * head, b[-1] + 2 * head, w[-1] + head
        sim = simulate(schedule, pp, m, vpp=vpp, stages=StageTimes(forward_s=list(f), backward_s=list(b), weight_grad_s=list(w)),
                       p2p_s=p2p, record_timeline=False).makespan_s
        est = pipeline_makespan(np.array([_S[Schedule(schedule)]]), pp, np.array([m]), np.array([vpp]),
                                StageTimes(f[None], b[None], w[None]), np.array([p2p]))[0]
        assert est == pytest.approx(sim, rel=0.04), (head, p2p)


JOBS = [  # small jobs; zero and recompute pinned at random to keep the brute force short
    ("llama3-8b", "h100", 8, 16, 4096),
    ("qwen3-8b", "h100", 16, 32, 4096),
    ("deepseek-v2-lite", "h100", 16, 32, 4096),
    ("mistral-7b", "a100-sxm-80gb", 16, 32, 4096),
    ("llama3-8b", "h200", 8, 8, 8192),
    ("qwen1.5-moe-a2.7b", "h100", 8, 16, 4096),
]


@pytest.mark.parametrize("seed", range(len(JOBS)))
def test_vectorised_winner_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    model, gpu, gpus, gbs, seq = JOBS[seed]
    kw = dict(gbs=gbs, seq=seq, zero=int(rng.integers(4)), recompute=str(rng.choice(["none", "selective", "full"])),
              top_k=3)
    fast = search(model, gpu, gpus, **kw)
    slow = search_scalar(model, gpu, gpus, **kw)
    assert fast.evaluated == slow.evaluated
    assert fast.feasible == slow.feasible                    # the same layouts fit
    assert fast.rejected.get(R_MEMORY, 0) == slow.rejected.get(R_MEMORY, 0)
    invalid = sum(v for k, v in fast.rejected.items() if k.startswith("invalid"))
    assert invalid == slow.rejected.get(R_SCALAR_INVALID, 0) + sum(
        v for k, v in slow.rejected.items() if k.startswith("invalid split"))
    if not slow.candidates:
        assert not fast.candidates
        return
    best, mine = slow.candidates[0], fast.candidates[0]
    assert mine["fits"]
    assert mine["config"] == best["config"] or mine["time"]["step_s"] <= 1.01 * best["time"]["step_s"]


# --- the published layouts -----------------------------------------------------------------------


def test_llama3_405b_meta_layout_is_within_10_percent_on_time():
    """Meta trained Llama 3 405B at 8K on 16,384 H100 with TP8 PP16 CP1 DP128 (Llama 3 paper Table 4),
    gbs 2048 (16M tokens), no recompute, FP32 gradients reduce-scattered once per step (zero=1).

    The time model puts that exact layout within 10% of the best layout the search finds. The memory
    model disagrees with the experts: it puts the layout ~10% over 80 GB, so the search itself only
    offers Meta's TP8/PP16 with ZeRO-2 or full recompute (see the issue note).
    """
    job = dict(model="llama3-405b", gpu="h100", gpus=16384, gbs=2048, seq=8192)
    best = search(**job, top_k=3).candidates[0]
    meta = trainplan.estimate(**job, tp=8, pp=16, cp=1, vpp=8, zero=1, recompute="none")
    ratio = meta.time.tokens_per_s / best["time"]["tokens_per_s"]
    assert ratio >= 0.9, ratio
    assert best["fits"]


def test_deepseek_v3_layout_beats_tp_heavy_layouts():
    """DeepSeek-V3: TP1, EP64 across 8 nodes, PP16 DualPipe on 2,048 H800, seq 4096, gbs 15360, fp8."""
    job = dict(model="deepseek-v3", gpu="h800", gpus=2048, gbs=15360, seq=4096, precision="fp8", top_k=1)
    theirs = search(**job, tp=1, pp=16, ep=64).candidates[0]
    assert theirs["config"]["schedule"] == "dualpipe"
    for tp in (4, 8):
        heavy = search(**job, tp=tp).candidates[0]
        assert theirs["time"]["tokens_per_s"] > heavy["time"]["tokens_per_s"], tp


# --- the command line ----------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return in_process("search", *args)


CLI_SMALL = ["--model", "llama3-8b", "--gpu", "h100", "--gpus", "16", "--gbs", "32", "--seq", "4096"]


def test_cli_json_shape_and_view():
    from trainplan.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["search", *CLI_SMALL, "--tokens", "100B", "--top-k", "3", "--tp", "1", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert set(data) >= {"job", "objective", "candidates", "evaluated", "feasible", "rejected", "wall_s",
                         "layouts_per_s"}
    assert len(data["candidates"]) == 3 and all(c["config"]["tp"] == 1 for c in data["candidates"])
    assert {"memory_gib", "time", "training", "config"} <= set(data["candidates"][0])
    view = runner.invoke(app, ["search", *CLI_SMALL, "--tokens", "100B", "--max-gpus", "32", "--pareto"])
    assert view.exit_code == 0, view.output
    assert "Top 5 layouts" in view.output and "runner-up" in view.output and "Pareto front" in view.output


def test_cli_no_feasible_layout_exits_1():
    from trainplan.cli import app

    runner = CliRunner()
    args = ["search", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "8", "--gbs", "16"]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 1
    assert json.loads(out.stdout)["candidates"] == []
    view = runner.invoke(app, args)
    assert view.exit_code == 1 and "no feasible layout" in view.output and "does not fit in memory" in view.output


@pytest.mark.parametrize("args, fragment", [
    (["--model", "llama3-8b", "--gpu", "h100", "--gpus", "0", "--gbs", "32"], "gpus=0"),
    (["--model", "llama3-8b", "--gpu", "h100", "--gpus", "16", "--gbs", "32", "--tp", "3"], "no split tp=3"),
    (["--model", "llama3-8b", "--gpu", "h100", "--gpus", "16", "--gbs", "32", "--deadline-days", "3"], "tokens"),
])
def test_cli_bad_input_is_one_error_line_exit_2(args, fragment):
    result = _cli(*args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0]


def test_public_api_search_matches_the_module():
    job = dict(model="llama3-8b", gpu="h100", gpus=16, gbs=64, seq=4096, top_k=1)
    assert trainplan.search(**job).candidates[0]["config"] == search(**job).candidates[0]["config"]
