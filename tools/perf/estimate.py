"""`estimate`: memory, time and cost of one layout, as a results.Estimate (tools/config/results.py)."""

from __future__ import annotations

from typing import Any

from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.config.contract import Job, Layout
from trainplan.tools.config.job_checks import check_job_numbers
from trainplan.tools.config.results import Config, Estimate, MemoryGiB, Params, StepTime, Training
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT
from trainplan.tools.perf.cost import BatchRamp, TrainingRun, parse_tokens, ramp_cost, training_cost
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.finetune import total_adapter_params
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.core.enums import Method
from trainplan.tools.config.layout import resolve_with_batch
from trainplan.tools.perf.memory import BORN_IN_BACKWARD_KEYS, memory_breakdown
from trainplan.tools.hardware.specs import ClusterSpec, ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Schedule
from trainplan.tools.perf.step import step_time


BORN_IN_BACKWARD_NOTE = "one GPU without gradient accumulation"
"""How the note on gradients born in the backward (tools/perf/memory.py) begins: the report finds it by this."""


def config_of(model: ModelSpec, cluster: ClusterSpec, cfg: ParallelConfig) -> Config:
    """The full layout actually used, every knob resolved, with the job it ran on."""
    return Config(**cfg.model_dump(), model=model.name, gpu=cluster.gpu.name, gpus=cfg.num_gpus,
                  gpus_per_node=cluster.gpus_per_node, gpus_per_host=cluster.gpus_per_host,
                  interconnect=cluster.gpu.interconnect, intra_node_bw=cluster.intra_node_bw,
                  inter_node_bw=cluster.inter_node_bw)


def evaluate(model: ModelSpec, cluster: ClusterSpec, cfg: ParallelConfig, run: TrainingRun | None = None, *,
             headroom_gib: float = 0.0, timeline: bool = False) -> Estimate:
    """The Estimate of an already-validated layout; its training cost when `run` gives tokens."""
    tokens = run.tokens if run is not None else None
    counts = count_params(model)
    memory = memory_breakdown(model, cfg, cluster.gpu, headroom_gib=headroom_gib)
    result: dict = {
        "params": Params(total=counts.total, active=counts.active, mtp=counts.mtp,
                         trainable=(round(total_adapter_params(model, cfg.lora_rank, cfg.lora_targets))
                                    if is_lora(cfg.method) else counts.total + counts.mtp)),
        "memory_gib": MemoryGiB(**{k: getattr(memory, k) for k in MemoryGiB.model_fields}),
        "fits": memory.fits,
        "reason": None if memory.fits else memory.reason,
    }
    notes = []
    if cfg.gbs is not None:
        step = step_time(model, cfg, cluster, record_timeline=timeline)
        result["time"] = StepTime(**step.to_dict())
        if timeline:
            result["pipeline"] = step.pipeline
        if tokens is not None:
            price = cluster.gpu.price if run.price is None else run.price
            goodput = DEFAULT_GOODPUT if run.goodput is None else run.goodput
            if run.ramp_start_gbs is not None and run.ramp_tokens is not None:
                cost = ramp_cost(tokens, cfg.seq, BatchRamp(run.ramp_start_gbs, cfg.gbs, run.ramp_tokens),
                                 lambda gbs: _ramp_step_s(model, cluster, cfg, gbs), cfg.num_gpus, price, goodput)
            else:
                cost = training_cost(tokens, cfg.gbs * cfg.seq, step.step_s, cfg.num_gpus, price, goodput)
            result["training"] = Training(**cost.to_dict())
    else:
        notes.append("time and training need a global batch size: pass gbs (sequences per step)")
    if tokens is not None and cfg.gbs is None:
        notes.append("tokens given without gbs: cost needs the step time")
    if cfg.tp > cluster.gpus_per_node:
        nodes = -(-cfg.tp // cluster.gpus_per_node)
        share = ""
        if "time" in result and result["time"].breakdown.get("comm/tp"):
            share = f" ({result['time'].breakdown['comm/tp'] / result['time'].step_s:.0%} of the step)"
        notes.append(f"warning: tp={cfg.tp} spans {nodes} nodes of {cluster.gpus_per_node} GPUs, so every layer's "
                     f"tensor-parallel collectives cross the network{share}: keep tp <= {cluster.gpus_per_node} "
                     "and use pp or cp across nodes")
    taken_back = -sum(memory.breakdown.get(key, 0.0) for key in BORN_IN_BACKWARD_KEYS)
    if taken_back > 0:
        notes.append(f"{BORN_IN_BACKWARD_NOTE}: the gradients are allocated in the backward as the "
                     f"activations are freed, so the peak holds the larger of the two, not both ({taken_back:.2f} GiB "
                     "less than their sum); gradient accumulation, DDP or Megatron's gradient buffer would hold both")
    if cfg.method is Method.qlora:
        notes.append("qlora: the adapters' Adam states live in paged CPU-GPU memory (paged_adamw_32bit, "
                     "Dettmers et al. 2023) and are not counted on the GPU; the step pays for paging them over PCIe")
    if cfg.gbs is not None and cluster.gpu.efficiency_basis == "assumed":
        notes.append(f"{cluster.gpu.name}: GEMM and attention efficiencies are assumed, not fitted (no public "
                     "training run of this GPU family to fit on); treat its times as indicative")
    return Estimate(**result, config=config_of(model, cluster, cfg), notes=notes or None)


def _ramp_step_s(model: ModelSpec, cluster: ClusterSpec, cfg: ParallelConfig, gbs: int) -> float:
    """Step time at a ramp batch, rounded down to whole micro-batches per data-parallel rank (at least one
    per pipeline stage for the schedules that need it)."""
    unit = cfg.dp * cfg.mbs
    m = max(gbs // unit, 1)
    if cfg.schedule in (Schedule.interleaved,):
        m = max(cfg.pp, m - m % cfg.pp)
    elif cfg.schedule is Schedule.dualpipe and cfg.pp > 1:
        m = max(2 * cfg.pp, m - m % 2)
    return step_time(model, cfg.model_copy(update={"gbs": m * unit}), cluster).step_s


def estimate(model: str, gpu: str, gpus: int, *, timeline: bool = False, **fields: Any) -> Estimate:
    """Memory, time and cost of one layout. `fields` are those of contract.Job and contract.Layout
    (None: the field's default rule); trainplan.estimate lists them as keyword parameters."""
    unknown = sorted(set(fields) - set(Job.model_fields) - set(Layout.model_fields))
    if unknown:
        raise InputError(f"unknown argument(s) {', '.join(unknown)}: use {', '.join(ESTIMATE_FIELDS)}")
    job = {k: v for k, v in fields.items() if k in Job.model_fields}
    knobs = {k: v for k, v in fields.items() if k in Layout.model_fields}
    model_spec = load_model(model)
    gpu_spec = load_gpu(gpu)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
        raise InputError(f"gpus={gpus} must be a positive whole number")
    check_job_numbers({"gpus": gpus, **job, **knobs}, gpu_spec.memory_gib)
    headroom_gib = job.get("headroom_gib") or 0.0
    cluster = ClusterSpec.build(gpu_spec, gpus, **{name: job.get(name) for name in
                                                   ("gpus_per_node", "intra_node_bw", "inter_node_bw")})
    cfg, gbs_note = resolve_with_batch(model_spec, gpus, fp8_supported=gpu_spec.fp8_tflops is not None, **knobs)
    ramp_start_gbs, ramp_tokens = job.get("ramp_start_gbs"), job.get("ramp_tokens")
    if (ramp_start_gbs is None) != (ramp_tokens is None):
        raise InputError("a batch ramp needs both ramp_start_gbs and ramp_tokens (e.g. --ramp-start-gbs 512 --ramp-tokens 250B)")
    if ramp_start_gbs is not None and not 0 < ramp_start_gbs <= (cfg.gbs or 0):
        raise InputError(f"ramp_start_gbs={ramp_start_gbs} must be between 1 and gbs={cfg.gbs}")
    run = TrainingRun(parse_tokens(job.get("tokens")), job.get("price"), job.get("goodput"), ramp_start_gbs,
                      parse_tokens(ramp_tokens))
    result = evaluate(model_spec, cluster, cfg, run, headroom_gib=headroom_gib, timeline=timeline)
    if gbs_note:
        result.notes = [gbs_note, *(result.notes or [])]
    return result


ESTIMATE_FIELDS = ("model", "gpu", "gpus", *(n for n in Job.model_fields if n not in ("model", "gpu", "gpus")),
                   *Layout.model_fields)
"""The keyword arguments of estimate, in order: the Job's, then the Layout's."""
