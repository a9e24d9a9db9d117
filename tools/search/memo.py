"""A memo of exact layout results, and of searches' scored layouts (driver._search_once: a search that differs from
an earlier one only in top_k is ranked again from them), for the span of one plan (agent/offline_plan.py
offline_report).

One plan searches many GPU counts, engines and limits, and their exact re-scores (driver.exact) meet the
same layout of the same job again and again (about a third of them in an 8B deadline plan). Within one
plan nothing the scalar path reads changes, so each distinct (model, cluster, config, run, headroom) is
evaluated once and its JSON result handed out as a fresh copy. Outside `layout_memo()` nothing is kept:
a caller that changes the model between calls (a test patching a constant) sees every change."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from trainplan.tools.core.safe_json import tree_copy

_memo: dict | None = None


@contextmanager
def layout_memo() -> Iterator[None]:
    """Keep exact results for the block's span (nested blocks share the outermost one's)."""
    global _memo
    if _memo is not None:
        yield
        return
    _memo = {}
    try:
        yield
    finally:
        _memo = None


def remembered(key: tuple, compute: Callable[[], dict]) -> dict:
    """compute() once per key inside layout_memo(), a deep copy each time (callers may edit their result);
    outside it, compute() every time."""
    memo = _memo   # read once: a plan ending on another thread sets the module's memo back to None
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return tree_copy(memo[key])
