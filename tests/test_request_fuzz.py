"""Any text is either read or refused with one InputError line: never another exception, and never
an impossible value in what is read."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.agent.request import parse_partial
from trainplan.tools.core.errors import InputError

WORDS = ["Llama 3 70B", "a", "70B", "Mistral", "on", "H100", "H100s", "PCIe", "NVL", "80GB", "nodes", "of", "x",
         "GPUs", "for", "tokens", "T", "B", "k", "-", ".", ",", "$", "/GPU-hour", "budget", "in", "days", "weeks",
         "up to", "at most", "cheapest", "fastest", "not", "no", "fp8", "bf16", "TP", "PP", "ZeRO", "=", "-way",
         "tensor parallelism", "pipeline", "recompute", "seq", "gbs", "张", "台", "卡", "天内", "万亿", "，", "用",
         "训练", "MI300X", "RTX", "9090", "V100", "per node", "each", "with", "0", "1", "8", "512", "1.5", "-512",
         "16,384", "1e999", "15.6e12", "99999999999999999999", "./x.json"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=24), st.sampled_from([" ", "", "  "]))
def test_request_like_text_is_read_or_refused(words, sep):
    check(sep.join(words))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_read_or_refused(text):
    check(text)


def check(text: str) -> None:
    try:
        request = parse_partial(text)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    for name in ("gpus", "max_gpus", "gpus_per_node", "seq", "gbs"):
        value = getattr(request, name)
        assert value is None or (isinstance(value, int) and value >= 1), (name, value)
    for name in ("tokens", "price", "budget_usd", "deadline_days", "batch_tokens"):
        value = getattr(request, name)
        assert value is None or (math.isfinite(value) and value > 0), (name, value)
