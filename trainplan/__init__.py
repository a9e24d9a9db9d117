"""trainplan: plan distributed LLM training.

Public API; every keyword is a field of trainplan.tools.config.contract.Job or Layout (its description there is
also the CLI help and the tool argument's description; None means the field's default rule):
    trainplan.estimate(model=..., gpu=..., gpus=..., tp=..., ...) -> Estimate  # one layout
    trainplan.search(model=..., gpu=..., gpus=..., [pins]) -> SearchResult     # the best layouts
    trainplan.plan("Llama 3 70B on 512 H100s for 15T tokens") -> PlanReport    # the whole plan
    trainplan.limits("seq", model=..., gpu=..., gpus=..., [layout]) -> dict     # longest seq / largest mbs / GPUs

`Estimate.model_dump(mode="json")` is the `trainplan estimate --json` object, `SearchResult.model_dump()`
the `trainplan search --json` one. Nothing heavy is
imported until a function is called, so `trainplan --help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainplan.tools.core.errors import InputError

if TYPE_CHECKING:
    from trainplan.agent.report import PlanReport
    from trainplan.tools.config.results import Estimate
    from trainplan.tools.search.results import SearchResult
    from trainplan.tools.core.enums import Attention, Dispatcher, GroupedGemm, Launch, OffloadModule, Precision, Recompute, RecomputeModule, Schedule
    from trainplan.tools.core.enums import LossKernel

__all__ = ["InputError", "__version__", "estimate", "limits", "plan", "search"]
__version__ = "0.1.0"


def estimate(
    model: str, gpu: str, gpus: int, *,
    # Job: what to train and on what.
    tokens: float | str | None = None, price: float | None = None, goodput: float | None = None,
    gpus_per_node: int | None = None, intra_node_bw: float | None = None, inter_node_bw: float | None = None,
    headroom_gib: float | None = None, ramp_start_gbs: int | None = None, ramp_tokens: float | str | None = None,
    # Layout: every parallelism, memory and kernel knob.
    tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, vpp: int = 1, zero: int = 1, dp_shard: int | None = None,
    mbs: int = 1, gbs: int | None = None, seq: int | None = None, recompute: Recompute | str = "selective",
    recompute_modules: tuple[RecomputeModule | str, ...] | str | None = None,
    offload_modules: tuple[OffloadModule | str, ...] | str | None = None,
    schedule: Schedule | str | None = None, precision: Precision | str = "bf16",
    attention: Attention | str = "flash", fused_kernels: bool = True, launch: Launch | str = "eager",
    sequence_parallel: bool = True,
    optimizer_offload: bool = False, bf16_grads: bool = False, bf16_moments: bool = False, fp32_params: bool = False,
    fp8_activations: bool = False, tp_comm_overlap: bool = False, deallocate_pipeline_outputs: bool = True,
    save_mlp_act_output: bool = True, overlap_grad_reduce: bool = True, blocking_p2p: bool = False,
    method: str = "full", lora_rank: int | None = None, lora_targets: str | None = None,
    loss_kernel: LossKernel | str | None = None, fp32_norms: bool | None = None,
    etp: int | None = None, dispatcher: Dispatcher | str = "alltoall", capacity_factor: float | None = None,
    force_balance: bool = False, grouped_gemm: GroupedGemm | str = "per_expert", moe_a2a_overlap: bool = False,
    # What to return.
    timeline: bool = False,
) -> Estimate:
    """Memory, time and cost of one layout; `.model_dump(mode="json")` is `trainplan estimate --json`.

    Parameters are the fields of contract.Job and contract.Layout (see their descriptions, e.g.
    `help(trainplan.tools.config.contract.Layout)`); timeline=True also records the pipeline's events.
    Raises InputError on invalid input.
    """
    from trainplan.tools.perf.estimate import estimate as _estimate

    arguments = dict(locals())
    arguments.pop("_estimate")
    return _estimate(**arguments)


def search(
    model: str, gpu: str, gpus: int, *,
    # Job.
    tokens: float | str | None = None, price: float | None = None, goodput: float | None = None,
    gpus_per_node: int | None = None, intra_node_bw: float | None = None, inter_node_bw: float | None = None,
    headroom_gib: float | None = None,
    # Layout: None searches the knob; a value (or a list of values) pins it.
    tp: Any = None, pp: Any = None, cp: Any = None, ep: Any = None, vpp: Any = None, zero: Any = None,
    dp_shard: Any = None, mbs: Any = None, recompute: Any = None, schedule: Any = None,
    gbs: int | None = None, seq: int | None = None, precision: Precision | str | None = None,
    attention: str | None = None, sequence_parallel: bool | None = None, optimizer_offload: bool | None = None,
    bf16_grads: bool | None = None, bf16_moments: bool | None = None, fp32_params: bool | None = None,
    fp8_activations: bool | None = None,
    tp_comm_overlap: bool | None = None, recompute_modules: list[str] | str | None = None,
    deallocate_pipeline_outputs: bool | None = None, fused_kernels: bool | None = None,
    launch: Launch | str | None = None, save_mlp_act_output: bool | None = None, overlap_grad_reduce: bool | None = None, blocking_p2p: bool | None = None,
    offload_modules: tuple[OffloadModule | str, ...] | str | None = None,
    method: str | None = None, lora_rank: int | None = None, lora_targets: str | None = None,
    loss_kernel: str | None = None, fp32_norms: bool | None = None,
    etp: int | None = None, dispatcher: Dispatcher | str | None = None, capacity_factor: float | None = None,
    force_balance: bool | None = None, grouped_gemm: GroupedGemm | str | None = None,
    moe_a2a_overlap: bool | None = None,
    # The search itself.
    objective: str | None = None, top_k: int | None = None, max_gpus: int | None = None,
    deadline_days: float | None = None, budget_usd: float | None = None, allow_cross_node_tp: bool | None = None,
    pareto: bool | None = None, engine: str | None = None, evidence_margin: float | None = None,
) -> SearchResult:
    """The best layouts for a job (tools/search/results.py); `.model_dump()` is the `trainplan search --json` object.

    Job and Layout parameters as in `estimate`; a Layout knob left None is searched. gbs None: the
    default rule (contract.DEFAULT_GBS_RULE); seq None: contract.DEFAULT_SEQ_RULE. The search options
    are the fields of contract.SearchOptions.
    """
    from trainplan.tools.search.driver import search as _search

    arguments = {k: v for k, v in locals().items() if k != "_search" and v is not None}
    return _search(**arguments)


def plan(
    request_text: str | None = None, *,
    # How to plan.
    backend: str = "auto", llm_model: str | None = None, engine: str | None = None,
    # The request's fields (agent/request.py PlanRequest: the contract's Job, Layout and SearchOptions
    # fields the planner takes); given ones override what the text says, None leaves them to the text or
    # the defaults.
    model: str | None = None, gpu: str | None = None, gpus: int | None = None, gpus_per_node: int | None = None,
    tokens: float | str | None = None, price: float | None = None, goodput: float | None = None,
    seq: int | None = None, gbs: int | None = None, batch_tokens: float | None = None,
    precision: str | None = None, tp: int | None = None, pp: int | None = None, cp: int | None = None,
    ep: int | None = None, vpp: int | None = None, zero: int | None = None, mbs: int | None = None,
    recompute: str | None = None, schedule: str | None = None, dispatcher: str | None = None,
    attention: str | None = None,
    objective: str | None = None, max_gpus: int | None = None, gpus_at_least: bool | None = None, deadline_days: float | None = None,
    budget_usd: float | None = None, method: str | None = None, lora_rank: int | None = None,
    lora_targets: str | None = None, fine_tuning: bool | None = None, model_from_size: str | None = None,
    solve: str | None = None,
    **options: Any,
) -> PlanReport:
    """A PlanReport for a plain-language request and/or its fields (offline planner unless an LLM is
    configured; backend: auto, offline or openai; engine: whose launch settings the report carries).
    `options` go to trainplan.agent.planner.plan (client, stream, on_event, request)."""
    from trainplan.agent.config import LlmEndpoint
    from trainplan.agent.planner import plan as _plan

    fields = {k: v for k, v in locals().items()
              if k not in ("request_text", "backend", "llm_model", "engine", "options", "_plan", "LlmEndpoint")
              and v is not None}
    endpoint = LlmEndpoint(client=options.pop("client", None), model=llm_model)
    return _plan(request_text, backend=backend, endpoint=endpoint, engine=engine, **options, **fields)


def limits(solve: str, model: str, gpu: str | None = None, gpus: int = 1, **fields: Any) -> dict:
    """The limit of one layout over the memory model (tools/search/limits.py): solve='seq' the longest sequence that
    fits, 'mbs' the largest micro-batch, 'gpu' every catalog GPU it fits on (smallest and cheapest named).
    `fields` are estimate's keywords (the Job's and Layout's). `trainplan estimate --solve` prints the same."""
    from trainplan.tools.search.limits import solve as _solve

    return _solve(solve, model, gpu, gpus, **fields)
