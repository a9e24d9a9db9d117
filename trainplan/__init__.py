"""trainplan: plan distributed LLM training.

Public API; every keyword is a field of trainplan.tools.config.contract.Job or Layout (its description there is
also the CLI help and the tool argument's description; None means the field's default rule):
    trainplan.estimate(model=..., gpu=..., gpus=..., tp=..., ...) -> Estimate  # one layout
    trainplan.search(model=..., gpu=..., gpus=..., [pins]) -> SearchResult     # the best layouts
    trainplan.plan("Llama 3 70B on 512 H100s for 15T tokens") -> PlanReport    # the whole plan
    trainplan.limits("seq", model=..., gpu=..., gpus=..., [layout]) -> dict     # longest seq / largest mbs / GPUs

`Estimate.model_dump(mode="json")` is the `trainplan estimate --json` object, `SearchResult.model_dump()`
the `trainplan search --json` one. estimate, search and plan are written out in trainplan/_api.py, generated
from the models by `python -m trainplan.api_gen --write` (tests/test_api_gen.py checks it is current). Nothing
heavy is imported until a function is called, so `trainplan --help` stays fast.
"""

from __future__ import annotations

from typing import Any

from trainplan._api import estimate, plan, search
from trainplan.tools.core.errors import InputError

__all__ = ["InputError", "__version__", "estimate", "limits", "plan", "search"]
__version__ = "0.1.0"


def limits(solve: str, model: str, gpu: str | None = None, gpus: int = 1, **fields: Any) -> dict:
    """The limit of one layout over the memory model (tools/search/limits.py): solve='seq' the longest sequence that
    fits, 'mbs' the largest micro-batch, 'gpu' every catalog GPU it fits on (smallest and cheapest named).
    `fields` are estimate's keywords (the Job's and Layout's). `trainplan estimate --solve` prints the same."""
    from trainplan.tools.search.limits import solve as _solve

    return _solve(solve, model, gpu, gpus, **fields)
