"""The attention kernel's generation: flash1 (FlashAttention 1 and its Triton port) does flash's work, more slowly;
flash2 (FlashAttention-2, PyTorch SDPA's kernel) is flash on Ampere and runs Ampere's instructions on Hopper."""

import pytest

import trainplan
from trainplan.tools.perf import compute
from trainplan.tools.hardware.catalog import load_gpu
from trainplan.tools.core.enums import Attention

LONG = dict(tokens_q=65536, tokens_kv=65536, heads=16, qk_dim=128, v_dim=128)


def _attention(gpu_name, kernel):
    return compute.attention_time_s(**LONG, gpu=load_gpu(gpu_name), kernel=kernel)


@pytest.mark.parametrize("gpu", ["a100-sxm-80gb", "h100-sxm-80gb", "b200"])
def test_first_generation_kernel_is_slower_in_both_passes_and_slower_backward(gpu):
    flash_forward, flash_backward = _attention(gpu, Attention.flash)
    old_forward, old_backward = _attention(gpu, Attention.flash1)
    assert old_forward > flash_forward and old_backward > flash_backward
    # Its backward lags more than its forward (FlashAttention-2's gain is larger backward, Dao 2023 §4.1).
    assert old_backward / flash_backward > old_forward / flash_forward


def test_on_ampere_the_first_generation_lags_flash_attention_2_by_the_measured_ratios():
    flash_forward, flash_backward = _attention("a100-sxm-80gb", Attention.flash)
    old_forward, old_backward = _attention("a100-sxm-80gb", Attention.flash1)
    # Compute-bound at 64K tokens: the launch floor is negligible, the ratios are the efficiency ratios.
    assert old_forward / flash_forward == pytest.approx(compute.FLASH1_FORWARD_SLOWDOWN, rel=1e-3)
    assert old_backward / flash_backward == pytest.approx(compute.FLASH1_BACKWARD_SLOWDOWN, rel=1e-3)


def test_on_hopper_a_first_generation_kernel_loses_the_new_instructions():
    """It runs Ampere's instructions: its share of H100's peak is below its share of A100's, while the
    native Hopper kernel's is not capped."""
    a100_forward, a100_backward = compute.attention_efficiencies(load_gpu("a100-sxm-80gb"), Attention.flash1)
    h100 = load_gpu("h100-sxm-80gb")
    h100_forward, h100_backward = compute.attention_efficiencies(h100, Attention.flash1)
    assert h100_forward < a100_forward and h100_backward < a100_backward
    assert compute.attention_efficiencies(h100, Attention.flash) == (h100.attention_efficiency,) * 2
    # In TFLOP/s it is still faster on the larger chip.
    assert h100_forward * h100.bf16_tflops > a100_forward * load_gpu("a100-sxm-80gb").bf16_tflops


def test_every_kernel_stays_under_the_family_ceiling():
    for name in ("a100-sxm-80gb", "a100-sxm-40gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200", "mi300x", "l4"):
        gpu = load_gpu(name)
        for kernel in Attention:
            if not kernel.fused:
                continue
            forward, backward = compute.attention_efficiencies(gpu, kernel)
            assert 0 < backward <= forward <= compute.efficiency_ceiling(gpu), (name, kernel)


def test_same_flops_and_memory_as_flash_longer_step():
    """flash1 counts and runs the causal half like flash, keeps the same activations, and takes longer; the
    longer the sequence, the larger attention's share and the larger the gap."""
    job = dict(model="llama3-8b", gpu="a100-sxm-80gb", gpus=8, zero=3, recompute="none", mbs=1)
    gaps = []
    for seq in (2048, 16384):
        flash = trainplan.estimate(**job, seq=seq, gbs=8)
        old = trainplan.estimate(**job, seq=seq, gbs=8, attention="flash1")
        assert old.memory_gib.activations == flash.memory_gib.activations
        t_flash, t_old = flash.time, old.time
        assert t_old.hardware_tflops_per_gpu * t_old.step_s == pytest.approx(
            t_flash.hardware_tflops_per_gpu * t_flash.step_s)
        assert t_old.step_s > t_flash.step_s
        assert t_old.hfu < t_flash.hfu
        gaps.append(t_old.step_s / t_flash.step_s)
    assert gaps[1] > gaps[0]


def test_exports_say_the_engine_runs_a_faster_kernel():
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.engines import export
    from trainplan.tools.config.layout import resolve_config

    model = load_model("llama3-8b")
    cfg = resolve_config(model, 8, zero=3, attention="flash1")
    for engine in ("megatron", "torchtitan", "deepspeed", "accelerate"):
        notes = " ".join(export(engine, model, cfg, model_ref=model.name).notes)
        assert "attention=flash1" in notes and "shorter than estimated" in notes, engine


def test_flash_attention_2_is_flash_on_ampere_and_ampere_bound_on_hopper():
    """FlashAttention-2 peaks at 230 of A100's 312 TFLOP/s and, with the same Ampere instructions, at 335
    of H100's 989 (Dao 2023 §4.1): on H100 it runs at the Ampere share scaled by that ratio, below
    the Hopper kernel, and still faster than flash1."""
    a100, h100 = load_gpu("a100-sxm-80gb"), load_gpu("h100-sxm-80gb")
    assert compute.attention_efficiencies(a100, Attention.flash2) == compute.attention_efficiencies(a100, Attention.flash)
    forward, backward = compute.attention_efficiencies(h100, Attention.flash2)
    assert forward == backward == pytest.approx(a100.attention_efficiency * (335 / 989) / (230 / 312))
    assert forward < h100.attention_efficiency
    hopper, fa2, fa1 = (_attention("h100-sxm-80gb", k) for k in (Attention.flash, Attention.flash2, Attention.flash1))
    assert hopper[0] < fa2[0] < fa1[0] and hopper[1] < fa2[1] < fa1[1]


def test_flash2_step_on_h100_is_slower_than_flash_with_the_same_flops_and_memory():
    job = dict(model="llama3-8b", gpu="h100-sxm-80gb", gpus=8, zero=3, recompute="none", mbs=1, seq=8192, gbs=8)
    flash, fa2 = trainplan.estimate(**job), trainplan.estimate(**job, attention="flash2")
    assert fa2.memory_gib.total == flash.memory_gib.total
    assert fa2.time.step_s > flash.time.step_s
    assert fa2.time.mfu * fa2.time.step_s == pytest.approx(flash.time.mfu * flash.time.step_s)
    a100 = dict(job, gpu="a100-sxm-80gb")
    assert trainplan.estimate(**a100, attention="flash2").time.step_s == trainplan.estimate(**a100).time.step_s


def test_flash2_exports_load_flash_attention_2_and_megatron_says_it_runs_faster():
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.engines import export
    from trainplan.tools.config.layout import resolve_config

    model = load_model("llama3-8b")
    cfg = resolve_config(model, 8, zero=3, attention="flash2")
    assert "attention=flash2" in " ".join(export("megatron", model, cfg, model_ref=model.name).notes)
    for engine in ("torchtitan", "deepspeed", "accelerate"):
        notes = " ".join(export(engine, model, cfg, model_ref=model.name).notes)
        assert "attention=flash2 has no setting" not in notes, engine
    assert 'attn_implementation="flash_attention_2"' in " ".join(export("accelerate", model, cfg,
                                                                          model_ref=model.name).notes)


@pytest.mark.parametrize("engine, kernel", [("megatron", "flash"), ("torchtitan", "flash2"), ("accelerate", "flash2"),
                                            ("llamafactory", "flash2")])
def test_a_search_for_an_engine_runs_its_attention_kernel_unless_told(engine, kernel):
    """Megatron runs Transformer Engine's attention; torchtitan's SDPA and the Hugging Face models run
    FlashAttention-2, so on H100 their plans are slower than a Megatron plan of the same layout. The estimate
    it is checked against also takes the engine's norm/rotary/SwiGLU kernels and launch (eager Hugging Face
    models, compiled torchtitan blocks)."""
    job = dict(model="llama3-8b", gpu="h100", gpus=8, engine=engine, top_k=1, tp=1, pp=1, zero=3, mbs=1, seq=4096,
               gbs=32)
    result = trainplan.search(**job)
    assert result.job.fixed["attention"] == kernel
    best = result.candidates[0]
    assert best["config"]["attention"] == kernel
    layout = {k: best["config"][k] for k in ("tp", "pp", "cp", "zero", "mbs", "recompute", "fp32_params",
                                             "fused_kernels", "launch")}
    assert (layout["fused_kernels"], layout["launch"]) == (engine in ("megatron", "torchtitan"),
                                                           "compile" if engine == "torchtitan" else "eager")
    told = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=8, gbs=32, seq=4096, attention=kernel, **layout)
    assert best["time"]["step_s"] == pytest.approx(told.time.step_s, rel=1e-6)
    assert trainplan.search(**{**job, "attention": "eager"}).job.fixed["attention"] == "eager"
