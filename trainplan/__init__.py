"""trainplan: plan distributed LLM training.

Public API (the DESIGN.md vocabulary as keyword arguments, DESIGN.md result shapes as dicts):
    trainplan.estimate(model=..., gpu=..., gpus=..., tp=..., ...) -> dict
"""

from __future__ import annotations

from trainplan.tools.errors import InputError

__all__ = ["InputError", "estimate"]
__version__ = "0.1.0"


def estimate(**kwargs) -> dict:
    """Memory, time and cost of one layout; the same object as `trainplan estimate --json`."""
    from trainplan.tools.estimate import estimate as _estimate

    return _estimate(**kwargs)
