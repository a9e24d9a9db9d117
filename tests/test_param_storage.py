"""Parameter storage (Layout.fp32_params, tools/perf/memory.py): PyTorch FSDP keeps the parameters in fp32 as
the optimizer's master copy, Megatron and DeepSpeed keep bf16 parameters beside an fp32 master. The
bytes per parameter of each, the engines that store each, and the search agreeing with estimate."""

from __future__ import annotations

import pytest

from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.engines import ExportError, export
from trainplan.tools.config.engines import ENGINES, FP32_PARAM_ENGINES, stores_fp32_params
from trainplan.tools.perf.finetune import model_states_sentence
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import GIB, MASTER_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES, memory_breakdown
from trainplan.tools.search.driver import SearchRequest, prepare, search

H100 = load_gpu("h100-sxm-80gb")
MODEL = load_model("llama3-8b")
GPUS = 8
TRANSIENTS = ("weights/zero3_prefetch", "gradients/zero2_bucket")


def sharded_state_bytes_per_param(zero: int, **knobs) -> float:
    """Model states per parameter on one GPU, transients apart, times the GPUs that shard them (the
    B/param of the whole model's states for a stage that shards all three)."""
    result = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=zero, **knobs), H100)
    states = sum(v for key, v in result.breakdown.items()
                 if key.split("/")[0] in ("weights", "gradients", "optimizer") and key not in TRANSIENTS)
    return states * GIB * GPUS / count_params(MODEL).total


def test_fsdp_full_shard_holds_16_bytes_per_param_and_megatron_18():
    assert sharded_state_bytes_per_param(3, fp32_params=True) == pytest.approx(4 + 4 + 8, rel=1e-9)
    assert sharded_state_bytes_per_param(3, fp32_params=True, bf16_grads=True) == pytest.approx(4 + 2 + 8, rel=1e-9)
    assert sharded_state_bytes_per_param(3) == pytest.approx(2 + 4 + 12, rel=1e-9)
    assert sharded_state_bytes_per_param(3, bf16_grads=True) == pytest.approx(16, rel=1e-9)   # DeepSpeed's


def test_fsdp_parameters_are_the_master_copy():
    """ZeRO-3 with fp32 parameters: no sharded bf16 copy, the fp32 shard in weights, the optimizer
    holds the moments only; the all-gathered bf16 layers are the same transient either way."""
    fsdp = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=3, fp32_params=True), H100).breakdown
    megatron = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=3), H100).breakdown
    n = count_params(MODEL).total / GPUS / GIB
    assert fsdp["weights/fp32_params"] == pytest.approx(MASTER_BYTES * n, rel=1e-9)
    assert "weights/layers" not in fsdp and megatron["weights/layers"] > 0
    optimizer = sum(v for key, v in fsdp.items() if key.startswith("optimizer/"))
    assert optimizer == pytest.approx((OPTIMIZER_BYTES - MASTER_BYTES) * n, rel=1e-9)
    assert fsdp["weights/zero3_prefetch"] == megatron["weights/zero3_prefetch"] > 0


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_unsharded_bf16_copy_makes_zero_0_to_2_hold_the_same_bytes(zero):
    """NO_SHARD and SHARD_GRAD_OP keep the unsharded bf16 parameters through the step, beside the fp32
    master that the optimizer shards: the same 2 + 4 (+ moments) as a bf16 copy with a master."""
    fsdp = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=zero, fp32_params=True), H100)
    megatron = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=zero), H100)
    assert fsdp.total == pytest.approx(megatron.total, rel=1e-12)
    assert fsdp.weights > megatron.weights and fsdp.optimizer < megatron.optimizer
    n = count_params(MODEL).total / GIB
    assert fsdp.breakdown["weights/layers"] == pytest.approx(megatron.breakdown["weights/layers"], rel=1e-12)
    assert sum(v for k, v in fsdp.breakdown.items() if k.startswith("weights/") and k != "weights/fp32_params") \
        == pytest.approx(WEIGHT_BYTES * n, rel=1e-9)


def test_zero3_on_one_rank_keeps_its_bf16_copy():
    """Nothing to shard over (dp = 1): no all-gather frees the bf16 copy, as FSDP's NO_SHARD keeps it."""
    one = dict(gpus=1, zero=3, seq=2048)
    fsdp = memory_breakdown(MODEL, resolve_config(MODEL, fp32_params=True, **one), H100)
    megatron = memory_breakdown(MODEL, resolve_config(MODEL, **one), H100)
    # (FSDP on one GPU is a PyTorch loop: its gradients are born in the backward, Megatron's buffer is not)
    credits = ("gradients/born_in_backward", "activations/freed_in_backward")
    born = sum(fsdp.breakdown.get(key, 0.0) for key in credits)
    assert born < 0 and not any(key in megatron.breakdown for key in credits)
    assert fsdp.total - born == pytest.approx(megatron.total, rel=1e-12) and fsdp.breakdown["weights/layers"] > 0


def test_offload_moves_the_fp32_parameters_to_the_cpu():
    offload = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=3, fp32_params=True,
                                                     optimizer_offload=True), H100)
    assert offload.optimizer == 0 and "weights/fp32_params" not in offload.breakdown


def test_lora_has_no_fp32_master_of_the_frozen_base():
    lora = dict(method="lora", lora_rank=16)
    with_fp32 = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=3, fp32_params=True, **lora), H100)
    without = memory_breakdown(MODEL, resolve_config(MODEL, gpus=GPUS, zero=3, **lora), H100)
    assert "weights/fp32_params" not in with_fp32.breakdown and with_fp32.total == pytest.approx(without.total)


def test_the_engines_store_their_parameters_as_the_knob_says():
    assert set(FP32_PARAM_ENGINES) == {"torchtitan", "accelerate"} and set(FP32_PARAM_ENGINES) <= set(ENGINES)
    cfg = resolve_config(MODEL, gpus=GPUS, zero=3, fp32_params=True)
    for engine in ENGINES:
        if stores_fp32_params(engine):
            assert export(engine, MODEL, cfg, model_ref="meta-llama/Meta-Llama-3-8B").content
        else:
            with pytest.raises(ExportError, match="--bf16-params"):
                export(engine, MODEL, cfg, model_ref="meta-llama/Meta-Llama-3-8B")


def test_a_search_for_an_engine_takes_its_parameter_storage():
    torchtitan, _, _ = prepare(SearchRequest.of("llama3-8b", "h100", 8, gbs=64, seq=4096, engine="torchtitan"))
    megatron, _, _ = prepare(SearchRequest.of("llama3-8b", "h100", 8, gbs=64, seq=4096, engine="megatron"))
    anyone, _, _ = prepare(SearchRequest.of("llama3-8b", "h100", 8, gbs=64, seq=4096))
    pinned, _, _ = prepare(SearchRequest.of("llama3-8b", "h100", 8, gbs=64, seq=4096, engine="torchtitan", fp32_params=False))
    assert torchtitan.fp32_params and not megatron.fp32_params and not anyone.fp32_params
    assert not pinned.fp32_params


def test_megatron_search_with_fp32_parameters_finds_nothing_it_runs():
    result = search("llama3-8b", "h100", 8, gbs=64, seq=4096, zero=3, engine="megatron", fp32_params=True)
    assert not result.candidates and result.rejected.get("the engine cannot run it", 0) > 0


def test_a_torchtitan_search_charges_fsdp_storage():
    """The layout a torchtitan search returns is charged 16 B/param of sharded states, as estimate
    charges it with fp32_params (tests/test_search_agreement.py checks the vectorised path on random layouts)."""
    best = search("llama3-8b", "h100", 8, gbs=64, seq=4096, zero=3, pp=1, engine="torchtitan").candidates[0]
    config = best["config"]
    assert config["fp32_params"]
    assert config["loss_kernel"] == "materialised"   # torchtitan's cross_entropy_loss upcasts the logits
    layout = {k: config[k] for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "recompute",
                                     "recompute_modules", "schedule", "loss_kernel")}
    fsdp = memory_breakdown(MODEL, resolve_config(MODEL, gpus=8, fp32_params=True, **layout), H100)
    megatron = memory_breakdown(MODEL, resolve_config(MODEL, gpus=8, **layout), H100)
    assert best["memory_gib"]["total"] == pytest.approx(fsdp.total, rel=1e-9)
    # what FSDP does not keep: the sharded bf16 copy beside the fp32 master
    assert megatron.total - fsdp.total == pytest.approx(WEIGHT_BYTES * count_params(MODEL).total / 8 / GIB, rel=1e-9)


def test_the_report_sentence_states_fsdp_storage():
    fsdp = model_states_sentence({"zero": 3, "fp32_params": True})
    assert "fp32 parameters that are the master copy (4 B/param)" in fsdp and "Adam m + v (8)" in fsdp
    assert "fp32 master + Adam m + v (12)" in model_states_sentence({"zero": 3})


@pytest.mark.parametrize("engine", FP32_PARAM_ENGINES)
def test_an_fsdp_export_of_a_layout_planned_with_bf16_parameters_says_so(engine):
    planned_bf16 = export(engine, MODEL, resolve_config(MODEL, gpus=GPUS, zero=3), model_ref="m").notes
    planned_fp32 = export(engine, MODEL, resolve_config(MODEL, gpus=GPUS, zero=3, fp32_params=True), model_ref="m").notes
    zero1 = export(engine, MODEL, resolve_config(MODEL, gpus=GPUS, zero=1), model_ref="m").notes
    assert any("--fp32-params" in note for note in planned_bf16)
    assert not any("--fp32-params" in note for note in planned_fp32 + zero1)   # ZeRO 0-2 hold the same bytes


# --- pure bf16 (Layout.pure_bf16): no master at all ---------------------------------------------------------------


def test_pure_bf16_holds_8_bytes_per_param_and_streams_14_through_adam():
    """bf16 parameters 2 + bf16 gradients 2 + bf16 Adam moments 2 + 2 (torch.optim.Adam's zeros_like of a bf16
    parameter), with no fp32 master; the optimizer step reads the gradient and reads and writes the parameter and
    both moments: 2 + 2 x 6 = 14 B/param against mixed precision's 30."""
    from trainplan.tools.perf.state_bytes import ADAM_BYTES_PER_PARAM, ADAM_BYTES_PER_PARAM_PURE_BF16
    from trainplan.tools.perf.step import step_time
    from trainplan.tools.hardware.specs import ClusterSpec

    assert sharded_state_bytes_per_param(3, pure_bf16=True) == pytest.approx(8, rel=1e-9)
    assert (ADAM_BYTES_PER_PARAM_PURE_BF16, ADAM_BYTES_PER_PARAM) == (14, 30)
    cluster = ClusterSpec.build(H100, 1)
    pure, mixed = (step_time(MODEL, resolve_config(MODEL, 1, seq=2048, gbs=8, recompute="full", pure_bf16=p), cluster)
                   for p in (True, False))
    # the same memory-bound pass over 14 instead of 30 B/param (its 4 launches apart)
    assert pure.breakdown["optimizer"] == pytest.approx(mixed.breakdown["optimizer"] * 14 / 30, rel=1e-3)
    assert "pure bf16" in model_states_sentence({"zero": 3, "pure_bf16": True})


def test_pure_bf16_clashes_are_one_line_and_every_engine_refuses_it():
    from trainplan.tools.core.errors import InputError

    for knobs, fragment in ((dict(fp32_params=True), "fp32_params"), (dict(optimizer_offload=True), "optimizer_offload"),
                            (dict(method="lora"), "drop --pure-bf16")):
        with pytest.raises(InputError, match=fragment):
            resolve_config(MODEL, GPUS, zero=3, pure_bf16=True, **knobs)
    without_zero = ("trl", "llamafactory")   # TRL loads the model in bf16; LLaMA-Factory has pure_bf16
    for engine in ENGINES:
        with pytest.raises(ExportError, match="pure_bf16.*fp32 master"):
            export(engine, MODEL, resolve_config(MODEL, gpus=GPUS, zero=3, pure_bf16=True), model_ref="m")
        single = resolve_config(MODEL, gpus=1, zero=0, pure_bf16=True, gbs=8, seq=2048)
        if engine in without_zero:
            content = export(engine, MODEL, single, model_ref="m").content
            assert ("pure_bf16: true" in content) is (engine == "llamafactory")
            assert "dtype: bfloat16" in content or engine != "trl"
        elif engine not in ("megatron", "torchtitan"):
            with pytest.raises(ExportError, match="pure_bf16: the .* settings train with an fp32 master"):
                export(engine, MODEL, single, model_ref="m")
    mixed = resolve_config(MODEL, gpus=1, zero=0, gbs=8, seq=2048)
    assert any("--pure-bf16 plans what runs" in n for n in export("trl", MODEL, mixed, model_ref="m").notes)
    assert any("upcasts the trainable weights to fp32" in n for n in export("llamafactory", MODEL, mixed,
                                                                           model_ref="m").notes)
    found = search("llama3-8b", "h100", 8, gbs=64, seq=4096, engine="deepspeed", pure_bf16=True)
    assert not found.candidates and found.rejected.get("the engine cannot run it", 0) > 0
    plain = search("llama3-8b", "h100", 8, gbs=64, seq=4096, zero=3, pp=1, pure_bf16=True).candidates[0]
    config = plain["config"]
    layout = {k: config[k] for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "recompute",
                                     "recompute_modules", "schedule", "loss_kernel")}
    assert plain["memory_gib"]["total"] == pytest.approx(
        memory_breakdown(MODEL, resolve_config(MODEL, gpus=8, pure_bf16=True, **layout), H100).total, rel=1e-9)


def test_a_pure_bf16_full_fine_tune_is_handed_to_an_engine_that_runs_it():
    """Megatron, the default, keeps an fp32 master; TRL without ZeRO trains a bf16-loaded model in pure bf16, so the
    plan's launch settings fall back to it (tools/config/engines.py launch_order)."""
    import trainplan

    report = trainplan.plan("full fine-tune Llama 3 8B on one H100 in pure bf16 for 100M tokens at 4096 tokens",
                            backend="offline")
    assert report.recommended["config"]["pure_bf16"] is True
    assert report.launch.engine == "trl" and report.launch.error is None and "dtype: bfloat16" in report.launch.content


def test_a_one_gpu_loop_holds_the_larger_of_gradients_and_activations_not_both():
    """torchtune's single-device recipes and the HF Trainer without DDP free every .grad at zero_grad and autograd
    allocates each in the backward as the activations it read are freed: the peak holds the larger of the two.
    Megatron's persistent gradient buffer, more GPUs or gradient accumulation keep both (issue 23: Llama 3.2 3B
    with checkpointing on one A100 was +30% of torchtune's 24.9 GiB)."""
    model = load_model("llama3-8b")
    a100 = load_gpu("a100-sxm-80gb")

    def parts(gpus: int = 1, gbs: int = 2, recompute: str = "full", **knobs) -> dict:
        cfg = resolve_config(model, gpus, seq=2048, mbs=2, gbs=gbs, recompute=recompute, zero=0, **knobs)
        return memory_breakdown(model, cfg, a100).breakdown

    credits = ("gradients/born_in_backward", "activations/freed_in_backward")

    def total(prefix: str, p: dict) -> float:
        return sum(v for key, v in p.items() if key.startswith(prefix) and key not in credits)

    one = parts(pure_bf16=True)
    gradients, activations = total("gradients/", one), total("activations/", one)
    assert gradients > activations > 0        # checkpointing: the 8B's 15 GiB of bf16 gradients are the larger
    # the peak is the backward's end: every gradient, no activation left
    assert one["activations/freed_in_backward"] == pytest.approx(-activations)
    eager = parts(pure_bf16=True, recompute="none")   # without checkpointing the activations are the larger:
    assert eager["gradients/born_in_backward"] == pytest.approx(-total("gradients/", eager))   # the backward's start
    for kept in (parts(gbs=4, pure_bf16=True),            # accumulation: gradients live across micro-batches
                 parts(gpus=2, gbs=4, pure_bf16=True),    # DDP's gradient buckets
                 parts()):                                # Megatron's contiguous fp32 gradient buffer
        assert all(kept.get(key, 0.0) == 0.0 for key in credits)
    # fp32_params (the HF Trainer's fp32 model under autocast) is a PyTorch loop too
    assert parts(fp32_params=True)["activations/freed_in_backward"] < 0
    # the zero-valued credit of the other part is not a row of the breakdown
    assert "gradients/born_in_backward" not in memory_breakdown(
        model, resolve_config(model, 1, seq=2048, mbs=2, gbs=2, recompute="full", zero=0, pure_bf16=True), a100).breakdown


def test_8bit_adam_keeps_its_moments_in_2_bytes_and_streams_12_less():
    """bitsandbytes' 8-bit Adam (Dettmers et al. 2022): m and v in 1 B each with an fp32 absmax per 2048 values. Mixed
    precision keeps its fp32 master (4 + 2.004), pure bf16 none (2.004); the adapters' moments shrink alike; the Adam
    step streams 18 and 10 B/param instead of 30 and 14."""
    from trainplan.tools.perf.state_bytes import MOMENTS_BYTES_8BIT, adam_step_bytes

    assert MOMENTS_BYTES_8BIT == pytest.approx(2 * (1 + 4 / 2048))
    assert sharded_state_bytes_per_param(3, optimizer_8bit=True) == pytest.approx(2 + 4 + 4 + MOMENTS_BYTES_8BIT)
    assert sharded_state_bytes_per_param(3, optimizer_8bit=True, pure_bf16=True) == pytest.approx(4 + MOMENTS_BYTES_8BIT)
    assert [round(adam_step_bytes(p, e), 3) for p in (False, True) for e in (False, True)] == [30, 18.008, 14, 10.008]
    lora = dict(method="lora", lora_rank=16, gbs=16, seq=2048)
    plain, eight = (memory_breakdown(MODEL, resolve_config(MODEL, GPUS, zero=0, optimizer_8bit=e, **lora), H100)
                    for e in (False, True))
    assert eight.breakdown["optimizer/adapters"] == pytest.approx(plain.breakdown["optimizer/adapters"]
                                                                  * MOMENTS_BYTES_8BIT / 8)


def test_8bit_adam_clashes_and_engines_are_one_line():
    with pytest.raises(InputError, match="optimizer_8bit keeps Adam's moments in 8 bits on the GPU"):
        resolve_config(MODEL, GPUS, zero=1, optimizer_8bit=True, optimizer_offload=True)
    with pytest.raises(InputError, match="optimizer_8bit keeps"):
        resolve_config(MODEL, GPUS, optimizer_8bit=True, bf16_moments=True)
    cfg = resolve_config(MODEL, 1, zero=0, gbs=8, seq=2048, optimizer_8bit=True, fused_kernels=False,
                         loss_kernel="materialised", attention="flash2")
    for engine in ("megatron", "torchtitan", "deepspeed", "accelerate"):
        with pytest.raises(ExportError, match="optimizer_8bit"):
            export(engine, MODEL, cfg, model_ref="m")
    with pytest.raises(ExportError, match="optimizer_8bit with zero=2"):
        export("trl", MODEL, resolve_config(MODEL, 2, zero=2, gbs=8, seq=2048, optimizer_8bit=True,
                                            fused_kernels=False, loss_kernel="materialised"), model_ref="m")
    assert "optim: adamw_bnb_8bit" in export("trl", MODEL, cfg, model_ref="m").content


def test_pure_or_8bit_states_that_fit_nowhere_are_not_retried_with_the_cpu_adam():
    """Nothing fits: the search retries with ZeRO-Offload only where the states allow it. Pure bf16 or 8-bit moments
    on a 48 GB card had raised 'pure_bf16 keeps no fp32 master, and optimizer_offload ... needs one' from the retry."""
    import trainplan

    result = search("llama3-8b", "l40s", 1, seq=2048, gbs=16, method="full", pure_bf16=True, optimizer_8bit=True)
    assert not result.candidates and result.rejected
    report = trainplan.plan("full fine-tune Llama 3 8B on an L40S with 8-bit Adam in pure bf16 for 10M tokens",
                            backend="offline")
    assert report.recommended is None and any("with LoRA" in r for r in report.risks)
    # on an A100 the default fine-tuning length is probed with the engine that runs these states (TRL)
    a100 = trainplan.plan("full fine-tune Llama 3 8B on an A100 with 8-bit Adam in pure bf16 for 10M tokens",
                          backend="offline")
    assert a100.recommended["config"]["seq"] == 2048 and a100.recommended["config"]["optimizer_8bit"]
