"""tools/search/memo.py: inside one plan's layout_memo() each key is computed once and handed out as a
fresh copy; outside it nothing is kept (a test that patches a constant between calls sees the change)."""

from __future__ import annotations

from trainplan.tools.search.memo import layout_memo, remembered


def _counter():
    calls = []

    def compute():
        calls.append(1)
        return {"time": {"step_s": float(len(calls))}}
    return calls, compute


def test_inside_the_memo_a_key_is_computed_once_and_each_caller_gets_its_own_copy():
    calls, compute = _counter()
    with layout_memo():
        first = remembered(("a",), compute)
        first["time"]["step_s"] = -1.0          # a caller editing its result
        second = remembered(("a",), compute)
        with layout_memo():                      # nested: the outer memo is shared
            third = remembered(("a",), compute)
        remembered(("b",), compute)
    assert len(calls) == 2
    assert second == third == {"time": {"step_s": 1.0}} and second is not third


def test_outside_the_memo_nothing_is_kept():
    calls, compute = _counter()
    with layout_memo():
        remembered(("a",), compute)
    assert remembered(("a",), compute) == {"time": {"step_s": 2.0}}
    assert remembered(("a",), compute) == {"time": {"step_s": 3.0}}
    assert len(calls) == 3
