"""Fine-tuning methods (tools/perf/finetune.py): memory against published claims, the frozen-base
mechanisms one by one, time and the FLOPs convention, and bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainplan.tools.perf.loss import LOSS_CODES

from trainplan.tools.perf import finetune
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.hardware.counting import count_params, flops_per_token
from trainplan.tools.core.errors import InputError
from trainplan.tools.perf.estimate import estimate
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import memory_breakdown, memory_totals_vectorised
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.perf.step import step_time

LLAMA_65B = str(Path(__file__).parent / "data" / "llama-65b.json")


# --- published claims ------------------------------------------------------------------------------

def test_qlora_fine_tunes_65b_on_one_48gb_gpu():
    # Dettmers et al. 2023: Guanaco 65B, LoRA r=64 on every linear layer, NF4 + double quantisation,
    # paged AdamW, gradient checkpointing, on one 48 GB GPU (the L40S is the catalog's 48 GB card).
    result = estimate(LLAMA_65B, "l40s", 1, method="qlora", lora_rank=64, lora_targets="all-linear",
                      recompute="full", seq=512)
    assert result.fits, result.get("reason")


def test_bf16_lora_of_70b_does_not_fit_48gb():
    result = estimate("llama3-70b", "l40s", 1, method="lora", recompute="full", seq=512)
    assert not result.fits
    assert result.memory_gib.weights > 120     # 70.6B frozen bf16 weights alone are 131 GiB


def test_lora_of_8b_fits_a_24gb_card_with_checkpointing_only():
    kwargs = dict(method="lora", seq=2048)
    assert estimate("llama3-8b", "rtx-4090", 1, recompute="full", **kwargs).fits
    assert not estimate("llama3-8b", "rtx-4090", 1, recompute="none", **kwargs).fits


def test_full_fine_tuning_of_8b_with_adam_needs_offload_on_one_80gb_gpu():
    kwargs = dict(method="full", recompute="full", seq=2048)
    without = estimate("llama3-8b", "h100-sxm-80gb", 1, **kwargs)
    assert not without.fits and without.memory_gib.optimizer > 80   # 12 B/param of 8B
    assert estimate("llama3-8b", "h100-sxm-80gb", 1, optimizer_offload=True, **kwargs).fits


# --- mechanisms -----------------------------------------------------------------------------------

def _memory(model="llama3-8b", gpus=1, **kw):
    spec = load_model(model)
    return memory_breakdown(spec, resolve_config(spec, gpus, **kw), load_gpu("h100"))


def test_adapter_parameter_count_is_r_times_fan_in_plus_fan_out():
    spec = load_model("llama3-8b")   # h 4096, 32 heads of 128, 8 kv heads, f 14336, 32 layers
    h, d, a, g, f, layers = 4096, 128, 32, 8, 14336, 32
    attention = (h + a * d) + 2 * (h + g * d) + (a * d + h)
    assert finetune.total_adapter_params(spec, 8, "attention") == 8 * attention * layers
    assert finetune.total_adapter_params(spec, 8, "all-linear") == 8 * (attention + 3 * (h + f)) * layers
    result = estimate("llama3-8b", "h100", 1, method="lora", lora_rank=8, lora_targets="attention")
    assert result.params.trainable == 8 * attention * layers
    # qv, PEFT's default for Llama models: q (h -> a d) and v (h -> g d) only
    assert finetune.total_adapter_params(spec, 8, "qv") == 8 * ((h + a * d) + (h + g * d)) * layers
    assert estimate("llama3-8b", "h100", 1, method="lora", lora_rank=8,
                    lora_targets="qv").params.trainable == 8 * ((h + a * d) + (h + g * d)) * layers


def test_frozen_base_has_no_gradients_and_no_base_optimizer_states():
    lora = _memory(method="lora", lora_rank=16)
    adapters = finetune.total_adapter_params(load_model("llama3-8b"), 16, "all-linear")
    gib = 2.0**30
    assert lora.breakdown["gradients/adapters"] == pytest.approx(4 * adapters / gib)
    assert lora.breakdown["optimizer/adapters"] == pytest.approx(8 * adapters / gib)
    # on one GPU without accumulation the adapters' gradients are born in the backward, after the activations'
    # peak (tools/perf/memory.py): the peak holds none of them
    assert lora.gradients == pytest.approx(4 * adapters / gib + lora.breakdown.get("gradients/born_in_backward", 0.0))
    assert lora.breakdown["weights/frozen_base"] == pytest.approx(2 * count_params(load_model("llama3-8b")).total / gib)


def test_nf4_without_double_quantisation_is_4_5_bits_and_one_kernel():
    """bitsandbytes without double quantisation keeps an fp32 absmax per 64 weights (Dettmers et al. 2023 §3): 0.373
    bits per base weight more, on the 4-bit linears only; its dequantisation is the NF4 kernel alone."""
    from trainplan.tools.perf.state_bytes import NF4_SINGLE_QUANT_BYTES_PER_PARAM

    assert NF4_SINGLE_QUANT_BYTES_PER_PARAM * 8 == pytest.approx(4 + 32 / 64)
    counts = count_params(load_model("llama3-8b"))
    linear = sum(lp.non_expert - lp.norms - lp.router for lp in counts.layers)
    single, double = (_memory(method="qlora", double_quant=dq).breakdown["weights/frozen_base"] for dq in (False, None))
    assert (single - double) * 2**30 == pytest.approx((NF4_SINGLE_QUANT_BYTES_PER_PARAM - finetune.NF4_BYTES_PER_PARAM)
                                                      * linear)
    spec = load_model("llama3-8b")
    cfgs = [resolve_config(spec, 1, method="qlora", double_quant=dq, gbs=8) for dq in (False, True)]
    assert [finetune.dequant_kernels(c) for c in cfgs] == [1, finetune.DEQUANT_KERNELS]
    assert "NF4 without double quantisation (4.500 bits" in finetune.model_states_sentence(cfgs[0].model_dump())
    for dq in (0, 1):   # the vectorised path takes the code as the scalar path takes the knob
        cfg = cfgs[dq]
        arrays = {key: np.array([value]) for key, value in dict(
            tp=1, pp=1, cp=1, ep=1, dp=1, vpp=1, zero=0, mbs=1, num_microbatches=8, seq=cfg.seq, recompute=1,
            schedule=1, precision=0, method=finetune.METHOD_CODES[cfg.method], lora_rank=cfg.lora_rank,
            lora_targets=finetune.TARGET_CODES[cfg.lora_targets], loss_kernel=LOSS_CODES[cfg.loss_kernel],
            fp32_norms=int(cfg.fp32_norms), double_quant=dq, fused_kernels=int(cfg.fused_kernels)).items()}
        assert memory_totals_vectorised(spec, load_gpu("h100"), arrays)["total"][0] == pytest.approx(
            memory_breakdown(spec, cfg, load_gpu("h100")).total)
    with pytest.raises(InputError) as err:
        estimate("llama3-8b", "h100", 1, method="lora", double_quant=False)
    assert "double_quant applies to qlora" in str(err.value)


def test_nf4_with_double_quantisation_is_4_127_bits_and_only_for_the_linears():
    assert finetune.NF4_BYTES_PER_PARAM * 8 == pytest.approx(4 + 8 / 64 + 32 / (64 * 256))
    spec = load_model("llama3-8b")
    counts = count_params(spec)
    linear = sum(lp.non_expert - lp.norms - lp.router for lp in counts.layers)
    other = counts.total - linear
    qlora = _memory(method="qlora")
    expected = finetune.NF4_BYTES_PER_PARAM * linear + 2 * other
    assert qlora.breakdown["weights/frozen_base"] * 2**30 == pytest.approx(expected)
    # the dequantisation buffer: one bf16 copy of the largest linear (the 4096 x 14336 MLP matrices)
    assert qlora.breakdown["weights/nf4_dequant_buffer"] * 2**30 == pytest.approx(2 * 4096 * 14336)
    # qlora's paged AdamW states are not on the GPU; lora's are
    assert "optimizer/adapters" not in qlora.breakdown and "optimizer/adapters" in _memory(method="lora").breakdown


def test_frozen_untargeted_linears_save_no_input():
    kwargs = dict(method="lora", recompute="none", seq=2048)
    attention_only = _memory(lora_targets="attention", **kwargs).breakdown
    all_linear = _memory(lora_targets="all-linear", **kwargs).breakdown
    full = _memory(recompute="none", seq=2048).breakdown
    assert "activations/mlp/fc1_input" not in attention_only and "activations/mlp/fc2_input" not in attention_only
    assert all_linear["activations/mlp/fc1_input"] == pytest.approx(full["activations/mlp/fc1_input"])
    # the x A products: 2 B x tokens x r per targeted linear (4 attention + 3 MLP), 32 layers
    assert all_linear["activations/lora/xa_products"] * 2**30 == pytest.approx(2 * 2048 * 16 * 7 * 32)


def test_zero3_shards_the_frozen_base():
    one = _memory(method="qlora", zero=1, gpus=8).breakdown["weights/frozen_base"]
    three = _memory(method="qlora", zero=3, gpus=8).breakdown["weights/frozen_base"]
    assert three == pytest.approx(one / 8)


def test_vectorised_memory_agrees_with_the_scalar_path():
    spec, gpu = load_model("llama3-8b"), load_gpu("h100")
    for method in ("lora", "qlora"):
        for targets in ("attention", "all-linear", "qv"):
            cfg = resolve_config(spec, 8, tp=2, zero=3, method=method, lora_rank=32, lora_targets=targets,
                                 gbs=16, recompute="full")
            scalar = memory_breakdown(spec, cfg, gpu).total
            arrays = {key: np.array([value]) for key, value in dict(
                tp=2, pp=1, cp=1, ep=1, dp=4, vpp=1, zero=3, mbs=1, num_microbatches=4, seq=cfg.seq, recompute=2,
                schedule=1, precision=0, method=finetune.METHOD_CODES[cfg.method], lora_rank=32,
                lora_targets=finetune.TARGET_CODES[cfg.lora_targets], loss_kernel=LOSS_CODES[cfg.loss_kernel],
                fp32_norms=int(cfg.fp32_norms)).items()}
            assert memory_totals_vectorised(spec, gpu, arrays)["total"][0] == pytest.approx(scalar)


def _step(method, **kw):
    spec = load_model("llama3-8b")
    cfg = resolve_config(spec, 8, gbs=64, seq=2048, recompute="none", method=method, **kw)
    return spec, cfg, step_time(spec, cfg, ClusterSpec.build(load_gpu("h100"), 8))


def test_lora_skips_frozen_weight_gradients_and_qlora_pays_for_dequantisation():
    _, _, full = _step("full")
    _, _, lora = _step("lora")
    _, _, qlora = _step("qlora")
    assert lora.breakdown["compute"] < full.breakdown["compute"]
    assert qlora.breakdown["compute"] > lora.breakdown["compute"]
    for result in (full, lora, qlora):
        assert 0 < result.mfu <= result.hfu < 1   # hfu counts attention as the flash kernel runs it


def test_lora_flops_convention_counts_no_frozen_weight_gradient():
    spec, cfg, result = _step("lora", lora_rank=16)
    counts = flops_per_token(spec, cfg.seq, causal=True)   # the headline count: attention scores causal
    weight_gemms = counts.forward - counts.breakdown["attention/scores"]
    adapters = finetune.adapter_forward_flops_per_token(spec, 16, "all-linear")
    expected = (3 * counts.forward - weight_gemms + 3 * adapters) * cfg.gbs * cfg.seq
    measured = result.tflops_per_gpu * 1e12 * result.step_s * cfg.num_gpus
    assert measured == pytest.approx(expected)
    assert "not counted" in result.to_dict()["mfu_denominator"]


# --- bad input --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, fragment", [
    (dict(method="dora"), "method='dora'"),
    (dict(method="full", lora_rank=8), "lora_rank=8 needs --method lora or qlora"),
    (dict(method="lora", lora_rank=0), "lora_rank=0"),
    (dict(method="lora", lora_targets="mlp"), "lora_targets='mlp'"),
    (dict(method="qlora", precision="fp8"), "qlora"),
])
def test_bad_method_knobs_are_named(kwargs, fragment):
    with pytest.raises(InputError) as err:
        estimate("llama3-8b", "h100", 1, **kwargs)
    assert fragment in str(err.value)


def test_plain_language_names_the_method():
    from trainplan.agent.request import parse_request

    request = parse_request("fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s")
    assert (request.model, request.gpu, request.gpus, request.method) == ("llama3-70b", "rtx-4090", 2, "qlora")
    lora = parse_request("LoRA rank 64 of llama3 8b on 1 L40S")
    assert (lora.method, lora.lora_rank) == ("lora", 64)
    assert parse_request("full fine-tuning of llama3-8b on 8 H100").method == "full"
    assert parse_request("train llama3 8b on 8 h100").method is None


def test_the_offline_planner_plans_qlora_as_qlora():
    import trainplan

    report = trainplan.plan("fine-tune Llama 3 70B with QLoRA on 2 RTX 4090s, seq 512", backend="offline")
    config = report.model_dump(mode="json")["recommended"]["config"]
    assert config["method"] == "qlora" and config["gpus"] == 2


def test_a_fused_qkv_projection_carries_one_adapter():
    """Qwen-1's c_attn makes q, k and v in one Linear: PEFT adapts it as one module (QwenLM/Qwen finetune.py targets
    c_attn), so all-linear is 5 adapters a block, not 7, and the adapter on c_attn is r (h + 3 h)."""
    qwen = load_model(str(Path(__file__).parents[1] / "evals/runs/models/qwen-1.8b.json"))
    assert qwen.fused_qkv and not load_model("llama3-8b").fused_qkv
    linears = finetune.targeted_linears(qwen, False, "all-linear")
    assert [lin.name for lin in linears][:2] == ["c_attn", "o_proj"] and len(linears) == 5
    h, r = qwen.hidden_size, 64
    dense, _ = finetune.adapter_params(qwen, False, r, "attention")
    assert dense == r * (h + 3 * h) + r * (h + h)
    # qv on a fused projection is the projection that makes q and v: c_attn whole, as PEFT adapts it
    assert [lin.name for lin in finetune.targeted_linears(qwen, False, "qv")] == ["c_attn"]


def test_qv_targets_save_less_than_attention_and_mla_has_no_qv():
    """q and v only: the x A products of two linears instead of four, and under fp32 norms two lora_A casts of the norm
    output instead of three; MLA has no q_proj/v_proj pair, so qv is refused in one line."""
    kwargs = dict(method="qlora", recompute="none", seq=2048)
    qv, attention = (_memory(lora_targets=t, **kwargs).breakdown for t in ("qv", "attention"))
    assert qv["activations/lora/xa_products"] == pytest.approx(attention["activations/lora/xa_products"] / 2)
    assert qv["activations/attention/qkv_input"] < attention["activations/attention/qkv_input"]
    with pytest.raises(InputError) as err:
        estimate("deepseek-v3", "h100", 64, method="lora", lora_targets="qv", pp=8, ep=8)
    assert "lora_targets=qv" in str(err.value) and "use attention or all-linear" in str(err.value)


# --- lora_dropout (finetune_tensors.dropout_changes, adapt_layer_times) -----------------------------------------------


def _saved(method, dropout, **kw):
    from trainplan.tools.perf.activations import activation_bytes_per_layer

    spec = load_model("llama3-8b")
    cfg = resolve_config(spec, 1, method=method, lora_dropout=dropout, recompute="none", seq=2048, gbs=8, **kw)
    return activation_bytes_per_layer(spec, cfg, 0)


def test_each_adapted_module_saves_its_dropout_output_and_mask_and_bf16_lora_drops_the_inputs_only_it_kept():
    """Llama 3 8B, all-linear: q, k, v, gate and up each drop their own copy of an h-wide input, o an h-wide one
    and down an f-wide one: 3 B (bf16 output + bool mask) per element of each; under bf16 LoRA nothing else kept
    the norm outputs and the SwiGLU product, so they go."""
    h, f, tokens = 4096, 14336, 2048
    without, with_dropout = _saved("lora", 0.0), _saved("lora", 0.05)
    assert "lora/dropout" not in without
    assert with_dropout["lora/dropout"] == pytest.approx(3.0 * tokens * (6 * h + f))
    for key in ("attention/qkv_input", "mlp/fc1_input", "mlp/fc2_input"):
        assert key in without and key not in with_dropout
    assert with_dropout["attention/context"] == without["attention/context"]   # flash attention keeps O


def test_qlora_keeps_the_inputs_its_4bit_linears_save_and_fp32_norms_add_only_the_masks():
    h, f, tokens = 4096, 14336, 2048
    bf16_norms = _saved("qlora", 0.05, fp32_norms=False)
    assert bf16_norms["lora/dropout"] == pytest.approx(3.0 * tokens * (6 * h + f))
    assert bf16_norms["attention/qkv_input"] == _saved("qlora", 0.0, fp32_norms=False)["attention/qkv_input"]
    # PEFT's k-bit preparation: each lora_A already kept its own bf16 cast of an fp32 input; the out projection
    # reads flash attention's bf16 output
    fp32_norms = _saved("qlora", 0.05)
    assert fp32_norms["lora/dropout"] == pytest.approx(tokens * (1.0 * (5 * h + f) + 3.0 * h))


def test_dropout_with_checkpointing_holds_only_one_recomputed_layer_and_is_timed():
    spec, gpu = load_model("llama3-8b"), load_gpu("h100")
    kwargs = dict(method="lora", recompute="full", seq=2048, gbs=8)
    plain = resolve_config(spec, 1, **kwargs)
    dropped = resolve_config(spec, 1, lora_dropout=0.1, **kwargs)
    h, f, tokens = 4096, 14336, 2048
    stored, kept = (memory_breakdown(spec, c, gpu).breakdown for c in (dropped, plain))
    assert stored["activations/layer_input"] == kept["activations/layer_input"]   # the checkpoints alone
    # the one recomputed layer: every module's dropout output and mask, less the three inputs only lora_A kept
    grown = stored["activations/recompute_working_set"] - kept["activations/recompute_working_set"]
    assert grown * 2**30 == pytest.approx(tokens * (3.0 * (6 * h + f) - 2.0 * (2 * h + f)))
    cluster = ClusterSpec.build(gpu, 1)
    assert step_time(spec, dropped, cluster).step_s > step_time(spec, plain, cluster).step_s


def test_vectorised_memory_counts_the_dropout_as_the_scalar_path():
    spec, gpu = load_model("llama3-8b"), load_gpu("h100")
    for method in ("lora", "qlora"):
        cfg = resolve_config(spec, 1, method=method, lora_dropout=0.05, gbs=8, seq=2048, recompute="none")
        arrays = {key: np.array([value]) for key, value in dict(
            tp=1, pp=1, cp=1, ep=1, dp=1, vpp=1, zero=0, mbs=1, num_microbatches=8, seq=2048, recompute=0,
            schedule=1, precision=0, method=finetune.METHOD_CODES[cfg.method], lora_rank=cfg.lora_rank,
            lora_targets=finetune.TARGET_CODES[cfg.lora_targets], loss_kernel=LOSS_CODES[cfg.loss_kernel],
            fp32_norms=int(cfg.fp32_norms), lora_dropout=0.05, fused_kernels=int(cfg.fused_kernels)).items()}
        assert memory_totals_vectorised(spec, gpu, arrays)["total"][0] == pytest.approx(
            memory_breakdown(spec, cfg, gpu).total)


def test_dropout_on_the_adapters_output_saves_only_its_mask_and_keeps_the_inputs():
    """NeMo AutoModel's LinearLoRA drops lora_B's output (lora_dropout_position post): lora_A reads the module's own
    input, so the norm outputs and the SwiGLU product stay, and each module adds a 1 B mask per output element:
    q and o h wide, k and v 1024 (8 KV heads of 128), gate and up f, down h."""
    h, f, kv, tokens = 4096, 14336, 1024, 2048
    without, post = _saved("lora", 0.0), _saved("lora", 0.1, lora_dropout_position="post")
    assert post["lora/dropout"] == pytest.approx(1.0 * tokens * (3 * h + 2 * kv + 2 * f))
    for key in ("attention/qkv_input", "mlp/fc1_input", "mlp/fc2_input"):
        assert post[key] == without[key]
    assert sum(post.values()) < sum(_saved("lora", 0.1).values())


def test_vectorised_memory_counts_the_output_dropout_as_the_scalar_path():
    spec, gpu = load_model("llama3-8b"), load_gpu("h100")
    from trainplan.tools.perf.activations import knob_arrays
    cfg = resolve_config(spec, 1, method="lora", lora_dropout=0.1, lora_dropout_position="post", gbs=8, seq=2048,
                         recompute="none")
    arrays = {key: value.reshape(1) for key, value in knob_arrays(cfg).items()}
    assert arrays["lora_dropout_post"][0] == 1
    assert memory_totals_vectorised(spec, gpu, arrays)["total"][0] == pytest.approx(memory_breakdown(spec, cfg, gpu).total)


def test_lora_dropout_position_needs_adapters_and_a_known_place():
    with pytest.raises(InputError, match="lora_dropout_position=post needs --method lora or qlora"):
        estimate("llama3-8b", "h100", 1, lora_dropout_position="post")
    with pytest.raises(InputError, match="lora_dropout_position='mid' is not one of: pre, post"):
        estimate("llama3-8b", "h100", 1, method="lora", lora_dropout_position="mid")


def test_lora_dropout_needs_adapters_and_a_probability():
    for kwargs, fragment in ((dict(lora_dropout=0.05), "lora_dropout=0.05 needs --method lora or qlora"),
                             (dict(method="lora", lora_dropout=1.5), "lora_dropout"),
                             (dict(method="lora", lora_dropout=float("nan")), "lora_dropout")):
        with pytest.raises(InputError) as err:
            estimate("llama3-8b", "h100", 1, **kwargs)
        assert fragment in str(err.value)
