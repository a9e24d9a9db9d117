"""`estimate`: memory, time and cost of one layout, in the DESIGN.md result shape."""

from __future__ import annotations

from .catalog import load_gpu, load_model
from .cost import DEFAULT_GOODPUT, parse_tokens, ramp_cost, training_cost
from .counting import count_params
from .errors import InputError
from .layout import resolve_config
from .memory import memory_breakdown
from .specs import ClusterSpec, ModelSpec, ParallelConfig, Schedule
from .step import step_time


def config_dict(model: ModelSpec, cluster: ClusterSpec, cfg: ParallelConfig) -> dict:
    """The full layout actually used, every knob resolved (DESIGN.md `config`)."""
    return {
        "model": model.name,
        "gpu": cluster.gpu.name,
        "gpus": cfg.num_gpus,
        "tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "ep": cfg.ep, "dp": cfg.dp, "vpp": cfg.vpp,
        "zero": cfg.zero, "mbs": cfg.mbs, "gbs": cfg.gbs, "seq": cfg.seq,
        "num_microbatches": cfg.num_microbatches if cfg.gbs else None,
        "recompute": cfg.recompute.value,
        "recompute_modules": [m.value for m in cfg.recompute_modules] if cfg.recompute_modules is not None else None,
        "schedule": cfg.schedule.value, "precision": cfg.precision.value,
        "attention": cfg.attention.value,
        "sequence_parallel": cfg.sequence_parallel, "tp_comm_overlap": cfg.tp_comm_overlap,
        "optimizer_offload": cfg.optimizer_offload,
        "bf16_grads": cfg.bf16_grads, "bf16_moments": cfg.bf16_moments, "fp8_activations": cfg.fp8_activations,
        "gpus_per_node": cluster.gpus_per_node, "gpus_per_host": cluster.gpus_per_host,
        "interconnect": cluster.gpu.interconnect, "intra_node_bw": cluster.intra_node_bw,
        "inter_node_bw": cluster.inter_node_bw,
    }


def evaluate(model: ModelSpec, cluster: ClusterSpec, cfg: ParallelConfig, *, tokens: float | None = None,
             price: float | None = None, goodput: float | None = None, headroom_gib: float = 0.0,
             timeline: bool = False, ramp_start_gbs: int | None = None, ramp_tokens: float | None = None) -> dict:
    """The result object for an already-validated layout."""
    counts = count_params(model)
    memory = memory_breakdown(model, cfg, cluster.gpu, headroom_gib=headroom_gib)
    memory_dict = memory.to_dict()
    result: dict = {
        "params": {"total": counts.total, "active": counts.active, "mtp": counts.mtp},
        "memory_gib": {k: memory_dict[k] for k in
                       ("weights", "gradients", "optimizer", "activations", "other", "total", "capacity")},
        "fits": memory.fits,
    }
    if not memory.fits:
        result["reason"] = memory.reason
    notes = []
    if cfg.gbs is not None:
        step = step_time(model, cfg, cluster, record_timeline=timeline)
        result["time"] = step.to_dict()
        if timeline:
            result["pipeline"] = step.pipeline
        if tokens is not None:
            price = cluster.gpu.price if price is None else price
            goodput = DEFAULT_GOODPUT if goodput is None else goodput
            if ramp_start_gbs is not None and ramp_tokens is not None:
                cost = ramp_cost(tokens, cfg.seq, cfg.gbs, ramp_start_gbs, ramp_tokens,
                                 lambda gbs: _ramp_step_s(model, cluster, cfg, gbs), cfg.num_gpus, price, goodput)
            else:
                cost = training_cost(tokens, cfg.gbs * cfg.seq, step.step_s, cfg.num_gpus, price, goodput)
            result["training"] = cost.to_dict()
    else:
        notes.append("time and training need a global batch size: pass gbs (sequences per step)")
    if tokens is not None and cfg.gbs is None:
        notes.append("tokens given without gbs: cost needs the step time")
    if cfg.gbs is not None and cluster.gpu.efficiency_basis == "assumed":
        notes.append(f"{cluster.gpu.name}: GEMM and attention efficiencies are assumed, not fitted (no public "
                     "training run of this GPU family to fit on); treat its times as indicative")
    result["config"] = config_dict(model, cluster, cfg)
    if notes:
        result["notes"] = notes
    return result


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


def estimate(model: str, gpu: str, gpus: int, *, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1,
             vpp: int = 1, zero: int = 1, mbs: int = 1, gbs: int | None = None, seq: int | None = None,
             recompute: str = "selective", recompute_modules: str | list[str] | None = None,
             schedule: str | None = None, precision: str = "bf16",
             attention: str = "flash",
             tokens: str | float | None = None, price: float | None = None, goodput: float | None = None,
             gpus_per_node: int | None = None, intra_node_bw: float | None = None,
             inter_node_bw: float | None = None, optimizer_offload: bool = False, bf16_grads: bool = False,
             bf16_moments: bool = False, fp8_activations: bool = False,
             tp_comm_overlap: bool = False, ramp_start_gbs: int | None = None,
             ramp_tokens: str | float | None = None,
             sequence_parallel: bool = True, headroom_gib: float = 0.0, timeline: bool = False) -> dict:
    """Memory, time and cost of one layout, named in the DESIGN.md vocabulary."""
    model_spec = load_model(model)
    gpu_spec = load_gpu(gpu)
    if not isinstance(gpus, int) or gpus <= 0:
        raise InputError(f"gpus={gpus} must be a positive whole number")
    for name, value in (("price", price), ("gpus_per_node", gpus_per_node), ("intra_node_bw", intra_node_bw),
                        ("inter_node_bw", inter_node_bw)):
        if value is not None and value <= 0:
            raise InputError(f"{name}={value} must be a positive number")
    if headroom_gib < 0:
        raise InputError(f"headroom_gib={headroom_gib} must not be negative")
    cluster = ClusterSpec.build(gpu_spec, gpus, gpus_per_node, intra_node_bw, inter_node_bw)
    cfg = resolve_config(
        model_spec, gpus, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, zero=zero, mbs=mbs, gbs=gbs, seq=seq,
        recompute=recompute, recompute_modules=recompute_modules, schedule=schedule, precision=precision,
        attention=attention,
        sequence_parallel=sequence_parallel,
        optimizer_offload=optimizer_offload, bf16_grads=bf16_grads, bf16_moments=bf16_moments,
        fp8_activations=fp8_activations, tp_comm_overlap=tp_comm_overlap,
        fp8_supported=gpu_spec.fp8_tflops is not None,
    )
    if (ramp_start_gbs is None) != (ramp_tokens is None):
        raise InputError("a batch ramp needs both ramp_start_gbs and ramp_tokens (e.g. --ramp-start-gbs 512 --ramp-tokens 250B)")
    if ramp_start_gbs is not None and not 0 < ramp_start_gbs <= (gbs or 0):
        raise InputError(f"ramp_start_gbs={ramp_start_gbs} must be between 1 and gbs={gbs}")
    return evaluate(model_spec, cluster, cfg, tokens=parse_tokens(tokens), price=price, goodput=goodput,
                    headroom_gib=headroom_gib, timeline=timeline, ramp_start_gbs=ramp_start_gbs,
                    ramp_tokens=parse_tokens(ramp_tokens))
