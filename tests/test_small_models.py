"""Small models on one node: with hidden size 1024 every GEMM is short, so the per-kernel launch floor and
the latency of each tensor-parallel collective are a large share of the step, and splitting the model
over more GPUs of the node only slows it (issue 10: "TP on hidden size 1024 is far too fast")."""

import json

import pytest

import trainplan
from trainplan.tools.perf import compute, host

# Qwen3-0.6B's shape (Hugging Face Qwen/Qwen3-0.6B config.json; tests/test_hf.py counts its parameters).
QWEN3_0_6B = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
              "tie_word_embeddings": True}


@pytest.fixture
def small_model(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_0_6B))
    return str(path)


def test_tensor_parallelism_slows_a_small_model(small_model):
    steps = [trainplan.estimate(small_model, "h100", 8, tp=tp, gbs=64, seq=4096).time.step_s
             for tp in (1, 2, 4, 8)]
    assert steps == sorted(steps) and steps[-1] > 2 * steps[0]
    best = trainplan.search(small_model, "h100", 8, gbs=64, seq=4096, top_k=1).candidates[0]["config"]
    assert best["tp"] == 1


def test_launches_weigh_more_as_the_model_is_split(small_model, monkeypatch):
    def step(tp):
        return trainplan.estimate(small_model, "h100", 8, tp=tp, pp=1, mbs=1, gbs=64, seq=2048).time.step_s

    # The per-kernel floors: the device's launch gap (compute.KERNEL_LAUNCH_S) and, in PyTorch eager, the host's
    # dispatch of every op (host.py), under which the launch gaps hide once the layer waits on the host.
    with_launches = {tp: step(tp) for tp in (1, 8)}
    monkeypatch.setattr(compute, "KERNEL_LAUNCH_S", 0.0)
    monkeypatch.setattr(host, "HOST_S_PER_OP", 0.0)
    share = {tp: 1 - step(tp) / with_launches[tp] for tp in (1, 8)}
    assert 0 < share[1] < share[8]
