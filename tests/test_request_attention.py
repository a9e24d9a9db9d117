"""The parser reads the attention kernel as users write it: 'FlashAttention-2' and 'SDPA' are flash2 (the kernel
PyTorch's scaled_dot_product_attention runs), 'eager attention' and 'without flash attention' are eager,
'FlashAttention 1' is flash1, 'FA3' and 'cuDNN attention' are flash (the GPU's own fused kernel). A request that
named FlashAttention-2 was once planned with the Hopper kernel, silently."""

from __future__ import annotations

import pytest

from trainplan.agent.planner import plan
from trainplan.agent.request import parse_partial
from trainplan.tools.core.enums import Attention


@pytest.mark.parametrize("text, kernel", [
    ("Llama 3 8B on 8 H100s with FlashAttention-2", "flash2"),
    ("Llama 3 8B on 8 H100s, flash attention v2.5", "flash2"),
    ("Llama 3 8B on 8 H100s using SDPA", "flash2"),
    ("Llama 3 8B on 8 H100s, FA2", "flash2"),
    ("Llama 3 8B on 8 H100s with eager attention", "eager"),
    ("Llama 3 8B on 8 H100s without flash attention", "eager"),
    ("Llama 3 8B on 8 H100s, flash attention off", "eager"),
    ("Llama 3 8B on 8 H100s with FlashAttention 1", "flash1"),
    ("Llama 3 8B on 8 H100s with Triton flash attention", "flash1"),
    ("Llama 3 8B on 8 H100s with FA3", "flash"),
    ("Llama 3 8B on 8 H100s with cuDNN attention", "flash"),
    ("Llama 3 8B on 8 H100s with flash attention", "flash"),
])
def test_the_attention_kernel_named_in_the_text_is_set(text, kernel):
    got = parse_partial(text)
    assert got.attention == kernel and Attention(kernel)
    assert got.gpu and got.gpus == 8 and not got.unparsed


def test_a_refused_version_sets_nothing_and_stays_unread():
    """'no FlashAttention-2' says which kernel not to run, not to run none: it sets nothing, and the words
    are listed as not understood."""
    got = parse_partial("Llama 3 8B on 8 H100s, no FlashAttention-2")
    assert got.attention is None and "FlashAttention" in got.unparsed


def test_no_kernel_named_leaves_it_to_the_engine():
    assert parse_partial("Llama 3 8B on 8 H100s with torchtitan").attention is None


def test_the_plan_runs_the_kernel_the_request_names():
    text = "Llama 3 8B on 8 H100s for 10B tokens, seq 8192, gbs 64, with FlashAttention-2"
    flash2 = plan(text, backend="offline").recommended
    hopper = plan(text.replace("FlashAttention-2", "FA3"), backend="offline").recommended
    assert flash2["config"]["attention"] == "flash2" and hopper["config"]["attention"] == "flash"
    assert flash2["time"]["tokens_per_s"] < hopper["time"]["tokens_per_s"]
