"""The knob lists derived from contract.Knob marks equal the hand lists they replaced, names and order
(the golden test, the prompt and the planner's request order read them)."""

from trainplan.agent import request, tool_args
from trainplan.tools.config import contract
from trainplan.tools.search import space


def test_contract_lists_are_the_former_literals():
    assert contract.SEARCHED_KNOBS == ("tp", "pp", "cp", "ep", "vpp", "zero", "dp_shard", "mbs", "recompute", "schedule")
    assert contract.SEARCH_CHOSEN_KNOBS == ("recompute_modules", "bf16_moments", "fp8_activations")
    assert contract.FINE_TUNING_KNOBS == ("method", "lora_rank", "lora_targets")
    assert contract.PARALLEL_SIZES == ("tp", "pp", "cp", "ep", "etp", "dp_shard")
    assert contract.SEARCH_JOB_EXCLUDED == ("ramp_start_gbs", "ramp_tokens")
    assert contract.SEARCH_FIXED_KNOBS == tuple(n for n in contract.Layout.model_fields if n not in contract.SEARCHED_KNOBS)


def test_request_lists_are_the_former_literals():
    pins = ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "recompute", "schedule", "dispatcher", "attention",
            "fused_kernels", "pure_bf16", "optimizer_8bit", "loss_kernel", "document_tokens")
    adapter_pins = ("lora_alpha", "lora_dropout")
    assert request.PINS == pins + adapter_pins
    assert request._JOB == ("model", "gpu", "gpus", "gpus_per_node", "tokens", "price", "goodput")
    assert request._LAYOUT == ("seq", "gbs", "precision", *pins, "method", "lora_rank", "lora_targets", *adapter_pins)
    assert request._SEARCH == ("objective", "max_gpus", "deadline_days", "budget_usd", "engine")
    fields = tuple(request.PlanRequest.model_fields)
    assert fields[len(fields) - len(request._JOB + request._LAYOUT + request._SEARCH):] == (
        request._JOB + request._LAYOUT + request._SEARCH)


def test_tool_and_search_lists_are_the_former_literals():
    assert tool_args._NOT_FOR_ONE_STEP == ("tokens", "price", "goodput", "ramp_start_gbs", "ramp_tokens")
    assert space.STORAGE_KNOBS == ("bf16_moments", "fp8_activations")
    assert space.FIXED_KNOBS == tuple(n for n in contract.SEARCH_FIXED_KNOBS if n not in ("gbs", "seq", "precision"))


def test_vector_memory_defaults_are_the_former_literal():
    from trainplan.tools.perf import memory
    from trainplan.tools.perf.loss import LOSS_CODES, LossKernel
    literal = {"sequence_parallel": 1, "optimizer_offload": 0, "bf16_grads": 0, "bf16_moments": 0, "fp32_params": 0,
               "pure_bf16": 0, "optimizer_8bit": 0, "fp8_activations": 0, "deallocate_pipeline_outputs": 1, "save_mlp_act_output": 1,
               "fused_kernels": 1, "offload_modules": 0, "attention": 0, "method": 0, "lora_rank": 0,
               "lora_targets": 1, "loss_kernel": LOSS_CODES[LossKernel.fused], "fp32_norms": 0,
               "lora_dropout": 0, "lora_dropout_post": 0, "double_quant": 1}
    assert list(memory.VECTOR_DEFAULTS.items()) == list(literal.items())
