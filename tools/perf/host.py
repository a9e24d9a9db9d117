"""The host floor of small work: a layer's pass takes at least the time the host needs to issue its ops.

In PyTorch eager every op of a layer goes through Python, the autograd layer, the dispatcher and, for a kernel,
cudaLaunchKernel before the GPU sees it: about 5-25 us of CPU work per op, whatever the op's size ("From PyTorch
op to kernel launch", the per-layer costs of the dispatch chain; H. He, "Making Deep Learning Go Brrrr From First
Principles", 2022, the overhead regime: "when ops are small or many, it dominates"). The GPU runs the launched
kernels asynchronously, so the host queues ahead while kernels are long and the GPU waits on the host while
they are short. Over one pass of a layer (forward, or backward) the pass takes

    t_pass = max(t_device, n_ops x HOST_S_PER_OP)

with t_device its kernels and exposed collectives (compute.py, step.py) and n_ops the ops the host issues
(host_ops_forward below; the backward issues BACKWARD_OPS_PER_FORWARD_OP times as many). Only the excess over the
device time counts (OpTimes key "host"), so big kernels never move. CUDA graphs (torch.cuda.graph; Megatron-Core
--cuda-graph-impl transformer_engine captures each layer's forward and backward; Megatron Bridge "CUDA Graphs":
"replay that sequence with minimal host overhead") leave one replay per pass; torch.compile (Inductor) compiles
the views and elementwise chains into its generated kernels, so only launched kernels and collectives are issued.

HOST_S_PER_OP is fitted (tools/core/calibration.py: vTrain's single-node A100 rows with hidden 2048, the hidden-1024
rows held out). It is the host time of a layer over the ops counted below, and the ops of Megatron's layer come with
module calls and Python torch.autograd.Functions the count does not list (ColumnParallelLinear's
LinearWithGradAccumulationAndAsyncCommunication, apex's FusedLayerNormAffineFunction, the fused softmax, the
bias-GeLU), so the fitted value sits high in the 5-25 us range. An unfused elementwise chain (fused_kernels=false:
Hugging Face's LlamaRMSNorm, Qwen-1's RMSNorm._norm, apply_rotary_pos_emb and `a1 * F.silu(a2)`) is one module, or
none, around several bare aten calls: the chain's first kernel stands for the fused kernel and costs HOST_S_PER_OP,
each further kernel passes the dispatch chain alone, HOST_S_PER_POINTWISE_OP (the low end of every layer of the
chain: no module, no Python Function, no algorithm to pick). Op counts, per layer forward, from Megatron's
ParallelTransformerLayer (megatron/model/transformer.py of Megatron-LM 2022 and Megatron-DeepSpeed, the code vTrain
measured):
- LINEAR_OPS per Linear: the GEMM and the two reshapes F.linear makes of a 3-D [s, b, h] input (aten::linear ->
  view, addmm/mm, view);
- EAGER_ATTENTION_OPS (CoreAttention with its QKV split): view and split of the fused QKV (2); q, k views and
  their transposes for baddbmm (5); the score buffer (1), baddbmm (1), the score view (1); fused scale-mask-softmax
  and its two views (3); the CUDA RNG tracker's fork around dropout, get and two set_rng_state (3), dropout (1);
  v, probabilities views, v transpose and bmm (4); the context view, permute, contiguous copy and view (4): 25;
- FLASH_ATTENTION_OPS: QKV view and split (2), three rearranges into the kernel's layout (3), the kernel (1),
  the cumulative sequence lengths (1), the output rearrange (1): 8;
- the elementwise kernels compute.ELEMENTWISE_PASSES counts (norms, residual adds, rotary, activation);
- COLLECTIVE_OPS per tensor-parallel collective: Megatron's autograd Function (copy_to / reduce_from /
  gather_from ... region) and the NCCL call.
The experts of an MoE layer carry their own host term (moe.py MOE_HOST_S_PER_EXPERT_GEMM); here only its router and
shared experts count. The embedding, head and optimizer are not floored (a few ops a step).
"""

from __future__ import annotations

from trainplan.tools.core import assumptions
from trainplan.tools.core import calibration
from trainplan.tools.perf.compute import ELEMENTWISE_PASSES, OpTimes
from trainplan.tools.core.enums import Launch
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Attention
from trainplan.tools.perf import finetune

HOST_S_PER_OP = calibration.HOST_S_PER_OP.value
# A bare pointwise aten call (assumptions.HOST_S_PER_POINTWISE_OP, module docstring): what each op of an unfused
# elementwise chain beyond the fused kernel it stands for costs the host.
HOST_S_PER_POINTWISE_OP = assumptions.HOST_S_PER_POINTWISE_OP.value
LINEAR_OPS = 3
EAGER_ATTENTION_OPS = 25
FLASH_ATTENTION_OPS = 8
COLLECTIVE_OPS = 2
# Autograd runs one backward node per differentiable forward op, and a node computes the gradient of each of its
# inputs: two GEMMs per Linear (input and weight gradients), the backward of each view a view, of each elementwise
# kernel a kernel. Two host ops per forward op is that count rounded (assumed, not fitted).
BACKWARD_OPS_PER_FORWARD_OP = assumptions.BACKWARD_OPS_PER_FORWARD_OP.value
# LoRA (PEFT's LoRA Linear, peft/tuners/lora/layer.py, eager): per adapted linear, lora_A and lora_B as two Linears
# (LINEAR_OPS each), the dropout module (nn.Identity at lora_dropout 0: one module call, no kernel, taken as one op;
# above 0 one dropout kernel, the same op),
# the scaling multiply and the add into the base output: 2 x 3 + 3 = 9. Under torch.compile the two GEMMs stay
# launched kernels and the multiply-add fuses into a neighbour.
LORA_OPS_PER_ADAPTED_LINEAR = 2 * LINEAR_OPS + 3
COMPILED_LORA_KERNELS_PER_ADAPTED_LINEAR = 2
# QLoRA (bitsandbytes Linear4bit -> MatMul4Bit, bitsandbytes/autograd/_functions.py and functional.py
# dequantize_4bit with double quantisation): the absmax output buffer and dequantize_blockwise of the 8-bit absmax,
# the offset add, the bf16 weight buffer and the NF4 dequantisation kernel, and the transpose view of the
# dequantised weight: 6 host ops per 4-bit linear per dequantisation (two of them kernels, finetune.DEQUANT_KERNELS).
DEQUANT_OPS_PER_4BIT_LINEAR = 6
# Without double quantisation the fp32 absmax is read as it is: the absmax buffer, its dequantize_blockwise and the
# offset add go, 3 host ops (the bf16 weight buffer, the NF4 kernel, the transpose view).
SINGLE_QUANT_DEQUANT_OPS = 3
# Kernels of the eager attention core that torch.compile still launches: the two batched GEMMs and one fused
# softmax-dropout kernel (Inductor fuses the pointwise and reduction ops between them).
COMPILED_EAGER_ATTENTION_KERNELS = 3


def _linears(model: ModelSpec, is_moe: bool) -> int:
    """Linear layers of one block the host issues: attention projections and the dense MLP (or the router and the
    shared experts of an MoE block)."""
    if model.attention_type == "mla":
        attention = 4 + (1 if model.q_lora_rank else 0)
    else:
        attention = 2
    if is_moe:
        return attention + 1 + (2 if model.num_shared_experts else 0)
    return attention + 2


def tp_collectives_per_pass(cfg: ParallelConfig, is_moe: bool) -> int:
    """Tensor-parallel collectives of one block's forward: an all-reduce after each row-parallel GEMM, or with
    sequence parallelism an all-gather before and a reduce-scatter after each block (step.tp_comm_s); an MoE
    block's MLP side is its dispatcher's."""
    if cfg.tp == 1:
        return 0
    blocks = 1 if is_moe else 2
    return blocks * (2 if cfg.sequence_parallel else 1)


def fine_tuning_ops_forward(model: ModelSpec, cfg: ParallelConfig, is_moe: bool) -> float:
    """Ops the host issues for one block's adapters and 4-bit dequantisations in its forward (0 for full training);
    the backward issues BACKWARD_OPS_PER_FORWARD_OP times as many, bitsandbytes' second dequantisation for dX
    among them."""
    adapted = finetune.adapted_linears_per_block(model, cfg, is_moe)
    if not adapted:
        return 0.0
    if cfg.launch is Launch.compile:
        ops = COMPILED_LORA_KERNELS_PER_ADAPTED_LINEAR * adapted
    else:
        ops = LORA_OPS_PER_ADAPTED_LINEAR * adapted
    if finetune.Method(cfg.method) is finetune.Method.qlora:
        quantised = len(finetune.frozen_linears(model, is_moe))
        eager_ops = DEQUANT_OPS_PER_4BIT_LINEAR if cfg.double_quant is not False else SINGLE_QUANT_DEQUANT_OPS
        ops += (finetune.dequant_kernels(cfg) if cfg.launch is Launch.compile else eager_ops) * quantised
    return float(ops)


def host_ops_forward(model: ModelSpec, cfg: ParallelConfig, is_moe: bool) -> float:
    """Ops the host issues for one block's forward under cfg.launch (module docstring), the fine-tuning adapters
    and dequantisations included."""
    if cfg.launch is Launch.cuda_graphs:
        return 1.0
    collectives = tp_collectives_per_pass(cfg, is_moe)
    linears = _linears(model, is_moe)
    tuning = fine_tuning_ops_forward(model, cfg, is_moe)
    if cfg.launch is Launch.compile:
        attention = COMPILED_EAGER_ATTENTION_KERNELS if cfg.attention is Attention.eager else 1
        return linears + attention + ELEMENTWISE_PASSES[True]["kernels"] + collectives + tuning
    attention = EAGER_ATTENTION_OPS if cfg.attention is Attention.eager else FLASH_ATTENTION_OPS
    return (LINEAR_OPS * linears + attention + ELEMENTWISE_PASSES[cfg.fused_kernels]["kernels"]
            + COLLECTIVE_OPS * collectives + tuning)


def pointwise_ops_forward(cfg: ParallelConfig) -> float:
    """Ops of one block's forward that are bare pointwise aten calls (HOST_S_PER_POINTWISE_OP each): under eager
    launch with fused_kernels=false, the unfused elementwise kernels beyond one per fused kernel; 0 otherwise."""
    if cfg.launch is not Launch.eager or cfg.fused_kernels:
        return 0.0
    return float(ELEMENTWISE_PASSES[False]["kernels"] - ELEMENTWISE_PASSES[True]["kernels"])


def host_pass_s(model: ModelSpec, cfg: ParallelConfig, is_moe: bool) -> tuple[float, float]:
    """(forward, backward) host seconds of one block for one micro-batch: the pointwise ops of an unfused chain at
    HOST_S_PER_POINTWISE_OP, every other op at HOST_S_PER_OP; the backward BACKWARD_OPS_PER_FORWARD_OP times the
    forward (one replay each way under CUDA graphs)."""
    pointwise = pointwise_ops_forward(cfg)
    forward = (host_ops_forward(model, cfg, is_moe) - pointwise) * HOST_S_PER_OP + pointwise * HOST_S_PER_POINTWISE_OP
    return forward, (forward if cfg.launch is Launch.cuda_graphs else BACKWARD_OPS_PER_FORWARD_OP * forward)


def add_host_floor(layer: OpTimes, model: ModelSpec, cfg: ParallelConfig, is_moe: bool,
                   exposed_comm_s: float) -> None:
    """Add to one block's times the host time beyond its device time, forward and backward (key "host").

    Device time of a pass: its kernels plus the exposed communication that lands on it (stage_work puts a third
    of a layer's exposed communication on the forward and two thirds on the backward)."""
    host_forward, host_backward = host_pass_s(model, cfg, is_moe)
    device_forward = layer.forward + exposed_comm_s / 3
    device_backward = layer.backward_input + layer.backward_weight + 2 * exposed_comm_s / 3
    layer.add("host", max(0.0, host_forward - device_forward), max(0.0, host_backward - device_backward))
