"""Every choice a knob takes: the enums, defined once at the ground floor (they import nothing of ours).

Each member's docstring is its meaning; the CLI help, tool schemas and reports read it from here.
"""

from __future__ import annotations

from enum import Enum


class Recompute(str, Enum):
    """Activation recomputation mode."""

    none = "none"
    """Keep every activation (fastest, most memory)."""
    selective = "selective"
    """Recompute named modules (recompute_modules); by default the attention core (softmax, dropout,
    scores x V), Korthikanti et al. 2022."""
    full = "full"
    """Keep only each layer's input and rerun the layer's forward in the backward pass."""


class RecomputeModule(str, Enum):
    """A module that selective recompute reruns (Megatron-Core --recompute-modules; recompute.py)."""

    core_attn = "core_attn"
    """The attention core (softmax statistics, or the eager s x s tensors)."""
    layernorm = "layernorm"
    """The two norms of each block: their outputs are recomputed from the kept inputs."""
    mla_up_proj = "mla_up_proj"
    """MLA's up-projections, latent norms and RoPE: Q, K, V are recomputed from the kept latents."""
    moe_act = "moe_act"
    """The experts' activation (SwiGLU): its output is recomputed from its kept input."""
    mlp = "mlp"
    """A dense MLP, from its kept input."""
    moe = "moe"
    """A whole MoE layer, from its kept input."""


class OffloadModule(str, Enum):
    """A module whose saved activations wait in host memory (Megatron --offload-modules; offload.py)."""

    attn_norm = "attn_norm"
    """The input_layernorm input."""
    qkv_linear = "qkv_linear"
    """The QKV (MLA: down-projection) input."""
    core_attn = "core_attn"
    """What the attention kernel saves: Q, K, V and its softmax statistics."""
    attn_proj = "attn_proj"
    """The attention output projection's input."""
    mlp_norm = "mlp_norm"
    """The pre_mlp_layernorm input."""
    expert_fc1 = "expert_fc1"
    """The experts' fc1 input (the dispatched tokens)."""
    moe_act = "moe_act"
    """The experts' activation input."""


class Schedule(str, Enum):
    """Pipeline schedule."""

    gpipe = "gpipe"
    """All forwards, then all backwards: every stage holds m micro-batches."""
    one_f_one_b = "1f1b"
    """PipeDream-Flush 1F1B: stage i holds at most p - i micro-batches."""
    interleaved = "interleaved"
    """Megatron interleaved 1F1B with vpp model chunks per rank; bubble shrinks by 1/vpp."""
    zb_h1 = "zb-h1"
    """Zero-bubble H1 (Qi et al. 2024): backward split into input-grad B and weight-grad W."""
    dualpipe = "dualpipe"
    """DeepSeek-V3's bidirectional schedule with overlapped forward/backward chunks."""


class Precision(str, Enum):
    """Compute precision of the GEMMs."""

    bf16 = "bf16"
    """BF16 mixed precision (dense BF16 peak)."""
    fp8 = "fp8"
    """FP8 GEMMs (dense FP8 peak); weights and master states as in bf16 mixed precision."""


class Attention(str, Enum):
    """The attention kernel. Chosen by the layout, never inferred from the config's dropout."""

    flash = "flash"
    """Fused flash attention (Dao 2022; 2023): no s x s tensor in HBM; the causal mask skips the masked
    blocks, so the kernel runs half the score FLOPs; dropout, if any, is applied inside the kernel."""
    eager = "eager"
    """Unfused attention (Megatron 2021-22, HF "eager"): full s x s score GEMMs (masked entries computed),
    softmax and dropout streamed through HBM, and the s x s tensors kept for the backward."""
    flash1 = "flash1"
    """First-generation fused attention (FlashAttention 1, 2022, and its Triton port, which MosaicML's MPT ran as
    attn_impl triton): the memory and causal block skipping of flash, at the lower speed Dao 2023 measured against
    FlashAttention-2 (compute.attention_efficiencies), and Ampere instructions only on newer GPUs."""

    flash2 = "flash2"
    """FlashAttention-2 itself (Dao 2023), as PyTorch's SDPA and Hugging Face's flash_attention_2 run it: the speed
    of flash on Ampere, and on newer GPUs only Ampere's instructions (no TMA, no wgmma), 335 of H100's 989 TFLOP/s
    (Dao 2023 §4.1; FlashAttention-3 names it "only 35% utilization on H100"), where flash is the family's own
    fused kernel (Transformer Engine's cuDNN attention on Hopper)."""

    @property
    def fused(self) -> bool:
        """A fused kernel: no s x s tensor in HBM, the causal mask skips the masked blocks (every kernel but eager)."""
        return self is not Attention.eager


class Launch(str, Enum):
    """How the host issues a layer's kernels (host.py: the host floor of small work)."""

    eager = "eager"
    """PyTorch eager: every op of a layer (kernels, collectives and the views and autograd nodes around them)
    passes through Python, the dispatcher and the CUDA launch on the host, HOST_S_PER_OP each (the bare pointwise
    calls of an unfused elementwise chain HOST_S_PER_POINTWISE_OP each)."""
    compile = "compile"
    """torch.compile (Inductor, default mode): the layer's views and elementwise chains are compiled into a few
    generated kernels, so the host issues only the launched kernels and collectives, each HOST_S_PER_OP."""
    cuda_graphs = "cuda_graphs"
    """CUDA graphs (torch.cuda.graph, Megatron-Core --cuda-graph-impl, torch.compile mode reduce-overhead): each
    layer's forward and backward are captured once and replayed with one host launch per pass."""


class Dispatcher(str, Enum):
    """How an MoE layer moves tokens to their experts (Megatron --moe-token-dispatcher-type)."""

    alltoall = "alltoall"
    """Each rank sends each token copy to the rank holding its expert (all-to-all over ep)."""
    allgather = "allgather"
    """Every rank gathers all tokens of the expert group and keeps those routed to its experts."""
    deepep = "deepep"
    """DeepEP's dispatch and combine kernels as DeepSeek-V3 trained with them (report §3.2.2, §3.3.3):
    group-limited routing sends a token over the network once per target node and forwards it over
    NVLink, and under precision fp8 the tokens go out in FP8 (with their 1x128 scales) while the combine
    returns BF16 (moe.wire_bytes_per_element). Megatron-Core runs DeepEP as its flex dispatcher with BF16
    tokens."""


class GroupedGemm(str, Enum):
    """How the local experts' GEMMs run (moe.py)."""

    per_expert = "per_expert"
    """One GEMM per local expert issued by the host, sized from tokens-per-expert counts synced to it
    (Transformer Engine GroupedLinear / Megatron --moe-grouped-gemm, dropless)."""
    fused = "fused"
    """One device-side grouped-GEMM kernel for all local experts (e.g. DeepSeek's DeepGEMM)."""


class Objective(str, Enum):
    """What a search ranks by."""

    throughput = "throughput"
    """most tokens per second (shortest step)"""
    cost = "cost"
    """fewest dollars: cost_usd with tokens, else GPUs x step time (GPU-seconds per step)"""
    time = "time"
    """fewest days to train the tokens; without tokens, the shortest step"""


class Method(str, Enum):
    """What a run trains."""

    full = "full"
    """every weight, with its gradients and optimizer states"""
    lora = "lora"
    """low-rank adapters beside a frozen bf16 base (Hu et al. 2021)"""
    qlora = "qlora"
    """low-rank adapters beside a frozen 4-bit NF4 base with double quantisation (Dettmers et al. 2023)"""


class LoraTargets(str, Enum):
    """Which linear layers get adapters."""

    attention = "attention"
    """q, k, v and o projections"""
    all_linear = "all-linear"
    """every linear layer of the blocks (attention and MLP/experts), PEFT's "all-linear" """
    qv = "qv"
    """the q and v projections only: PEFT's default target_modules for Llama-family models, the LoRA paper's choice
    (Hu et al. 2021 §7.1) and LitGPT's default"""


class LoraDropoutPosition(str, Enum):
    """Where an adapter's dropout acts (Layout.lora_dropout_position)."""

    pre = "pre"
    """on the adapter's input, lora_B(lora_A(dropout(x))): PEFT's LoraLayer (peft/tuners/lora/layer.py Linear.forward)
    and torchtune's LoRALinear; each adapted module saves its own dropped copy of its input"""
    post = "post"
    """on the adapter's output, dropout(lora_B(lora_A(x))): NeMo AutoModel's LinearLoRA default
    (nemo_automodel/components/_peft/lora.py PeftConfig dropout_position="post"); lora_A reads the module's own
    input and only the output's mask is saved"""


class LossKernel(str, Enum):
    """How the LM head's logits and the cross-entropy loss are computed (tools/perf/loss.py)."""

    fused = "fused"
    """Megatron's vocab-parallel cross-entropy: one fp32 softmax, made and turned into the gradient in place"""
    materialised = "materialised"
    """the Hugging Face models (and torchtitan): the whole logits upcast to fp32, log-softmax saved, gradient apart"""
    chunked = "chunked"
    """torchtune's CEWithChunkedOutputLoss: bf16 logits in 8 chunks, each upcast on its own"""
    fused_linear = "fused_linear"
    """Liger, Cut Cross-Entropy, Unsloth: head GEMM and loss fused over token blocks, logits never whole"""
