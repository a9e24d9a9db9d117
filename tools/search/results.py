"""The typed result of a search (tools/search/driver.py `search`, tools/search/scalar.py `search_scalar`).

`SearchResult.model_dump()` is the object `trainplan search --json` prints and the `search_configs` tool
returns; code inside the package reads the attributes. A candidate (and an alternative's candidate, and
a Pareto point's config) is an estimate result in its JSON form, `Estimate.model_dump(mode="json")`
(tools/config/contract.py): the ranking in tools/search/rank.py and tools/search/choice.py reads those
dicts as they are.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_serializer

Number = float | int
"""A number as the request gave it: a whole number stays one (pydantic would turn an int given for a
float field into a float, and the dump would then differ from the request's)."""


class ChosenPerLayout(BaseModel):
    """What the search chooses layout by layout among the knobs the request left open (tools/search/recipes.py)."""

    knobs: list[str] = Field(description="the knobs chosen per layout")
    recompute_ladder: list[list[Any]] = Field(description="[recompute, [modules]] steps, least recompute first")
    storage_variants: list[dict[str, Any]] = Field(description="the low-precision storage choices tried, in order")


class SearchJobSummary(BaseModel):
    """The job as the search resolved it: defaults filled in, pins and fixed knobs in the contract's vocabulary."""

    model: str
    gpu: str
    gpus: int
    max_gpus: int | None
    gpu_counts: list[int] = Field(description="the GPU counts tried")
    gbs: int
    seq: int
    tokens: Number | None
    price: Number
    precision: str
    goodput: Number
    top_k: int
    pins: dict[str, Any] = Field(description="the pinned knobs only, each a value or a list of values")
    deadline_days: Number | None
    budget_usd: Number | None
    headroom_gib: Number
    allow_cross_node_tp: bool
    gpus_per_node: int
    engine: str | None
    fixed: dict[str, Any] = Field(description="the fixed layout knobs, as resolved, less those chosen per layout")
    chosen_per_layout: ChosenPerLayout


class Alternative(BaseModel):
    """The best layout of a structurally different family (tools/search/choice.py FAMILIES), or why there is none."""

    family: str
    meaning: str
    candidate: dict[str, Any] | None = Field(description="its best exactly scored layout; null: none feasible")
    worse_by: float | None = Field(description="how much worse than the first candidate on the objective")
    why: str


class ParetoPoint(BaseModel):
    """The fastest layout at one GPU count on the days/cost front."""

    gpus: int
    days: float
    cost_usd: float
    gpu_hours: float
    tokens_per_s: float
    config: dict[str, Any]


class SearchResult(BaseModel):
    """The best layouts of a job, best first, and what the search counted on the way."""

    job: SearchJobSummary
    objective: str
    candidates: list[dict[str, Any]] = Field(description="estimate results, best first, at most top_k; the first "
                                                         "is the simplest within SIMPLER_MARGIN of the best")
    evaluated: int = Field(description="layouts evaluated")
    feasible: int = Field(description="layouts valid and within memory, deadline and budget")
    rejected: dict[str, int] = Field(description="reason -> layouts rejected for it, most first")
    evidence_margin: Number
    evidence: str | None = Field(description="the note of the evidence gate (tools/search/choice.py); null: none")
    chosen: str | None = Field(description="what the search chose for the first candidate among the knobs the "
                                           "request left open (tools/search/recipes.py); null: nothing")
    alternatives: list[Alternative]
    pareto: list[ParetoPoint] | None = Field(default=None, description="the days/cost front across GPU counts "
                                                                       "(pareto=True); left out of the dump when null")
    notes: list[str]
    wall_s: float
    layouts_per_s: float

    @model_serializer(mode="wrap")
    def _leave_out_pareto(self, handler):
        data = handler(self)
        if data.get("pareto") is None:
            data.pop("pareto", None)
        return data


__all__ = ["Alternative", "ChosenPerLayout", "ParetoPoint", "SearchJobSummary", "SearchResult"]
