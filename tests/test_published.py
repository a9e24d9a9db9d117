"""Published runs reproduced by the tools, side by side with the figure and a stated tolerance.

Figures come from evals/references/public-runs.yaml (each with its source there). Which rows
set an efficiency constant is written in the GPU catalog's sources: A100 on SC21 rows 1,3,5,7,9;
Hopper on the Llama 3 8K/8,192-GPU row (GEMM) and the 131K CP16 row (attention). Everything else
here is held out.
"""

import json

import pytest

import trainplan

TOLERANCE = 0.10

# Megatron SC21 Table 1: params (B), heads, hidden, layers, tp, pp, gpus, batch, TFLOP/s per GPU.
SC21_ROWS = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]


def sc21_prediction(tmp_path, row) -> float:
    """Hardware TFLOP/s (Eq. 3 counts recompute) for one SC21 row: A100 80GB, seq 2048, vocab 51200,
    full recompute, mbs 1, 1F1B, ZeRO-0 and no sequence parallelism (2021 Megatron; micro-batch and
    schedule per row are not published)."""
    params_b, heads, hidden, layers, tp, pp, gpus, batch, _ = row
    config = tmp_path / f"gpt-{params_b}b.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads,
                                  "vocab_size": 51200, "n_positions": 2048, "tie_word_embeddings": True}))
    result = trainplan.estimate(model=str(config), gpu="a100-sxm-80gb", gpus=gpus, tp=tp, pp=pp, mbs=1,
                                gbs=batch, seq=2048, recompute="full", zero=0, sequence_parallel=False,
                                attention="eager")
    return result.time.hardware_tflops_per_gpu


def test_sc21_table1_mape_within_tolerance(tmp_path):
    errors = [sc21_prediction(tmp_path, row) / row[-1] - 1 for row in SC21_ROWS]
    mape = sum(abs(e) for e in errors) / len(errors)
    assert mape < TOLERANCE, errors
    # The three smallest models run 12-15% below the paper: eager attention and elementwise work
    # dominate their time, and the per-row micro-batch size is not published.
    assert all(abs(e) < 0.2 for e in errors), errors
    assert all(abs(e) < TOLERANCE for e in errors[3:]), errors


def test_megatron_gpt3_175b_example():
    """examples/pretrain_gpt3_175B.sh: 1024 A100, TP8 PP16, mbs 1, gbs 1536, full recompute: 138 TFLOP/s."""
    r = trainplan.estimate(model="gpt3-175b", gpu="a100-sxm-80gb", gpus=1024, tp=8, pp=16, mbs=1, gbs=1536,
                           seq=2048, recompute="full", zero=0, sequence_parallel=False, attention="eager")
    assert r.time.hardware_tflops_per_gpu == pytest.approx(138, rel=TOLERANCE)
    assert r.fits


LLAMA3_TABLE4 = [  # gpus, cp, seq, dp, TFLOP/s per GPU (Llama 3 paper Table 4); 16M tokens per batch
    (8192, 1, 8192, 64, 430), (16384, 1, 8192, 128, 400), (16384, 16, 131072, 8, 380),
]


def llama3_layout(gpus, cp, seq):
    """TP8 PP16, no recompute at 8K; FSDP shards the gradients, accumulated in FP32 over each chunk's
    group of micro-batches and reduce-scattered once per group (zero=2 with the interleaved
    schedule, Llama 3 paper §3.3.2). V is not published: we assume one layer per virtual stage (vpp=8).
    Meta's fused SwiGLU recomputes its product in its backward (save_mlp_act_output=False; assumed,
    evals/runs/llama3-405b.yaml says why)."""
    return dict(model="llama3-405b", gpu="h100-sxm-80gb", gpus=gpus, tp=8, pp=16, cp=cp, vpp=8, zero=2,
                gbs=16 * 2**20 // seq, seq=seq, recompute="none", save_mlp_act_output=False)


@pytest.mark.parametrize("gpus, cp, seq, dp, published", LLAMA3_TABLE4)
def test_llama3_405b_table4(gpus, cp, seq, dp, published):
    r = trainplan.estimate(**llama3_layout(gpus, cp, seq))
    assert r.config.dp == dp
    # The paper does not say how it counts attention FLOPs; at 131K the causal count is the one
    # consistent with its MFU falling only slightly, so we compare in that convention.
    assert r.time.tflops_per_gpu == pytest.approx(published, rel=TOLERANCE)


def test_llama31_405b_gpu_hours():
    """15.6T tokens on the 16K layout against 30.84M H100-hours (Llama 3.1 model card).
    The published figure also covers the long-context stage and every other overhead; 15% tolerance."""
    r = trainplan.estimate(**llama3_layout(16384, 1, 8192), tokens="15.6T")
    assert r.training.gpu_hours == pytest.approx(30.84e6, rel=0.15)


def test_deepseek_v3_gpu_hours_and_cost():
    """2,048 H800, PP16 EP64 ZeRO-1 DualPipe FP8, 14.8T tokens at $2: 2.664M GPU-hours, $5.328M
    (DeepSeek-V3 report Table 1, pre-training). Global batch 15,360 x 4,096; mbs 1 assumed. The
    authors' memory techniques (§3.2.3, §3.3.3): RMSNorm, MLA up-projection and SwiGLU-output
    recompute, FP8 SwiGLU inputs, BF16 Adam moments. GPU-hours within the evals' 25% (the step
    model predicts about 11% fewer than published: it was 0.3% only with full recompute). Learned
    routing (its load imbalance, moe.py), one fused grouped-GEMM kernel (DeepGEMM) and DeepEP's dispatch
    (§3.2.2: a token crosses the network once per node; §3.3.3: FP8 dispatch, BF16 combine)."""
    r = trainplan.estimate(model="deepseek-v3", gpu="h800-sxm-80gb", gpus=2048, pp=16, ep=64, zero=1,
                           schedule="dualpipe", precision="fp8", seq=4096, gbs=15360, mbs=1,
                           recompute="selective", recompute_modules=["layernorm", "mla_up_proj", "moe_act"],
                           fp8_activations=True, bf16_moments=True, grouped_gemm="fused", dispatcher="deepep",
                           tokens="14.8T", price=2.0)
    assert r.fits
    assert r.training.gpu_hours == pytest.approx(2.664e6, rel=0.25)
    assert r.training.cost_usd == pytest.approx(5.328e6, rel=0.25)


@pytest.mark.parametrize("gpus, cp, seq", [(8192, 1, 8192), (16384, 1, 8192), (16384, 16, 131072)])
def test_llama3_405b_published_layouts_fit(gpus, cp, seq):
    """Meta trained 405B at 8K without activation recompute and at 131K with CP16 (§3.3.2): FSDP
    shards the gradients (zero=2, reduce-scattered once per chunk group) and the first and last
    stages hold one layer fewer. Every layout fits with nothing recomputed but the SwiGLU product."""
    r = trainplan.estimate(**llama3_layout(gpus, cp, seq))
    assert r.fits, r.get("reason")
