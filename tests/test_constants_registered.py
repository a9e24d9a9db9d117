"""Every hand-set number of the performance model is in one table: a module-level UPPER_CASE name of the scanned
modules bound to a numeric literal (or arithmetic of literals) must be a physical count, a unit conversion or a
bound on inputs (ALLOWED, each with its reason); a modeller's choice reads its value from tools/core/assumptions.py
(Assumed) or tools/core/calibration.py (Fitted) instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from trainplan.tools.core import assumptions, calibration

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tools/perf/*.py", "tools/search/*.py", "tools/config/plan_defaults.py", "tools/hardware/*.py")
UPPER_CASE = re.compile(r"^_?[A-Z][A-Z0-9_]*$")

ALLOWED = {
    # bounds on inputs and loops
    "tools/hardware/hf_fields.py:MAX_LAYERS": "bound on a config field read from Hugging Face",
    "tools/hardware/hf_fields.py:MAX_DIMENSION": "bound on a config field read from Hugging Face",
    "tools/hardware/hf_fields.py:MAX_EXPERTS": "bound on a config field read from Hugging Face",
    "tools/hardware/hf_fields.py:MAX_POSITIONS": "bound on a config field read from Hugging Face",
    "tools/hardware/specs.py:MAX_TFLOPS": "bound on a GPUSpec field",
    "tools/hardware/specs.py:MAX_MEMORY_GIB": "bound on a GPUSpec field",
    "tools/hardware/specs.py:MAX_BANDWIDTH_GB_S": "bound on a GPUSpec/ClusterSpec field",
    "tools/hardware/specs.py:MAX_LATENCY_US": "bound on a ClusterSpec field",
    "tools/hardware/specs.py:MAX_GPUS_PER_NODE": "bound on a ClusterSpec field",
    "tools/hardware/specs.py:MAX_SM_COUNT": "bound on a GPUSpec field",
    "tools/perf/collective_sim.py:MAX_SIMULATED_RANKS": "bound on the simulation's size (Python loops over N^2 messages)",
    "tools/perf/collective_sim.py:MAX_SIMULATED_MICRO_BATCHES": "bound on the simulation's size",
    "tools/perf/collective_sim.py:MAX_ACCUMULATE_WORK": "bound on the simulation's size",
    "tools/perf/cost.py:MAX_STEP_S": "bound on an input step time",
    "tools/perf/cost.py:MAX_TRAINING_TOKENS": "bound on an input token count",
    "tools/perf/pipeline.py:MAX_STAGE_S": "bound on an input stage time",
    "tools/perf/pipeline.py:MAX_CACHED_UNITS": "bound on the memory of the op-order cache (not a model number)",
    "tools/search/limits.py:MAX_MBS": "bound of the limits search",
    "tools/search/limits.py:MAX_SEQ": "bound of the limits search",
    "tools/search/space.py:MAX_MBS": "bound of the search space (largest micro-batch tried)",
    "tools/search/driver.py:RESCORE_MIN": "search effort (layouts re-scored), not a number of the model",
    "tools/search/driver.py:PARETO_RESCORE": "search effort (layouts re-scored per GPU count), not a number of the model",
    "tools/search/driver.py:CALCULON_LAYOUTS_PER_S": "a published measurement (Isaev et al. SC23) shown for comparison",
    # unit conversions
    "tools/perf/memory.py:GIB": "unit conversion, 2**30 bytes",
    "tools/perf/cost.py:SECONDS_PER_DAY": "unit conversion",
    # exact byte counts of number formats
    "tools/perf/state_bytes.py:BF16_BYTES": "bytes of a bf16 number",
    "tools/perf/state_bytes.py:FP32_BYTES": "bytes of an fp32 number",
    "tools/perf/state_bytes.py:BOOL_BYTES": "bytes of a bool",
    "tools/perf/state_bytes.py:OPTIMIZER_8BIT_BLOCK": "values per fp32 absmax of bitsandbytes' 8-bit optimizer states",
    "tools/perf/state_bytes.py:OPTIMIZER_BYTES": "fp32 master weight and two fp32 Adam moments",
    "tools/perf/state_bytes.py:OPTIMIZER_BYTES_BF16_MOMENTS": "fp32 master weight and two bf16 Adam moments",
    "tools/perf/state_bytes.py:ADAM_BYTES_PER_PARAM": "sum of the byte counts above",
    "tools/perf/state_bytes.py:OPTIMIZER_BYTES_PURE_BF16": "two bf16 Adam moments",
    "tools/perf/state_bytes.py:FP8_WEIGHT_CACHE_BYTES": "Transformer Engine's fp8 weight and fp8 transpose, 1 B each",
    "tools/perf/state_bytes.py:NF4_BYTES_PER_PARAM": "NF4 with double quantisation: 4 bits + block constants (QLoRA)",
    "tools/perf/state_bytes.py:NF4_SINGLE_QUANT_BYTES_PER_PARAM": "NF4 without double quantisation: 4 bits + fp32 absmax",
    "tools/perf/state_bytes.py:ADAPTER_OPTIMIZER_BYTES": "two fp32 Adam moments",
    "tools/perf/moe.py:FP8_BYTES_PER_ELEMENT": "1 B per element and a 4 B scale per 128 elements",
    "tools/perf/moe.py:BF16_BYTES_PER_ELEMENT": "bytes of a bf16 number",
    "tools/perf/activations.py:FP8_TILE": "DeepSeek-V3's 1x128 quantization tile (§3.3.2)",
    "tools/perf/activations.py:FP8_SCALE_BYTES": "an fp32 scale",
    "tools/perf/activations.py:E5M6_BYTES": "12 bits of DeepSeek-V3's E5M6 format (§3.3.3)",
    # bytes and kernels counted from the kernels' code
    "tools/perf/compute.py:FLASH_BACKWARD_KERNELS": "kernels FlashAttention-2's backward launches (counted)",
    "tools/perf/compute.py:EAGER_SOFTMAX_BYTES_FORWARD": "bf16 reads and writes of the fused softmax (counted)",
    "tools/perf/compute.py:EAGER_SOFTMAX_BYTES_BACKWARD": "bf16 reads and writes of the softmax backward (counted)",
    "tools/perf/compute.py:EAGER_DROPOUT_BYTES": "bf16 reads and writes and the 1 B mask of dropout (counted)",
    "tools/perf/compute.py:FP8_CAST_BYTES_PER_ELEMENT": "reads and writes of a scale-and-cast with its amax (counted)",
    "tools/perf/finetune.py:COMPILED_SCALE_ADD_FORWARD_BYTES": "bf16 reads and writes of the fused multiply-add (counted)",
    "tools/perf/finetune.py:DEQUANT_KERNELS": "kernels of bitsandbytes' 4-bit dequantisation (counted)",
    "tools/perf/host.py:LINEAR_OPS": "host ops of a Linear (counted from PyTorch)",
    "tools/perf/host.py:EAGER_ATTENTION_OPS": "host ops of Megatron's eager attention (counted)",
    "tools/perf/host.py:FLASH_ATTENTION_OPS": "host ops of a flash-attention call (counted)",
    "tools/perf/host.py:COLLECTIVE_OPS": "host ops of a collective (counted)",
    "tools/perf/host.py:LORA_OPS_PER_ADAPTED_LINEAR": "host ops of PEFT's LoRA Linear (counted)",
    "tools/perf/host.py:COMPILED_LORA_KERNELS_PER_ADAPTED_LINEAR": "the two LoRA GEMMs torch.compile still launches",
    "tools/perf/host.py:DEQUANT_OPS_PER_4BIT_LINEAR": "host ops of bitsandbytes' Linear4bit (counted)",
    "tools/perf/host.py:SINGLE_QUANT_DEQUANT_OPS": "host ops of bitsandbytes' Linear4bit without double quant (counted)",
    "tools/perf/host.py:COMPILED_EAGER_ATTENTION_KERNELS": "two batched GEMMs and one fused softmax-dropout kernel",
    "tools/perf/loss.py:TORCHTUNE_OUTPUT_CHUNKS": "torchtune's CEWithChunkedOutputLoss default (num_output_chunks=8)",
    "tools/perf/offload.py:STAGED_LAYERS": "one layer being copied out, one reloaded",
}


def _numeric(node: ast.AST) -> bool:
    """A numeric literal, or arithmetic (and float()/int()) of literals and names with at least one literal."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.BinOp):
        sides = (node.left, node.right)
        return all(_numeric(s) or isinstance(s, ast.Name) for s in sides) and any(_numeric(s) for s in sides)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("float", "int"):
        return len(node.args) == 1 and _numeric(node.args[0])
    return False


def numeric_constants(source: str) -> list[str]:
    """Module-level UPPER_CASE names bound to a numeric literal or arithmetic of literals."""
    found = []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            continue
        found += [t.id for t in targets if isinstance(t, ast.Name) and UPPER_CASE.match(t.id) and _numeric(stmt.value)]
    return found


def _scanned() -> dict[str, str]:
    files = sorted({path for pattern in SCANNED for path in ROOT.glob(pattern)})
    return {path.relative_to(ROOT).as_posix(): path.read_text() for path in files}


def test_hand_set_numbers_are_registered():
    found = {f"{path}:{name}" for path, source in _scanned().items() for name in numeric_constants(source)}
    unregistered = sorted(found - set(ALLOWED))
    assert not unregistered, ("hand-set numbers outside tools/core/assumptions.py or calibration.py (add an Assumed or "
                              f"Fitted entry and read its .value, or allow-list a physical count): {unregistered}")
    assert sorted(set(ALLOWED) - found) == [], "allow-listed names that no longer exist"


def test_the_scan_catches_a_new_efficiency():
    compute = (ROOT / "tools/perf/compute.py").read_text()
    assert "FOO_EFFICIENCY" in numeric_constants(compute + "\nFOO_EFFICIENCY = 0.7\n")
    assert "FOO_BYTES" in numeric_constants(compute + "\nFOO_BYTES: float = 2 * 1024 / 8\n")
    assert "FOO_SHARE" not in numeric_constants(compute + "\nFOO_SHARE = assumptions.FOO.value\n")
    assert "KERNEL_LAUNCH_S" not in numeric_constants(compute)


def test_every_assumption_is_read_by_a_module():
    sources = "\n".join(_scanned().values())
    unread = [name for name in assumptions.assumed() if f"assumptions.{name}.value" not in sources]
    assert unread == []


def test_assumptions_cite_a_source_and_are_not_fitted():
    table = assumptions.assumed()
    assert len(table) >= 25
    assert all(entry.source and entry.meaning for entry in table.values())
    assert not set(table) & set(calibration.constants())
