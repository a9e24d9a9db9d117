"""`SearchRequest`: one search request as given, before any check (issue 22: the typed record the search
driver's internal functions take instead of loose keywords).

    SearchRequest.of(model, gpu, gpus, gbs=..., tp=8, objective="cost", recompute_modules=..., ...)

Its fields are the job (model, gpu, gpus, gbs, seq, tokens, price, goodput, the cluster overrides,
headroom), the pins (tp ... schedule: None leaves a knob free, a value or a list of values pins it), the
search options (objective, top_k, max_gpus, deadline_days, budget_usd, allow_cross_node_tp, pareto,
engine, evidence_margin) and `fixed`, every other keyword (the fixed layout knobs, search_space.FIXED_KNOBS).
Nothing is checked here: prepare (tools/search/driver.py) checks the request and raises its InputErrors in its own
order, and refuses an unknown keyword in `fixed` by name. The defaults are the search's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping


@dataclass(frozen=True)
class SearchRequest:
    """A search request as given (see the module docstring); tools/search/driver.py prepare checks it."""

    model: str
    gpu: str
    gpus: int
    # The job.
    gbs: int | None = None
    seq: int | None = None
    tokens: str | float | None = None
    price: float | None = None
    precision: str | None = "bf16"
    goodput: float | None = None
    gpus_per_node: int | None = None
    intra_node_bw: float | None = None
    inter_node_bw: float | None = None
    headroom_gib: float | None = None
    # The pins: None searches the knob, a value or a list of values pins it.
    tp: Any = None
    pp: Any = None
    cp: Any = None
    ep: Any = None
    vpp: Any = None
    zero: Any = None
    dp_shard: Any = None
    mbs: Any = None
    recompute: Any = None
    schedule: Any = None
    # The search options.
    objective: str | None = "throughput"
    top_k: int | None = 5
    max_gpus: int | None = None
    deadline_days: float | None = None
    budget_usd: float | None = None
    allow_cross_node_tp: bool | None = False
    pareto: bool | None = False
    engine: str | None = None
    evidence_margin: float | None = None
    # Every other keyword: the fixed layout knobs (prepare refuses an unknown one).
    fixed: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, model: str, gpu: str, gpus: int, **kwargs: Any) -> SearchRequest:
        """The request of search's keywords: the named ones to their fields, the rest to `fixed`."""
        named = {f.name for f in fields(cls)} - {"model", "gpu", "gpus", "fixed"}
        given = {k: v for k, v in kwargs.items() if k in named}
        return cls(model=model, gpu=gpu, gpus=gpus, **given,
                   fixed={k: v for k, v in kwargs.items() if k not in named})
