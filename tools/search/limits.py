"""The answers fine-tuners ask first, solved over the memory model (tools/perf/memory.py) and, for the GPU, timed
by the estimate (tools/perf/estimate.py); no physics of its own.

- seq: the longest sequence that fits one layout (bisection on seq: memory grows with it),
- mbs: the largest micro-batch that fits (bisection on mbs),
- gpu: every catalog GPU on which the layout fits with the same GPU count, each with the layout's throughput
  there (tools/perf/estimate.py) and its dollars per million tokens (catalog price per GPU-hour x gpus / tokens
  per hour); the smallest (least memory), the cheapest (fewest dollars per token: a card that rents for less
  but runs slower can cost more per token) and the lowest price per hour named. The cheapest is ranked by
  evidence as the search ranks layouts: a GPU whose efficiencies no public run fitted (GPUSpec.efficiency_basis
  assumed) is named only when it beats the cheapest fitted one by EVIDENCE_MARGIN (plan_defaults.py).

The layout is timed at its global batch, or the default one (tools/config/layout.py resolve_with_batch: a
fine-tune's for LoRA and QLoRA, rounded up to a multiple of dp x mbs). "Fits" is memory.memory_breakdown's:
the most loaded rank's total <= capacity - headroom_gib. Each answer carries the memory at the limit and at one
step past it, so the margin is visible.
"""

from __future__ import annotations

from typing import Any

from trainplan.tools.hardware.catalog import gpu_names, load_gpu, load_model
from trainplan.tools.config.contract import Job, Layout
from trainplan.tools.config.plan_defaults import EVIDENCE_MARGIN
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config, resolve_with_batch
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.perf.estimate import evaluate
from trainplan.tools.perf.memory import memory_breakdown

TARGETS = ("seq", "mbs", "gpu")
MAX_MBS = 1024
"""the largest micro-batch tried"""
MAX_SEQ = 1 << 20
"""the longest sequence tried (1,048,576 tokens); one past the model's maximum is noted"""


def _memory(model_spec, gpu_spec, gpus: int, knobs: dict, headroom_gib: float) -> tuple[float, bool]:
    """Peak memory and fit at the layout's global batch or the default one, as estimate resolves it: the micro-batches
    a step accumulates decide whether a one-GPU loop's gradients are born in the backward (tools/perf/memory.py)."""
    fp8 = gpu_spec.fp8_tflops is not None
    try:
        cfg, _ = resolve_with_batch(model_spec, gpus, fp8_supported=fp8, **knobs)
    except InputError:   # a default batch past the simulator's bound (pre-training's 4M tokens at a seq of a few)
        cfg = resolve_config(model_spec, gpus, fp8_supported=fp8, **knobs)
    result = memory_breakdown(model_spec, cfg, gpu_spec, headroom_gib=headroom_gib)
    return result.total, result.fits


def _largest(fits, low: int, high: int) -> int:
    """The largest n in [low, high] with fits(n), fits monotone decreasing; low - 1 when none."""
    if not fits(low):
        return low - 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _split(fields: dict) -> tuple[dict, dict]:
    unknown = sorted(set(fields) - set(Job.model_fields) - set(Layout.model_fields))
    if unknown:
        raise InputError(f"unknown argument(s) {', '.join(unknown)}: use the fields of estimate")
    job = {k: v for k, v in fields.items() if k in Job.model_fields and v is not None}
    knobs = {k: v for k, v in fields.items() if k in Layout.model_fields and v is not None}
    return job, knobs


def solve(target: str, model: str, gpu: str | None = None, gpus: int = 1, **fields: Any) -> dict:
    """The limit `target` (TARGETS) for a layout given as estimate takes it; see the module doc."""
    if target not in TARGETS:
        raise InputError(f"solve='{target}' is not one of: {', '.join(TARGETS)}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
        raise InputError(f"gpus={gpus} must be a positive whole number")
    job, knobs = _split(fields)
    headroom = float(job.get("headroom_gib") or 0.0)
    model_spec = load_model(model)
    if target == "gpu":
        return _cheapest_gpu(model_spec, gpus, knobs, headroom)
    if gpu is None:
        raise InputError(f"solve='{target}' needs the GPU: pass gpu (e.g. rtx-4090)")
    gpu_spec = load_gpu(gpu)
    knobs.pop(target, None)
    if target == "mbs":
        knobs.pop("gbs", None)   # the micro-batch is free; the global batch only sets the step's count
    high = MAX_SEQ if target == "seq" else MAX_MBS

    def fits(n: int) -> bool:
        return _memory(model_spec, gpu_spec, gpus, {**knobs, target: n}, headroom)[1]

    best = _largest(fits, 1, high)
    out: dict[str, Any] = {"solve": target, "model": model_spec.name, "gpu": gpu_spec.name, "gpus": gpus,
                           "capacity_gib": gpu_spec.memory_gib, "headroom_gib": headroom, target: best if best else None}
    if best:
        out["memory_gib_at_limit"] = _memory(model_spec, gpu_spec, gpus, {**knobs, target: best}, headroom)[0]
    if best < high:
        out["memory_gib_one_past"] = _memory(model_spec, gpu_spec, gpus, {**knobs, target: best + 1}, headroom)[0]
    if not best:
        out["note"] = (f"nothing fits: even {target}=1 needs more than {gpu_spec.memory_gib - headroom:.2f} GiB; use "
                       "more GPUs, method lora or qlora, recompute=full or a GPU with more memory")
    elif best == high:
        out["note"] = f"{target}={high}, the largest tried, fits: the limit is not memory"
    elif target == "seq" and best > model_spec.max_seq_len:
        out["note"] = (f"longer than {model_spec.name}'s maximum sequence length {model_spec.max_seq_len}: the memory "
                       "fits, the model's positions were trained to that length")
    return out


def _tokens_per_s(model_spec, gpu_spec, gpus: int, knobs: dict) -> float:
    """Throughput of the layout on `gpus` of this GPU, at its global batch or the default one (module doc)."""
    cfg, _ = resolve_with_batch(model_spec, gpus, fp8_supported=gpu_spec.fp8_tflops is not None, **knobs)
    return evaluate(model_spec, ClusterSpec.build(gpu_spec, gpus), cfg).time.tokens_per_s


def _cheapest_gpu(model_spec, gpus: int, knobs: dict, headroom: float) -> dict:
    resolve_config(model_spec, gpus, **knobs)   # the layout's own errors (sizes that do not divide), once, in one line
    rows = []
    for name in gpu_names():
        spec = load_gpu(name)
        try:
            total, fits = _memory(model_spec, spec, gpus, knobs, headroom)
        except InputError:   # e.g. fp8 on a GPU without FP8 tensor cores
            continue
        if fits:
            tokens_per_s = _tokens_per_s(model_spec, spec, gpus, knobs)
            rows.append({"gpu": spec.name, "memory_gib": round(total, 3), "capacity_gib": spec.memory_gib,
                         "price_per_hour": round(spec.price * gpus, 4), "tokens_per_s": round(tokens_per_s, 1),
                         "efficiency_basis": spec.efficiency_basis,
                         "usd_per_million_tokens": round(spec.price * gpus / (tokens_per_s * 3600) * 1e6, 4)})
    out: dict[str, Any] = {"solve": "gpu", "model": model_spec.name, "gpus": gpus, "headroom_gib": headroom,
                           "fits_on": sorted(rows, key=lambda r: (r["usd_per_million_tokens"], r["capacity_gib"]))}
    if rows:
        out["smallest"] = min(rows, key=lambda r: (r["capacity_gib"], r["price_per_hour"]))["gpu"]
        out["cheapest"], out["cheapest_why"] = _cheapest_by_evidence(out["fits_on"])
        out["lowest_price"] = min(rows, key=lambda r: (r["price_per_hour"], r["capacity_gib"]))["gpu"]
        out["note"] = ("cheapest: the fewest dollars per million tokens with this layout on each GPU (catalog price "
                       "per GPU-hour x gpus / throughput)" + (f"; {out['cheapest_why']}" if out["cheapest_why"] else "")
                       + "; a GPU with more memory may run a faster layout")
    else:
        out["note"] = f"fits on no catalog GPU with {gpus} GPU(s): use more GPUs, lora/qlora or recompute=full"
    return out


def _cheapest_by_evidence(rows: list[dict]) -> tuple[str, str]:
    """The cheapest GPU of `rows` (sorted by dollars per token) by the evidence rule (module doc), and why when the
    rule weighed an assumed GPU ("" otherwise)."""
    best = rows[0]
    fitted = next((r for r in rows if r["efficiency_basis"] == "fitted"), None)
    if fitted is None or best is fitted:
        return best["gpu"], ""
    saving = 1 - best["usd_per_million_tokens"] / fitted["usd_per_million_tokens"]
    if saving > EVIDENCE_MARGIN:
        return best["gpu"], (f"{best['gpu']}'s efficiencies are assumed (no public run of its family fitted them), "
                             f"and it is {saving:.0%} cheaper than {fitted['gpu']}, the cheapest fitted one")
    return fitted["gpu"], (f"{fitted['gpu']} rather than {best['gpu']}, {saving:.0%} cheaper but with efficiencies "
                           f"assumed (no public run of its family fitted them), under the {EVIDENCE_MARGIN:.0%} margin")


def render_limit(answer: dict) -> str:
    """The answer in a few readable lines (trainplan estimate --solve)."""
    where = f"{answer['gpus']} x {answer.get('gpu', 'GPU')}"
    if answer["solve"] == "gpu":
        lines = [f"{answer['model']} on {answer['gpus']} GPU(s): fits on {len(answer['fits_on'])} catalog GPU(s)"
                 + (f" ({answer['layout']})" if answer.get("layout") else "")]
        lines += [f"  {r['gpu']:16s} {r['memory_gib']:8.2f} of {r['capacity_gib']:7.2f} GiB  ${r['price_per_hour']:.2f}/h"
                  f"  {r['tokens_per_s']:>10,.0f} tokens/s  ${r['usd_per_million_tokens']:.3f} per M tokens"
                  for r in answer["fits_on"]]
        if answer["fits_on"]:
            lines.append(f"smallest: {answer['smallest']}; cheapest per token: {answer['cheapest']}; lowest price per "
                         f"hour: {answer['lowest_price']}")
    else:
        value = answer[answer["solve"]]
        name = "longest sequence" if answer["solve"] == "seq" else "largest micro-batch"
        kept = answer.get("kept_free")
        lines = [f"{answer['model']} on {where}: {name} that fits: {value if value else 'none'}"
                 + (f" ({answer['layout']})" if answer.get("layout") else "")
                 + (f"; {kept[answer['solve']] or 'none'} keeping {kept['share']:.0%} of memory free "
                    f"({kept['headroom_gib']:.2f} GiB) for fragmentation and spikes" if kept else "")]
        if "memory_gib_at_limit" in answer:
            lines.append(f"  memory at the limit {answer['memory_gib_at_limit']:.3f} of {answer['capacity_gib']:.2f} GiB"
                         + (f" (headroom {answer['headroom_gib']:g} GiB)" if answer["headroom_gib"] else ""))
        if "memory_gib_one_past" in answer:
            lines.append(f"  one past it: {answer['memory_gib_one_past']:.3f} GiB")
    if answer.get("note"):
        lines.append(f"note: {answer['note']}")
    return "\n".join(lines)
