"""The fine-tuning method of a request that names none, chosen as a practitioner on 1-8 GPUs chooses it.

A fine-tune on a given (or bounded) GPU count that says neither full, LoRA nor QLoRA (nor the adapters' targets) is tried,
at the request's sequence or the recipes' (job_defaults.complete_request), in this order, and planned with the
first that fits:

  1. full fine-tuning in GPU memory (every weight trains: the reference the adapter methods are measured against);
  2. LoRA over a frozen bf16 base (Hu et al. 2021): the frozen base drops the weights' gradients and optimizer
     states, so it fits where full training does not;
  3. QLoRA over a frozen 4-bit NF4 base (Dettmers et al. 2023, "QLoRA reduces the average memory requirements
     of finetuning a 65B parameter model from >780GB of GPU memory to <48GB");
  4. with no seq given and none of them fitting at the recipes' length: the first of them, in the same order, to
     fit in GPU memory at the longest of plan_defaults.finetune_seqs (the plan then takes that length:
     job_defaults.probe_fine_tune_seq);
  5. full fine-tuning with the optimizer offloaded to the CPU (ZeRO-Offload, tools/search/driver.py), the last
     resort: it moves every parameter's states over PCIe and runs Adam on the CPU each step.

The plan's assumptions say which method was chosen, why the ones before it were not, and what the others
would give. A named engine that refuses adapters (Megatron-LM, torchtitan) keeps full fine-tuning. A request that
bounds an open GPU count ("up to 8 H100s") is tried at its bound, the most it allows, and agent/sizing.py then sizes
the count for the chosen method; one whose count is open without a bound (a deadline or budget alone) keeps full
fine-tuning, and its count is sized for that.
"""

from __future__ import annotations

from typing import Callable

from trainplan.tools.config import engines as engine_registry
from trainplan.tools.config.plan_defaults import finetune_seqs
from trainplan.tools.hardware import catalog
from trainplan.tools.core.enums import Method

from . import sizing
from .job_defaults import at_count_bound, complete_request, is_fine_tune
from .request import PlanRequest

__all__ = ["METHOD_ORDER", "METHOD_RULE", "choose_method"]

METHOD_ORDER = (Method.full, Method.lora, Method.qlora)
"""The methods tried in GPU memory, in the order above; full with offload comes after them."""
METHOD_RULE = "full if it fits in GPU memory, else LoRA, else QLoRA"
"""The same order in words, for the agent's system prompt (agent/prompt_text.py)."""
_NAMES = {Method.full: "full fine-tuning", Method.lora: "LoRA (bf16 base)", Method.qlora: "QLoRA (NF4 base)"}

SearchFor = Callable[[tuple], sizing.Search]
"""offline_plan._search_for: the search callback over the layouts of the first of some engines that fits any."""


def chooses_method(request: PlanRequest, engine: str | None) -> bool:
    """Whether the request leaves the method to the planner (the module's conditions)."""
    if not is_fine_tune(request) or request.method is not None or request.lora_targets is not None:
        return False
    if request.gpus is None and request.max_gpus is None:
        return False
    return engine is None or not engine_registry.PROFILES[engine].refuses_adapters


def _best(request: PlanRequest, method: Method, engine: str | None, search_for: SearchFor) -> dict | None:
    """The best layout of the method at the request's sequence on its GPUs, fitting at all (no headroom, as
    job_defaults.probe_fine_tune_seq asks), or None."""
    job, _ = complete_request(request.model_copy(update={"method": method.value}))
    engines = ((engine,) if engine is not None else engine_registry.PLAN_ENGINES if method is Method.full
               else engine_registry.ADAPTER_ORDER)
    result = search_for(engines)(job, 1, False, 0.0, None)
    return result.candidates[0] if result.candidates else None


def _at_a_shorter_seq(request: PlanRequest, engine: str | None, search_for: SearchFor
                      ) -> tuple[Method, int, int] | None:
    """(method, seq, the recipes' seq): the first method (METHOD_ORDER) to fit in GPU memory at the longest
    fine-tuning length below the recipes' (finetune_seqs); None when none fits at any."""
    seqs = finetune_seqs(catalog.load_model(request.model).max_seq_len)
    for seq in seqs[1:]:
        for method in METHOD_ORDER:
            best = _best(request.model_copy(update={"seq": seq}), method, engine, search_for)
            if best is not None and not best["config"].get("optimizer_offload"):
                return method, seq, seqs[0]
    return None


def _outcome(best: dict) -> str:
    memory = best["memory_gib"]
    return f"{best['time']['tokens_per_s']:,.0f} tokens/s, {memory['total']:.1f} of {memory['capacity']:.1f} GiB"


def choose_method(request: PlanRequest, engine: str | None, search_for: SearchFor) -> tuple[PlanRequest, str] | None:
    """The request with the method chosen (the module's order), and the assumption that says why; None when
    the request does not leave it open (chooses_method) or no method fits (the full fine-tune's no-fit report
    then says what would)."""
    if not chooses_method(request, engine):
        return None
    planned = request
    request, where = at_count_bound(request)   # an open count: what fits on the most GPUs the request allows
    found = {method: _best(request, method, engine, search_for) for method in METHOD_ORDER}
    seq = complete_request(request)[0]["seq"]   # the sequence the methods were tried at
    in_memory = {m: b for m, b in found.items() if b is not None and not b["config"].get("optimizer_offload")}
    shorter = None if in_memory or request.seq is not None else _at_a_shorter_seq(request, engine, search_for)
    if in_memory:
        chosen = next(m for m in METHOD_ORDER if m in in_memory)
    elif shorter is not None:
        chosen = shorter[0]
    elif found[Method.full] is not None:
        chosen = Method.full
    else:
        return None
    said = []
    for method in METHOD_ORDER:
        best = found[method]
        if method is chosen or best is None and METHOD_ORDER.index(method) > METHOD_ORDER.index(chosen):
            continue
        if best is None:
            said.append(f"{_NAMES[method]} fits no layout")
        elif best["config"].get("optimizer_offload"):
            said.append(f"{_NAMES[method]} fits only with the optimizer offloaded to the CPU ({_outcome(best)})")
        else:
            said.append(f"{_NAMES[method]} would give {_outcome(best)}")
    if chosen in in_memory:
        how = "the first that fits in GPU memory of full, LoRA, QLoRA"
    elif shorter is not None:
        how = (f"the first of full, LoRA, QLoRA that fits in GPU memory at a fine-tuning length: none does at "
               f"{shorter[2]:,} tokens, {_NAMES[chosen]} does at {shorter[1]:,}")
    else:
        how = "full fine-tuning with the optimizer on the CPU, since no method fits in GPU memory alone"
    at = f"at {seq:,} tokens {where}" + ("," if planned.gpus is None else "")   # 'on 8 GPUs, the most ..., full ...'
    note = (f"method not given: {_NAMES[chosen]}, {how} (every weight trains in full fine-tuning; LoRA and QLoRA "
            "train adapters beside a frozen base)" + (f"; {at} {'; '.join(said)}" if said else "")
            + "; say full, LoRA or QLoRA to choose")
    return planned.model_copy(update={"method": chosen.value}), note
