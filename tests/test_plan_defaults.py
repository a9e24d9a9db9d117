"""The defaults search and plan share: the global batch follows published runs of the model's size."""

from __future__ import annotations

import pytest

from trainplan.tools.hardware.catalog import load_model
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.plan_defaults import TOKENS_PER_STEP_POINTS, default_gbs, default_gbs_reason, tokens_per_step


def _params(name: str) -> float:
    return count_params(load_model(name)).total


@pytest.mark.parametrize("model, seq, gpus, published_tokens", [
    ("llama3-405b", 8192, 16384, 16 * 2**20),     # Llama 3 paper §3.4.1: 2048 x 8192 = 16M
    ("deepseek-v3", 4096, 2048, 15360 * 4096),    # DeepSeek-V3 report: 15,360 x 4,096
    ("llama3-70b", 4096, 1024, 4 * 2**20),        # Llama 2 §2.2: 4M tokens for 7B-70B
    ("llama3-8b", 4096, 64, 4 * 2**20),
])
def test_default_batch_is_within_a_power_of_two_of_published_runs(model, seq, gpus, published_tokens):
    tokens = default_gbs(seq, gpus, _params(model)) * seq
    assert published_tokens / 2**0.5 <= tokens <= published_tokens * 2**0.5, tokens


def test_tokens_per_step_grow_with_size_and_pass_through_the_published_points():
    sizes = [1e8, 1e9, 7e9, 7e10, 1.75e11, 4.05e11, 6.71e11, 2e12]
    tokens = [tokens_per_step(p) for p in sizes]
    assert tokens == sorted(tokens)
    for params, published, _ in TOKENS_PER_STEP_POINTS:
        assert tokens_per_step(params) == pytest.approx(published)


def test_at_least_one_sequence_per_eight_gpus():
    assert default_gbs(8192, 16384, 8e9) == 2048
    assert default_gbs(8192, 8, 8e9) == 512


def test_long_sequences_keep_the_batch_in_tokens():
    """Llama 3 405B at 131K on 16,384 GPUs kept 16M tokens per step (CP16, 8,192 tokens per rank), not
    one 131K sequence per 8 GPUs (2,048 sequences, 268M tokens)."""
    gbs = default_gbs(131072, 16384, _params("llama3-405b"))
    assert gbs * 131072 == 16 * 2**20
    assert default_gbs(32768, 1024, _params("llama3-70b")) * 32768 <= 8 * 2**20


def test_the_reason_states_the_figure_and_its_source():
    text = default_gbs_reason(4096, 2048, _params("deepseek-v3"))
    assert "16384 sequences" in text and "DeepSeek-V3" in text and "62.9M" in text
    with pytest.raises(InputError):
        default_gbs(0, 8, 8e9)


@pytest.mark.parametrize("text, seq, tokens", [
    ("Train Llama 3 8B on 8 H100s for 100B tokens at 4096 tokens", 4096, 100e9),
    ("Llama 3 8B on 8 H100s at 4096 tokens for 100B tokens", 4096, 100e9),
    ("Llama 3 8B on 8 H100s, 32k tokens per sequence, 1T tokens", 32768, 1e12),
    ("fine-tune Llama 3 8B on 8 H100s with 100000 tokens", None, 100000),   # not a sequence length
])
def test_a_sequence_written_in_tokens_is_read_as_the_sequence(text, seq, tokens):
    """'at 4096 tokens' was read as 4,096 training tokens (issue 20): it is the sequence length."""
    from trainplan.agent.request import parse_partial

    request = parse_partial(text)
    assert (request.seq, request.tokens, request.unparsed) == (seq, tokens, None)
