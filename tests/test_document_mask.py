"""Packed documents behind a per-document attention mask (Layout.document_tokens): a fused kernel runs each query
over its own document; unfused attention computes every masked score; the FLOPs say what ran; the engines that
write no document mask refuse it in one line; the eval rows that ran it (torchtune's packed batches) plan it."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.config.resolve import document_span, kernel_span
from trainplan.tools.core.enums import Attention
from trainplan.tools.core.errors import InputError
from trainplan.tools.engines import ExportError, export
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.perf import layer_compute

MODEL = load_model("llama3-8b")
A100 = load_gpu("a100-sxm-80gb")
JOB = dict(model="llama3-8b", gpu="a100-sxm-80gb", gpus=1, seq=8192, mbs=1, gbs=8, method="lora", zero=0,
           recompute="full")


def _cfg(**knobs):
    return resolve_config(MODEL, 1, **{**{k: v for k, v in JOB.items() if k not in ("model", "gpu", "gpus")}, **knobs})


def test_a_fused_kernel_attends_within_the_document_and_eager_attention_does_not():
    whole, packed = _cfg(attention="flash2"), _cfg(attention="flash2", document_tokens=512)
    assert (document_span(packed), kernel_span(packed)) == (512, 512)
    assert (document_span(whole), kernel_span(whole)) == (8192, 8192)
    eager = _cfg(attention="eager", document_tokens=512)
    assert (document_span(eager), kernel_span(eager)) == (512, 8192)   # the masked scores are computed anyway
    longer = _cfg(attention="flash2", document_tokens=100_000)          # a document no longer than its sequence
    assert kernel_span(longer) == 8192
    # the attention core's time is that of the span: 16x less work at 512 of 8192, the launches apart
    core = [layer_compute.layer_times(MODEL, cfg, A100, 0).forward_s["attention/core"] for cfg in (whole, packed)]
    assert core[1] < core[0] / 10
    for attention in ("eager",):
        times = [layer_compute.layer_times(MODEL, _cfg(attention=attention, document_tokens=d), A100, 0)
                 for d in (None, 512)]
        assert times[0].forward_s == times[1].forward_s


def test_the_flops_count_the_documents_and_the_kernel_counts_what_it_ran():
    whole = trainplan.estimate(**JOB, attention="flash2")
    packed = trainplan.estimate(**JOB, attention="flash2", document_tokens=512)
    assert packed.time.step_s < whole.time.step_s
    # model FLOPs per step shrink with the attention work; throughput and MFU stay consistent with them
    assert packed.time.tflops_per_gpu * packed.time.step_s < whole.time.tflops_per_gpu * whole.time.step_s
    eager = [trainplan.estimate(**JOB, attention="eager", document_tokens=d) for d in (None, 512)]
    assert eager[0].time.step_s == pytest.approx(eager[1].time.step_s)
    assert eager[1].time.hardware_tflops_per_gpu == pytest.approx(eager[0].time.hardware_tflops_per_gpu)
    assert eager[1].time.tflops_per_gpu < eager[0].time.tflops_per_gpu   # the useful math is the documents'


def test_engines_without_a_document_mask_refuse_it_and_the_trainer_tools_write_theirs():
    cfg = _cfg(attention="flash2", document_tokens=512, fused_kernels=False, loss_kernel="materialised")
    for engine in ("deepspeed", "accelerate"):
        with pytest.raises(ExportError, match="document_tokens: the .* settings pack no documents"):
            export(engine, MODEL, cfg, model_ref="meta-llama/Llama-3.1-8B")
    found = trainplan.search(**{k: v for k, v in JOB.items() if k not in ("mbs", "recompute")}, document_tokens=512,
                             engine="deepspeed", top_k=1)
    assert not found.candidates and found.rejected.get("the engine cannot run it")
    written = {engine: export(engine, MODEL, cfg, model_ref="meta-llama/Llama-3.1-8B").content
               for engine in ("trl", "axolotl", "llamafactory")}
    assert "padding_free: true" in written["trl"] and "packing: true" in written["trl"]
    assert "sample_packing: true" in written["axolotl"]
    assert "neat_packing: true" in written["llamafactory"]
    with pytest.raises(ExportError, match="attention=eager"):
        export("trl", MODEL, cfg.model_copy(update={"attention": Attention.eager}), model_ref="meta-llama/Llama-3.1-8B")
    # one document per sequence writes no packing
    assert "packing" not in export("trl", MODEL, _cfg(attention="flash2", fused_kernels=False,
                                                      loss_kernel="materialised"), model_ref="m").content


def test_document_tokens_is_bounded():
    with pytest.raises(InputError, match="document_tokens=0 must be a positive number"):
        trainplan.estimate(**JOB, document_tokens=0)
    with pytest.raises(InputError, match="past any published run"):
        trainplan.estimate(**JOB, document_tokens=10**9)
