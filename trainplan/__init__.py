"""trainplan: plan distributed LLM training.

Public API (the DESIGN.md vocabulary as keyword arguments, DESIGN.md result shapes as dicts):
    trainplan.estimate(model=..., gpu=..., gpus=..., tp=..., ...) -> dict    # one layout
    trainplan.search(model=..., gpu=..., gpus=..., gbs=..., [pins]) -> dict  # the best layouts
    trainplan.plan("Llama 3 70B on 512 H100s for 15T tokens") -> PlanReport # the whole plan
"""

from __future__ import annotations

from trainplan.tools.errors import InputError

__all__ = ["InputError", "estimate", "plan", "search"]
__version__ = "0.1.0"


def estimate(**kwargs) -> dict:
    """Memory, time and cost of one layout; the same object as `trainplan estimate --json`."""
    from trainplan.tools.estimate import estimate as _estimate

    return _estimate(**kwargs)


def search(**kwargs) -> dict:
    """The best layouts for a job; the same object as `trainplan search --json`."""
    from trainplan.tools.search import search as _search

    return _search(**kwargs)


def plan(request_text: str | None = None, **kwargs):
    """A PlanReport for a plain-language request (offline planner unless an LLM is configured)."""
    from trainplan.agent.planner import plan as _plan

    return _plan(request_text, **kwargs)
