"""The layout search's vectorised scoring: memory, step time, days and cost of many valid layouts
at once, from the scalar model's own terms.

- Memory: memory.memory_totals_vectorised, the same core (memory._core) as memory_breakdown, on
  the most loaded rank; a layout fits when its total is at most capacity - headroom. fit_recipes
  gives each layout the cheapest recompute step and storage variant that fits (search_recipes).
- Stage work: a stage's per-micro-batch forward, backward and weight-gradient seconds are linear in
  its layers, so step.stage_work runs once per unique (tp, cp, ep, mbs, recompute, modules,
  dualpipe) on one dense layer, one MoE layer, the embedding and the head (the blocks' times shared
  across recompute choices), and is broadcast over every stage of every layout with numpy.
- Pipeline: pipeline_closed_form.makespan_closed_form (the simulator in closed form).
- Data parallelism, optimizer and p2p: data_parallel.data_parallel_s, step.optimizer_s, pipeline_p2p.p2p_s and
  step.rank_params, the very functions step.step_time calls.
- Days and cost: cost.SECONDS_PER_DAY with the job's goodput, as cost.training_cost.

tests/test_search.py checks that this path and the scalar one (resolve_config + estimate.evaluate)
agree on random layouts.
"""

from __future__ import annotations

import math

import numpy as np

from trainplan.tools.perf import pipeline_p2p, step
from trainplan.tools.perf.activations import knob_arrays
from trainplan.tools.config.codes import RECOMPUTE_BY_CODE, RECOMPUTE_CODES, SCHEDULE_CODES
from trainplan.tools.perf.collectives import group_layout
from trainplan.tools.perf.cost import SECONDS_PER_DAY
from trainplan.tools.config.stages import model_layers_per_stage
from trainplan.tools.perf.memory import memory_totals_vectorised
from trainplan.tools.perf.pipeline_closed_form import StageTimes, makespan_closed_form
from trainplan.tools.perf.recompute import DEFAULT_MASK, mask_of, modules_of
from trainplan.tools.search.space import (
    FIXED_KNOBS, R_BUDGET, R_DEADLINE, R_ENGINE, R_MEMORY, REASONS, STORAGE_KNOBS, SearchJob, enumerate_space,
    validity,
)
from trainplan.tools.hardware.specs import ClusterSpec, ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Recompute, Schedule

_DUAL = SCHEDULE_CODES[Schedule.dualpipe]
_PIECES = ("forward_s", "backward_s", "weight_grad_s", "compute_s", "comm/tp", "comm/cp", "comm/ep", "paired_s")


def _stage_piece(work) -> list[float]:
    return [work.forward_s, work.backward_s, work.weight_grad_s, work.compute_s,
            work.comm_s["tp"], work.comm_s["cp"], work.comm_s["ep"], work.paired_s]


def work_pieces(model: ModelSpec, cluster: ClusterSpec, job: SearchJob, key: tuple,
                block_cache: dict | None = None) -> np.ndarray:
    """(4, len(_PIECES)): one dense layer, one MoE layer, the embedding and the head, each as
    step.stage_work sees it for one micro-batch. A stage is the sum of its pieces.
    key: (tp, cp, ep, mbs, recompute code, module mask, dualpipe); block_cache: step.stage_work's,
    shared by the keys that differ only in recompute code and mask."""
    tp, cp, ep, mbs, rec, modules, dual = key
    recompute = RECOMPUTE_BY_CODE[rec]
    cfg = ParallelConfig(tp=tp, pp=3, cp=cp, ep=ep, dp=ep, mbs=mbs, seq=job.seq, recompute=recompute,
                         precision=job.precision, schedule=Schedule.dualpipe if dual else Schedule.one_f_one_b,
                         **fixed_knobs(job, tp, recompute, modules))
    groups = group_layout(cfg, cluster.gpus_per_node)
    moe = set(model.moe_layers) if model.is_moe else set()
    dense_id = next((i for i in range(model.num_layers) if i not in moe), None)
    moe_id = next((i for i in range(model.num_layers) if i in moe), None)
    rows = []
    for stage, ids in ((1, [dense_id]), (1, [moe_id]), (0, []), (2, [])):
        if ids and ids[0] is None:
            rows.append([0.0] * len(_PIECES))
        else:
            rows.append(_stage_piece(step.stage_work(model, cfg, cluster, groups, stage, ids, block_cache)))
    return np.array(rows)


def stage_counts(model: ModelSpec, pp: int) -> np.ndarray:
    """(4, pp): dense layers, MoE layers, holds the embedding, holds the head, per stage."""
    counts = model_layers_per_stage(model, pp)
    moe = set(model.moe_layers) if model.is_moe else set()
    out, start = np.zeros((4, pp)), 0
    for s, n in enumerate(counts):
        ids = range(start, start + n)
        out[1, s] = sum(1 for i in ids if i in moe)
        out[0, s] = n - out[1, s]
        start += n
    out[2, 0] = 1.0
    out[3, pp - 1] = 1.0
    return out


def dp_optimizer_p2p(model: ModelSpec, cluster: ClusterSpec, job: SearchJob, key: tuple, rows: dict[str, np.ndarray],
                     forward_s: np.ndarray, backward_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exposed DP seconds, optimizer seconds, p2p seconds) for rows sharing (tp, cp, dp, ep, dp_shard, pp):
    step.data_parallel_and_optimizer_s and pipeline_p2p.p2p_s, step_time's own terms, over rows x stages."""
    tp, cp, dp, ep, dp_shard, pp = key
    cfg = ParallelConfig(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, seq=job.seq, precision=job.precision,
                         **{**fixed_knobs(job, tp, Recompute.none), "dp_shard": dp_shard})
    groups = group_layout(cfg, cluster.gpus_per_node)
    column = {k: rows[k][:, None] for k in ("zero", "m", "schedule", "vpp")}
    stages = step.stage_layers(model, pp)
    window = step.compute_window(cfg, stages, forward_s, backward_s, column["m"], column["schedule"], column["vpp"])
    exposed, optimizer = step.data_parallel_and_optimizer_s(model, cfg, cluster, groups, stages, column["zero"], window)
    p2p = pipeline_p2p.p2p_s(model, cfg, groups, cluster, rows["mbs"].astype(float))
    return exposed, optimizer, np.asarray(p2p, dtype=float) * np.ones(rows["mbs"].size)


def vector_times(model: ModelSpec, job: SearchJob, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """step_s and its parts for valid layouts (all on one GPU count), vectorised (module doc)."""
    n = rows["tp"].size
    out = {k: np.zeros(n) for k in ("step_s", "makespan_s", "comm/dp", "optimizer")}
    if not n:
        return out
    cluster = job.cluster(int(rows["gpus"][0]))
    # step._layer_comm_s hides an MoE layer's dispatch comm under DualPipe whatever ep (with ep = 1 the
    # expert-TP collectives remain), so every dualpipe row of an MoE model is keyed as DualPipe.
    dual = (rows["schedule"] == _DUAL) & model.is_moe
    work_keys = np.stack([rows["tp"], rows["cp"], rows["ep"], rows["mbs"], rows["recompute"], rows["modules"], dual]).T
    unique_work, work_index = np.unique(work_keys, axis=0, return_inverse=True)
    work_index = work_index.reshape(-1)
    caches: dict[tuple, dict] = {}   # per (tp, cp, ep, mbs, dualpipe): the blocks recompute does not change
    pieces = np.stack([work_pieces(model, cluster, job, key, caches.setdefault((*key[:4], key[6]), {}))
                       for key in (tuple(int(x) for x in k) for k in unique_work)])
    for pp in np.unique(rows["pp"]):
        pp = int(pp)
        idx = np.nonzero(rows["pp"] == pp)[0]
        counts = stage_counts(model, pp)                      # (4, pp)
        stage = np.einsum("kc,nkj->njc", counts, pieces[work_index[idx]])   # (n, pieces, pp)
        forward_s, backward_s, weight_s = stage[:, 0], stage[:, 1], stage[:, 2]
        dp_keys = np.stack([rows["tp"][idx], rows["cp"][idx], rows["dp"][idx], rows["ep"][idx],
                            rows["dp_shard"][idx]]).T
        unique_dp, dp_index = np.unique(dp_keys, axis=0, return_inverse=True)
        dp_index = dp_index.reshape(-1)
        exposed, optimizer, p2p = np.zeros(idx.size), np.zeros(idx.size), np.zeros(idx.size)
        for j, key in enumerate(unique_dp):
            sub = np.nonzero(dp_index == j)[0]
            rows_sub = idx[sub]
            e, o, c = dp_optimizer_p2p(model, cluster, job, (*(int(x) for x in key), pp),
                                       {k: rows[k][rows_sub] for k in ("zero", "m", "schedule", "vpp", "mbs")},
                                       forward_s[sub], backward_s[sub])
            exposed[sub], optimizer[sub], p2p[sub] = e, o, c
        if job.blocking_p2p:   # pipeline_p2p.blocking_p2p_s: the transfers occupy the ranks, none is left to wait for
            blocked_f, blocked_b = pipeline_p2p.blocking_p2p_s(p2p, pp)
            forward_s, backward_s, p2p = forward_s + blocked_f, backward_s + blocked_b, np.zeros_like(p2p)
        # Megatron's combined 1F1B (moe_a2a_overlap): the steady state's combined steps (combined_1f1b.py).
        # A stage's piece replays its layers one at a time, so the overlap across a chunk's layers
        # (stage_work's) is not in it: the ranking's figure; the candidates are re-estimated.
        paired = stage[:, 7] + (blocked_f + blocked_b if job.blocking_p2p else 0.0) if job.moe_a2a_overlap else None
        makespan = makespan_closed_form(rows["schedule"][idx], pp, rows["m"][idx], rows["vpp"][idx],
                                        StageTimes(forward_s, backward_s, weight_s, paired), p2p)
        out["makespan_s"][idx] = makespan
        out["comm/dp"][idx] = exposed
        out["optimizer"][idx] = optimizer
        out["step_s"][idx] = makespan + exposed + optimizer
    return out


def vector_memory(job: SearchJob, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """memory.memory_totals_vectorised for valid rows. The job's fixed knobs are encoded by
    activations.knob_arrays, the scalar memory path's own encoding, on one probe layout; the knobs a
    row varies replace them."""
    n = rows["tp"].size
    if not n:
        return {"total": np.zeros(0)}
    probe = ParallelConfig(seq=job.seq, precision=job.precision, recompute=Recompute.selective,
                           **{k: getattr(job, k) for k in FIXED_KNOBS})
    arrays = {k: np.full(n, float(v.reshape(()))) for k, v in knob_arrays(probe).items()}
    arrays.update({k: rows[k] for k in ("tp", "pp", "cp", "ep", "dp", "dp_shard", "vpp", "zero", "mbs", "recompute",
                                        "schedule",
                                        *STORAGE_KNOBS) if k in rows})
    arrays["num_microbatches"] = rows["m"]
    arrays["sequence_parallel"] = ((rows["tp"] > 1) & job.sequence_parallel).astype(float)
    arrays["etp"] = np.full(n, float(job.etp)) if job.etp else rows["tp"]   # null: expert TP = tp
    arrays["recompute_modules"] = np.where(rows["recompute"] == RECOMPUTE_CODES[Recompute.selective], rows["modules"], 0)
    return memory_totals_vectorised(job.model, job.gpu, arrays)


def fit_recipes(job: SearchJob, rows: dict[str, np.ndarray]) -> np.ndarray:
    """Memory (GiB) of each row at the first recompute step and storage variant, in that order, that
    fits in capacity - headroom (the most saving one when none does); the row's recompute, modules and
    STORAGE_KNOBS columns are set to that choice, in place. A row enumerated as job.recompute_ladder's
    first step climbs the ladder; every row tries job.storage_variants at each step (search_recipes)."""
    n = rows["tp"].size
    limit = job.gpu.memory_gib - job.headroom_gib
    total = np.full(n, np.inf)
    for k in STORAGE_KNOBS:
        rows[k] = np.full(n, int(getattr(job, k)), dtype=np.int64)
    ladder = job.recompute_ladder or ((-1, -1),)
    climbs = (rows["recompute"] == ladder[0][0]) & (rows["modules"] == ladder[0][1])
    variants = job.storage_variants
    own = (rows["recompute"].copy(), rows["modules"].copy())

    def attempt(candidates: np.ndarray, step: int, variant: int) -> np.ndarray:
        """Score the candidate rows at (ladder step, storage variant), a row that does not climb at
        its own recompute; record the choice and the memory; return the rows that fit."""
        code, mask = ladder[step]
        climbing = climbs[candidates]
        rows["recompute"][candidates] = np.where(climbing, code, own[0][candidates])
        rows["modules"][candidates] = np.where(climbing, mask, own[1][candidates])
        for k in STORAGE_KNOBS:
            rows[k][candidates] = int(getattr(job, k))
        for k, v in variants[variant]:
            rows[k][candidates] = int(v)
        total[candidates] = vector_memory(job, {k: v[candidates] for k, v in rows.items()})["total"]
        return candidates[total[candidates] <= limit]

    # The cheapest choice first; then the most saving one, which a row that fits at all fits (memory
    # only falls along the ladder and the variants); then, for those, the choices in between in order.
    fits = np.zeros(n, dtype=bool)
    fits[attempt(np.arange(n), 0, 0)] = True
    rest = np.nonzero(~fits)[0]
    combos = [(step, variant) for step in range(len(ladder)) for variant in range(len(variants))]
    climbers, others = rest[climbs[rest]], rest[~climbs[rest]]
    last_climber, last_other = combos[-1], (0, len(variants) - 1)
    able = [attempt(climbers, *last_climber) if last_climber != (0, 0) else climbers[:0],
            attempt(others, *last_other) if last_other != (0, 0) else others[:0]]
    rest = np.concatenate(able)
    moved = np.zeros(n, dtype=bool)          # tried at a choice after its most saving one
    for step, variant in combos[1:]:
        candidates = rest[~fits[rest] & (climbs[rest] | (step == 0))]
        last = np.where(climbs[candidates], combos.index(last_climber), combos.index(last_other))
        candidates = candidates[combos.index((step, variant)) < last]
        if candidates.size:
            moved[candidates] = True
            fits[attempt(candidates, step, variant)] = True
    # rows that fit only at their most saving choice: score them there again if a later try moved them
    again = rest[~fits[rest] & moved[rest]]
    for combo, members in ((last_climber, again[climbs[again]]), (last_other, again[~climbs[again]])):
        if members.size:
            attempt(members, *combo)
    return total


def fixed_knobs(job: SearchJob, tp: int, recompute: Recompute, modules: int | None = None,
                storage: dict | None = None) -> dict:
    """The job's fixed knobs as ParallelConfig/resolve_config take them for one layout: sequence
    parallelism and TP overlap only with tp > 1, expert TP only when it differs from tp, recompute
    modules only with selective recompute (the row's mask; None: the job's), the row's storage
    knobs (STORAGE_KNOBS) over the job's."""
    knobs = {k: getattr(job, k) for k in FIXED_KNOBS}
    knobs["sequence_parallel"] = bool(job.sequence_parallel and tp > 1)
    knobs["tp_comm_overlap"] = bool(job.tp_comm_overlap and tp > 1)
    knobs["etp"] = job.etp if job.etp and job.etp != tp else None   # null: expert TP = tp
    if recompute is not Recompute.selective:
        knobs["recompute_modules"] = None
    elif modules is not None:
        knobs["recompute_modules"] = modules_knob(job, modules)
    knobs.update({k: bool(v) for k, v in (storage or {}).items() if k in STORAGE_KNOBS})
    return knobs


def modules_knob(job: SearchJob, mask: int):
    """recompute_modules for a selective row's mask: the request's own tuple when it is that set,
    None for Megatron's default set, else the modules in their declaration order."""
    given = job.recompute_modules
    if given is not None and mask_of(given) == mask:
        return given
    if given is None and mask == DEFAULT_MASK:
        return None
    return modules_of(mask)


def training_days_cost(job: SearchJob, gpus: int, step_s: np.ndarray):
    """(days, cost_usd) of the job's tokens at step_s seconds per step, or (None, None) without tokens."""
    if job.tokens is None:
        return None, None
    steps = math.ceil(job.tokens / (job.gbs * job.seq))
    days = steps * step_s / job.goodput / SECONDS_PER_DAY
    cost = gpus * steps * step_s / job.goodput / 3600 * job.price
    return days, cost


def evaluate_count(job: SearchJob, gpus: int, score_of, engine_ok=None) -> dict:
    """The vectorised pass on one GPU count: every layout's rejection reason (-1: kept) and the
    kept rows with memory_gib, step_s and score = score_of(step_s, gpus, days, cost).

    engine_ok(rows) -> bool array: the layouts the requested engine runs (None: any)."""
    model = job.model
    space = enumerate_space(model, gpus, job.gbs, job.seq, job.node, job.allow_cross_node_tp, job.pins,
                            job.recompute_options)
    reason, dp, m = validity(job, space)
    reason = np.asarray(reason).reshape(-1)
    live = np.nonzero(reason < 0)[0]
    rows = {k: v[live] for k, v in space.items()}
    rows["dp"], rows["m"] = np.asarray(dp).reshape(-1)[live], np.asarray(m).reshape(-1)[live]

    def drop(bad: np.ndarray, why: str) -> None:
        """Reject the live rows where bad holds, under `why`, and keep the rest."""
        nonlocal live, rows
        reason[live[bad]] = REASONS.index(why)
        rows = {k: v[~bad] for k, v in rows.items()}
        live = live[~bad]

    if engine_ok is not None and live.size:
        drop(~engine_ok(rows), R_ENGINE)
    total = fit_recipes(job, rows)
    rows["memory_gib"] = total
    drop(total > job.gpu.memory_gib - job.headroom_gib, R_MEMORY)
    times = vector_times(model, job, rows)
    days, cost = training_days_cost(job, gpus, times["step_s"])
    rows["step_s"] = times["step_s"]
    if job.deadline_days is not None:
        late = days > job.deadline_days
        drop(late, R_DEADLINE)
        days, cost = days[~late], cost[~late]
    if job.budget_usd is not None:
        over = cost > job.budget_usd
        drop(over, R_BUDGET)
        days, cost = days[~over], cost[~over]
    rows["score"] = np.asarray(score_of(rows["step_s"], gpus, days, cost), dtype=float) * np.ones(rows["tp"].size)
    return {"space": space, "reason": reason, "rows": rows}
