"""What LoRA and QLoRA change in a block's saved tensors (numpy-friendly over activations.py's knob arrays):
frozen linears, the adapters' x A products (saved_tensor_changes), PEFT's fp32 norms (fp32_norm_changes) and the
adapters' dropout (dropout_changes). tools/perf/finetune.py holds the method's other math; activations.py calls these
after its full-training tensors."""

from __future__ import annotations

import numpy as np

from trainplan.tools.core.enums import LoraTargets, Method
from trainplan.tools.perf.finetune import (METHOD_CODES, TARGET_CODES, Linear, adapts_mlp, attention_linears, by_target,
                                           targeted_linears)
from trainplan.tools.perf.state_bytes import BF16_BYTES, BOOL_BYTES


def saved_tensor_changes(model, moe: bool, tensors: dict, tok, method_code, rank, targets_code) -> dict:
    """The full-method saved tensors of a block, adjusted for frozen weights and the LoRA branch
    (numpy-friendly: method_code, rank and targets_code may be arrays of codes).

    Frozen, untargeted bf16 linears (lora) save no input: with attention-only targets the MLP's fc1 and fc2
    inputs (MoE: the dispatched copies and the expert fc2 inputs; the shared experts' fc2 input) go (qv too). A
    bitsandbytes 4-bit linear (qlora) keeps its input all the same: MatMul4Bit.forward saves
    `ctx.tensors = (A, B)` whenever the input needs a gradient (bitsandbytes/autograd/_functions.py), though
    its backward reads only B, so under qlora they stay.
    Every targeted linear adds its rank-r product x A in bf16 (2 B x rows x r per token).
    """
    lora = np.asarray(method_code) > 0
    attention_only = lora & (by_target(targets_code, {t: not adapts_mlp(t) for t in LoraTargets}) > 0)
    frees_inputs = attention_only & (np.asarray(method_code) == METHOD_CODES[Method.lora])
    out = dict(tensors)
    for key in ("mlp/fc1_input", "mlp/fc2_input", "moe/dispatched", "moe/expert_fc2_input", "moe/shared_fc2_input"):
        if key in out:
            out[key] = np.where(frees_inputs, 0.0, out[key])
    rows = {target: sum(lin.rows * lin.copies for lin in targeted_linears(model, moe, target)) for target in LoraTargets}
    per_token = by_target(targets_code, rows)
    out["lora/xa_products"] = np.where(lora, BF16_BYTES * tok * rank * per_token, 0.0)
    return out


DROPOUT_SAVED_BYTES = BF16_BYTES + BOOL_BYTES
"""Per input element of an adapted module under lora_dropout > 0: the dropout's bf16 output, which lora_A saves
for its weight gradient, and the bool mask native_dropout returns and its backward reads (1 B; PyTorch
derivatives.yaml native_dropout_backward(grad, mask, scale))."""
_ADAPTER_ONLY_INPUTS = ("attention/qkv_input", "mlp/fc1_input", "mlp/fc2_input")
"""Saved inputs that, under bf16 LoRA, only the adapters' lora_A keep (a frozen bf16 linear saves no input: dX reads W
only): the norm outputs q, k, v and gate, up read, and the SwiGLU product the down projection reads. The attention
output the out projection reads is not one: flash attention saves it for its own backward."""


def adapter_dropout_inputs(model, moe: bool, targets, fp32_norms: bool) -> dict[str, float]:
    """Bytes per token that every adapted module's dropout saves beyond what the block saved without it, one
    dropout per module (PEFT's LoraLayer keeps an nn.Dropout per adapted module: q, k and v each drop their own
    copy of one input), split by TP layout: 'column' (the module's whole input on every rank) and 'row'
    (row-parallel: the input split over t). DROPOUT_SAVED_BYTES per input element; with fp32 norms (dense
    blocks, fp32_norm_changes) the mask alone (1 B) for the modules whose lora_A already kept a bf16 cast of its
    own of an fp32 input (every one but the attention out-projection, which reads flash attention's bf16 output):
    the cast is now of the dropout's output, the same size."""
    out = {"column": 0.0, "row": 0.0}
    reads_attention_output = {lin.name for lin in attention_linears(model) if lin.row_parallel}
    for lin in targeted_linears(model, moe, targets):
        own_cast = fp32_norms and not moe and lin.name not in reads_attention_output
        per_element = DROPOUT_SAVED_BYTES - (BF16_BYTES if own_cast else 0.0)
        out["row" if lin.row_parallel else "column"] += per_element * lin.d_in * lin.rows * lin.copies
    return out


def adapter_dropout_outputs(model, moe: bool, targets) -> dict[str, float]:
    """Bytes per token that every adapted module's dropout saves when it acts on the adapter's output
    (Layout.lora_dropout_position post, NeMo AutoModel's LinearLoRA: res + dropout(lora_B(lora_A(x) * scale))): its
    mask alone, BOOL_BYTES per output element, since the output is added to the base output and no GEMM
    saves it. Split as adapter_dropout_inputs: a column-parallel module's output is split over t ('row': divided by
    tp); a row-parallel module's is its partial sum, whole on each rank ('column': divided by the sequence-parallel
    divisor, as the reduce-scatter that follows splits it)."""
    out = {"column": 0.0, "row": 0.0}
    for lin in targeted_linears(model, moe, targets):
        out["column" if lin.row_parallel else "row"] += BOOL_BYTES * lin.d_out * lin.rows * lin.copies
    return out


def dropout_changes(model, moe: bool, tensors: dict, tok, k: dict, r) -> dict:
    """A block's saved tensors with lora_dropout > 0 (numpy-friendly over the knob arrays k; r: the sequence-parallel
    divisor of the column-parallel inputs, as theirs): each adapted module adds what its dropout saves
    (adapter_dropout_inputs, 'lora/dropout'), and under bf16 LoRA (method lora, bf16 norms) the inputs only lora_A
    kept (_ADAPTER_ONLY_INPUTS) go, since lora_A now saves its dropout's output instead. QLoRA keeps them:
    bitsandbytes' MatMul4Bit saves its input whatever reads it (saved_tensor_changes). With the dropout on the
    adapter's output (k['lora_dropout_post']) lora_A reads the module's own input: only the masks are added
    (adapter_dropout_outputs) and no input goes."""
    code = np.asarray(k["method"])
    on = (np.asarray(k.get("lora_dropout", 0.0)) > 0) & (code > 0)
    if not np.any(on):
        return tensors
    fp32 = np.asarray(k.get("fp32_norms", 0)) > 0
    post = np.asarray(k.get("lora_dropout_post", 0)) > 0
    targets_code = np.asarray(k["lora_targets"])
    saved = 0.0
    for target, norms in ((t, n) for t in LoraTargets for n in (False, True)):
        split = adapter_dropout_inputs(model, moe, target, norms)
        chosen = (targets_code == TARGET_CODES[target]) & (fp32 == norms) & ~post
        saved = saved + np.where(chosen, tok * (split["column"] / r + split["row"] / k["tp"]), 0.0)
    for target in LoraTargets:
        split = adapter_dropout_outputs(model, moe, target)
        chosen = (targets_code == TARGET_CODES[target]) & post
        saved = saved + np.where(chosen, tok * (split["column"] / r + split["row"] / k["tp"]), 0.0)
    out = dict(tensors)
    out["lora/dropout"] = np.where(on, saved, 0.0)
    frees = on & (code == METHOD_CODES[Method.lora]) & ~fp32 & ~post
    # attention and qv targets: the MLP's inputs went already (saved_tensor_changes); qv: k's frozen bf16 linear reads
    # the norm output too, and saves nothing, so it goes there as well
    for key in _ADAPTER_ONLY_INPUTS:
        if key in out:
            out[key] = np.where(frees, 0.0, out[key])
    return out


def fp32_norm_changes(model, moe: bool, tensors: dict, method_code, targets_code, fp32_norms) -> dict:
    """A block's saved tensors when its norms hold fp32 weights (Layout.fp32_norms), numpy-friendly.

    PEFT's prepare_model_for_kbit_training casts every bf16 parameter of a k-bit model to fp32 ("cast all
    non INT8 parameters to fp32", peft/utils/other.py), and TRL's SFTTrainer, which calls it, casts the
    embedding and LM head back to bf16 but keeps the norms fp32 (trl peft_module_casting_to_bf16). The
    transformers RMSNorm returns `self.weight * hidden_states.to(input_dtype)`: with an fp32 weight its output
    is fp32, and so is what follows it:
      - bitsandbytes' Linear4bit casts its input to the compute dtype and returns `out.to(inp_dtype)`
        (bitsandbytes/nn/modules.py), so q, k, v, gate and up give fp32 outputs, and MatMul4Bit saves its
        bf16 copy of the input (ctx.tensors = (A, B)); each LoRA A under bf16 autocast saves a bf16 cast
        of its own: 2 B per linear reading the tensor, per copy, instead of one shared bf16 tensor;
      - the SwiGLU (silu, then mul) runs and saves in fp32: the gate and up outputs and silu(gate), 4 B;
      - flash attention casts q, k, v back to bf16 (transformers' "silently casted in float32" warning): its
        saved tensors stay bf16; the out-projection reads its bf16 output;
      - the MLP's fp32 output promotes the residual stream to fp32 (bf16 + fp32 adds to fp32): every
        layer's input, the checkpoint full recompute keeps, is 4 B per element (memory.py doubles it);
      - the norm's fp32 product is saved by no op (the frozen weight multiply keeps the weight only):
        norm/inputs drops, norm/eager_fp32 (the fp32 input pow and rsqrt save) stays.
    MoE blocks are left as they are (the expert path's casts are not modelled)."""
    on = np.asarray(fp32_norms) > 0
    if not np.any(on) or moe:
        return tensors
    code = np.asarray(method_code)
    lora = code > 0
    # the base linear keeps its own bf16 cast: a trained weight (full: autocast saves the cast input for the
    # weight gradient) or a 4-bit one (MatMul4Bit); a frozen bf16 weight (lora) keeps none
    base = (code == METHOD_CODES[Method.full]) | (code == METHOD_CODES[Method.qlora])
    h = model.hidden_size

    def reads_norm_output(lin: Linear) -> bool:
        return lin.d_in == h and not lin.row_parallel and lin in attention_linears(model)

    readers = sum(1 for lin in attention_linears(model) if reads_norm_output(lin))
    adapted_readers = by_target(targets_code, {t: sum(1 for lin in targeted_linears(model, False, t)
                                                      if reads_norm_output(lin)) for t in LoraTargets})
    mlp_readers = 2 if model.gated_mlp else 1
    attention_copies = readers * base.astype(float) + adapted_readers * lora
    mlp_copies = base.astype(float) + (lora & (by_target(targets_code, {t: adapts_mlp(t) for t in LoraTargets}) > 0))
    out = dict(tensors)

    def scaled(key, factor):
        if key in out:
            out[key] = np.where(on, factor * out[key], out[key])

    scaled("norm/inputs", 0.0)
    scaled("attention/qkv_input", attention_copies)
    scaled("mlp/fc1_input", mlp_readers * mlp_copies)
    scaled("mlp/act_input", 2.0)
    scaled("mlp/eager_silu_output", 2.0)
    scaled("mlp/fc2_input", mlp_copies)
    return out
