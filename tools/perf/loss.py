"""The LM head's logits and the cross-entropy loss: what each loss kernel keeps of the s x V logits.

The head projects each of the s b tokens of a micro-batch onto the V vocabulary entries; how much of
that s b V tensor lives at once, in which precision, is decided by how the stack computes the loss
(Layout.loss_kernel). Per token per vocabulary entry, at the peak of the loss's forward or backward
(the rest of the micro-batch's activations are live at both; the larger is counted):

  fused (Megatron-LM, vocab_parallel_cross_entropy on `output.float()`; megatron/core/tensor_parallel/
      cross_entropy.py): the fp32 logits, shifted, exponentiated and normalised in place into the softmax
      that the backward turns, in place again, into the gradient: 4 B, split over t by the vocab-parallel
      head. The planner's convention before this knob existed, kept for full training.
  materialised (transformers: LlamaForCausalLM.forward `logits = self.lm_head(hidden_states[...])` then
      `loss_function` (loss_utils.ForCausalLMLoss) `logits = logits.float()` and
      nn.functional.cross_entropy; before transformers 4.45 the forward upcast `logits.float()` and
      `shift_logits = logits[..., :-1, :].contiguous()` itself; torchtitan's cross_entropy_loss
      `cross_entropy(pred.flatten(0, 1).float(), ...)` likewise): cross_entropy is log_softmax then
      nll_loss, and log_softmax saves its fp32 output (4 B) for the backward. In the backward three fp32
      s b V tensors are live at once: the saved log-softmax (4), nll_loss's gradient (4) and
      log_softmax's input gradient (4) = 12 B (the forward holds the bf16 logits 2 + the fp32 copy 4 +
      the log-softmax 4 = 10, or 12 with the older shifted copy). LOSS_BYTES = 12.
  chunked (torchtune's CEWithChunkedOutputLoss, num_output_chunks 8, the recipes' default loss:
      torchtune/modules/loss/ce_chunked_output_loss.py, "saves memory by only upcasting one chunk at a
      time"): the model returns its bf16 logits in 8 chunks (2 B, all kept until the loss is done),
      each chunk is upcast (4/8 at a time) and its log-softmax saved (4 in total over the chunks):
      2 + 4 + 4/8 = 6.5 B.
  fused_linear (Liger's LigerFusedLinearCrossEntropyLoss, Apple's Cut Cross-Entropy, Unsloth's fused
      loss): the head's GEMM and the loss run together over blocks of tokens, the gradient computed in
      the forward, so the s b V logits never exist whole: 0 B per token (a block of a few thousand
      token-rows at a time, not counted).

The default (null) follows the stack that a method implies (tools/config/resolve.py resolved_loss_kernel): full training is
planned as Megatron runs it (fused); lora and qlora as the fine-tuning stacks run them, the
Hugging Face models that PEFT wraps (materialised). A search given an engine takes the engine's
(tools/engines/support.py ENGINE_LOSS_KERNEL).
"""

from __future__ import annotations


import numpy as np
from trainplan.tools.core.enums import LossKernel


TORCHTUNE_OUTPUT_CHUNKS = 8
"""CEWithChunkedOutputLoss(num_output_chunks=8), torchtune's default"""
LOSS_BYTES = {
    LossKernel.fused: 4.0,
    LossKernel.materialised: 3 * 4.0,
    LossKernel.chunked: 2.0 + 4.0 + 4.0 / TORCHTUNE_OUTPUT_CHUNKS,
    LossKernel.fused_linear: 0.0,
}
"""Bytes per token per vocabulary entry live at the loss's peak (module doc), before the split over t."""
LOSS_CODES = {kernel: i for i, kernel in enumerate(LossKernel)}
LOSS_BYTES_BY_CODE = np.array([LOSS_BYTES[kernel] for kernel in LossKernel])


def loss_bytes(code):
    """LOSS_BYTES for loss-kernel codes (numpy-friendly)."""
    return LOSS_BYTES_BY_CODE[np.asarray(code, dtype=int)]
