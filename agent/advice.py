"""What a plan says about its own reliability: how far its layout is from the evals' evidence, the
error band the evals measured for its regime, and the eval rows of its model that miss.

All three read what the evals measured (evals/summary.json, `python -m trainplan.evals.summary`):
- evidence_lines: the search's note on the evidence margin (tools/search/evidence.py, search_choice.prefer_evidence)
  and the recommended layout's departures, each with the eval cases that bound it;
- error_band: the regime of the plan (tools/search/eval_summary.py regime_of: dense at scale, dense small jobs, MoE,
  fine-tuning)
  and the held-out MAPE and worst case of that regime, for step time and (with tokens) GPU-hours;
- stack_line: the stack a fine-tune's figures assume (its loss, kernels and launch), since peak memory differs
  about 2x between stacks;
- known_gaps: each eval case of the plan's model that fails its tolerance or misses by more than
  tools/search/eval_summary.py GAP_ERROR, with its GPU, its measured error and which way the model errs.
"""

from __future__ import annotations

from trainplan.tools.search.eval_summary import ALL, GAP_ERROR, REGIMES, load_summary, regime_of
from trainplan.tools.hardware import catalog
from trainplan.tools.search.evidence import departures_of, margin_sentence, shape_of
from trainplan.tools.core.enums import LossKernel
from trainplan.tools.perf.loss import LOSS_BYTES

_SLOWER_WHEN_NEGATIVE = {"step_s", "gpu_hours", "days", "cost_usd"}
"""Quantities where a negative error (predicted below published) means the model is optimistic."""


def evidence_lines(search: dict | None, model: str, config: dict) -> list[str]:
    """The evidence margin, the search's note on it, and the recommended layout's departures."""
    spec = catalog.load_model(model)
    margin = (search or {}).get("evidence_margin")
    lines = []
    if margin is not None:
        lines.append(margin_sentence(margin) + " (evidence_margin; tools/search/evidence.py lists the features)")
    if search and search.get("evidence"):
        lines.append(search["evidence"])
    shape = shape_of(spec, config["seq"], config["gpus_per_node"])
    if departures_of(config, shape):
        lines.append("the recommended layout departs from the evals' evidence: see Risks")
    else:
        lines.append("every feature of the recommended layout is inside what the passing eval runs cover")
    return lines


def departures(model: str, config: dict, cite: bool = True) -> list[str]:
    """The features of a layout of `model` outside the evals' evidence (tools/search/evidence.py), as sentences."""
    spec = catalog.load_model(model)
    return departures_of(config, shape_of(spec, config["seq"], config["gpus_per_node"]), cite=cite)


def departures_risk(model: str, config: dict) -> str | None:
    """One line for an alternative outside the evidence: its departures; None inside it."""
    outside = departures(model, config)
    return ("outside the evals' evidence: " + "; ".join(outside)) if outside else None


def error_band(model: str, gpus: int, with_tokens: bool, adapters: bool = False) -> str:
    """The expected error of a plan in this regime (adapters: a LoRA/QLoRA plan), as the held-out eval cases
    measured it."""
    spec = catalog.load_model(model)
    regime = regime_of(spec.is_moe, gpus, adapters)
    summary = load_summary()
    bands = summary["bands"]
    band = bands.get(regime, {})
    parts = [f"{what} {_within(band[kind])}" for kind, what in (("throughput", "step time and throughput"),
                                                                 ("memory", "peak memory")) if kind in band]
    if adapters and spec.is_moe and "throughput" in bands.get("MoE", {}) \
            and not any(c["adapters"] and c["is_moe"] for c in summary["cases"]):
        parts.append("no fine-tuning eval case is a mixture-of-experts model, so for its expert layers the nearest "
                     f"measure is the MoE band: step time and throughput {_within(bands['MoE']['throughput'])}")
    hours = band.get("gpu_hours") or bands.get(ALL, {}).get("gpu_hours")
    if with_tokens and hours:
        b, pooled = hours, "gpu_hours" not in band
        parts.append(f"GPU-hours within {b['mape']:.0%} on average ({b['n']} case{'s' if b['n'] != 1 else ''}"
                     f"{' of any regime: none of this one publishes GPU-hours' if pooled else ''}), "
                     f"worst {b['worst']:+.1%} ({b['worst_case']}): batch ramps, phases and failures the single "
                     "layout does not model")
    if not parts:
        return f"expected error: no held-out eval case covers {REGIMES[regime]} ({regime}); treat the figures as unmeasured"
    return f"expected error for {REGIMES[regime]} ({regime}): " + "; ".join(parts)


def _within(b: dict) -> str:
    """One band figure as a sentence: 'within about X% on average (MAPE of N held-out eval cases), worst ...'."""
    return (f"within about {b['mape']:.0%} on average (MAPE of {b['n']} held-out eval cases), "
            f"worst {b['worst']:+.1%} ({b['worst_case']})")


def known_gaps(model: str, gpu: str, adapters: bool = False) -> list[str]:
    """Each eval case of this model that misses, with its measured error (the same GPU first): its headline
    figure (throughput or GPU-hours) and its peak memory, each where it misses. Only the cases of the plan's
    kind: LoRA/QLoRA (adapters) or full training, so a LoRA plan is not warned by a pre-training run's GPU-hours."""
    spec, card = catalog.load_model(model), catalog.load_gpu(gpu)
    summary = load_summary()
    by_id = {c["id"]: c for c in summary["cases"]}
    rows = [by_id[i] for i in summary["gaps"] if by_id[i]["model"] == spec.name and by_id[i]["adapters"] is adapters]
    rows.sort(key=lambda c: c["gpu"] != card.name)
    out = []
    for c in rows:
        if not c["fits"]:
            out.append(f"known gap: eval case {c['id']} ({c['gpu']}, {c['gpus']:,} GPUs) does not fit in the memory "
                       "model although the published run trained, so the memory figures of this model may run high")
            continue
        where = "on this GPU" if c["gpu"] == card.name else f"on {c['gpu']}"
        where += f", {c['gpus']:,} GPU{'s' if c['gpus'] != 1 else ''}"
        if c["error"] is not None and (not c["passed"] or abs(c["error"]) > GAP_ERROR):
            optimistic = (c["error"] < 0) == (c["quantity"] in _SLOWER_WHEN_NEGATIVE)
            out.append(f"known gap: for eval case {c['id']} ({where}) the model's {c['quantity']} "
                       f"is {c['error']:+.1%} off the published figure "
                       f"({'optimistic: expect it slower' if optimistic else 'pessimistic: expect it faster'})")
        memory = c.get("memory_error")
        if memory is not None and abs(memory) > GAP_ERROR:
            out.append(f"known gap: for eval case {c['id']} ({where}) the model's peak memory is "
                       f"{memory:+.1%} off the published figure "
                       f"({'optimistic: expect more memory' if memory < 0 else 'pessimistic: expect less memory'})")
    return out


_LOSS_STACKS = {LossKernel.fused: "Megatron's fused vocab-parallel cross-entropy",
                LossKernel.materialised: "the whole fp32 logits of the transformers models",
                LossKernel.chunked: "torchtune's chunked cross-entropy",
                LossKernel.fused_linear: "a fused linear cross-entropy (Liger, Cut Cross-Entropy, Unsloth)"}
"""Who computes the loss each way (tools/perf/loss.py), for stack_line."""


def stack_line(config: dict) -> str:
    """The stack a LoRA/QLoRA plan's figures assume, from its resolved knobs, and how to plan for another (issue 23:
    memory differs about 2x between stacks at long context)."""
    loss = LossKernel(config["loss_kernel"])
    kernels = "fused" if config.get("fused_kernels") else "eager PyTorch"
    parts = [f"{config['attention']} attention", f"{_LOSS_STACKS[loss]} ({LOSS_BYTES[loss]:g} B per token per "
             "vocabulary entry at the loss's peak)", f"{kernels} norms, rotary and SwiGLU",
             "torch.compile" if config.get("launch") == "compile" else "no torch.compile"]
    if config.get("fp32_norms"):
        parts.append("fp32 norms (PEFT's k-bit preparation)")
    others = [k.value for k in LossKernel if k is not loss and k is not LossKernel.fused]
    flags = [f"--loss-kernel {' or '.join(others)}", "--unfused-kernels" if config.get("fused_kernels")
             else "--fused-kernels", "--launch eager" if config.get("launch") == "compile" else "--launch compile"]
    return (f"the figures assume this fine-tuning stack: {', '.join(parts)}; peak memory differs up to about 2x "
            f"between stacks at long context: plan another with {', '.join(flags[:-1])} and {flags[-1]}")


def pure_bf16_alternative(result: dict, request: dict) -> str | None:
    """`result` (a recommended estimate) of a full fine-tune that only fits with its optimizer on the CPU
    (ZeRO-Offload), and whose storage the request left open: the best layout of the same job in pure bf16 (bf16
    parameters, gradients and Adam moments, no fp32 master: torchtune's dtype bf16 recipes, TRL and LLaMA-Factory
    without ZeRO) on the GPUs, searched with the plan's default headroom, and how much faster it runs. None otherwise. The trade is numerical (no fp32 master),
    so it is advice, not the recommendation."""
    from trainplan.tools.search.driver import search

    config = result["config"]
    if (config.get("method") or "full") != "full" or not config.get("optimizer_offload") or config.get("pure_bf16"):
        return None
    if request.get("pure_bf16") is not None or request.get("optimizer_offload") or request.get("fp32_params"):
        return None
    found = search(config["model"], config["gpu"], config["gpus"], seq=config["seq"], gbs=config["gbs"],
                   method="full", pure_bf16=True, optimizer_offload=False, top_k=1)
    if not found.candidates or found.candidates[0].get("time") is None or not result.get("time"):
        return None
    best = found.candidates[0]
    memory, tokens_per_s = best["memory_gib"], best["time"]["tokens_per_s"]
    cfg = best["config"]
    return (f"in pure bf16 (bf16 parameters, gradients and Adam moments, no fp32 master: torchtune's dtype bf16 "
            f"recipes, TRL or LLaMA-Factory without ZeRO) the job fits on the GPUs without the offload: mbs "
            f"{cfg['mbs']}, recompute {cfg['recompute']}, {memory['total']:.2f} of {memory['capacity']:.2f} GiB, "
            f"{tokens_per_s:,.0f} tokens/s, {tokens_per_s / result['time']['tokens_per_s']:.1f}x this plan's; it gives "
            "up the fp32 master's precision in the weight updates; say 'in pure bf16' to plan it")
