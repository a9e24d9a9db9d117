"""Typed specifications shared by every calculator.

ModelSpec describes a decoder-only transformer closely enough to count its parameters exactly
(see counting.py); GPUSpec and ClusterSpec describe the hardware. The layout vocabulary is not here: its
choices are in tools/core/enums.py, Layout and ParallelConfig in tools/config/contract.py (a layer above).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The layout vocabulary is defined in contract.py; re-exported here for the calculators.
from trainplan.tools.core.enums import Precision
from trainplan.tools.core.bounds import MAX_PRICE_PER_GPU_HOUR
from trainplan.tools.core.calibration import family_efficiency
from trainplan.tools.core.errors import InputError


class ModelSpec(BaseModel):
    """A decoder-only transformer, as read from a Hugging Face config.json.

    Sizes are counts; every flag changes the exact parameter count (see counting.py).
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="catalog name or the config file's stem")
    model_type: str = Field(description="HF model_type the spec was read from")
    num_layers: int = Field(description="transformer blocks in the main model (MTP excluded)")
    hidden_size: int = Field(description="h, the residual-stream width")
    num_attention_heads: int = Field(description="a, query heads")
    num_kv_heads: int = Field(description="key/value heads (GQA/MQA when fewer than a)")
    head_dim: int = Field(description="per-head width of q/k/v for standard attention")
    vocab_size: int = Field(description="V, rows of the embedding table")
    max_seq_len: int = Field(description="default training sequence length")
    tie_word_embeddings: bool = Field(default=False, description="LM head shares the embedding")
    # Attention.
    attention_type: Literal["mha", "mla"] = Field(
        default="mha", description="mha covers MHA/GQA/MQA; mla is DeepSeek multi-head latent attention"
    )
    qkv_bias: bool = Field(default=False, description="q/k/v projections carry biases")
    o_bias: bool = Field(default=False, description="output projection carries a bias")
    qk_norm: bool = Field(default=False, description="per-head RMSNorm on q and k (Qwen3)")
    fused_qkv: bool = Field(default=False, description="one Linear makes q, k and v (Qwen-1 c_attn): LoRA adapts it "
                                                       "as one module")
    q_lora_rank: int | None = Field(default=None, description="MLA query compression rank (None: no compression)")
    kv_lora_rank: int = Field(default=0, description="MLA key/value compression rank")
    qk_nope_head_dim: int = Field(default=0, description="MLA per-head q/k width without rotary")
    qk_rope_head_dim: int = Field(default=0, description="MLA per-head rotary width (shared k_pe)")
    v_head_dim: int = Field(default=0, description="MLA per-head value width")
    # MLP.
    intermediate_size: int = Field(description="dense MLP hidden width")
    gated_mlp: bool = Field(default=True, description="SwiGLU/GeGLU (3 matrices) versus plain (2)")
    mlp_bias: bool = Field(default=False, description="MLP matrices carry biases")
    activation: str = Field(default="silu", description="MLP activation function name")
    # Mixture of experts.
    num_experts: int = Field(default=0, description="routed experts per MoE layer (0: dense model)")
    experts_per_token: int = Field(default=0, description="top-k routed experts per token")
    moe_intermediate_size: int = Field(default=0, description="hidden width of one routed expert")
    num_shared_experts: int = Field(default=0, description="always-active shared experts per MoE layer")
    shared_expert_intermediate_size: int = Field(
        default=0, description="hidden width of one shared expert"
    )
    shared_expert_gate: bool = Field(default=False, description="sigmoid gate Linear(h, 1) on the shared expert")
    routing_group_limit: int = Field(
        default=0, description="group-limited routing: a token's experts lie in at most this many groups/nodes "
                               "(DeepSeek topk_group); 0 means unlimited"
    )
    moe_layers: tuple[int, ...] = Field(default=(), description="indices of the MoE layers")
    # Norms and positions.
    norm_type: Literal["rmsnorm", "layernorm"] = Field(default="rmsnorm", description="normalisation kind")
    norm_bias: bool = Field(default=False, description="norms carry a bias (LayerNorm)")
    norms_per_layer: int = Field(default=2, description="norm modules in each block")
    final_norm: bool = Field(default=True, description="a norm before the LM head")
    embedding_norm: bool = Field(default=False, description="a norm right after the embedding (BLOOM)")
    norm_affine: bool = Field(default=True, description="norms carry a learned scale (OPT can turn it off)")
    embedding_dim: int = Field(
        default=0, description="word-embedding width when it differs from h (OPT word_embed_proj_dim); 0: h"
    )
    learned_position_embeddings: int = Field(default=0, description="rows of a learned position table")
    rope_theta: float | None = Field(default=None, gt=0, description="RoPE base (HF rope_theta); None: not in the "
                                                                      "config (the engine's default)")
    rope_scaling_type: str | None = Field(default=None, description="HF rope_scaling's rope_type (llama3, yarn, "
                                                                     "linear, ...); None: no scaling")
    rope_scaling_factor: float | None = Field(default=None, gt=0, description="HF rope_scaling's factor")
    norm_eps: float | None = Field(default=None, gt=0, description="epsilon of the norms (HF rms_norm_eps or "
                                                                    "layer_norm_eps); None: not in the config")
    attention_dropout: float = Field(
        default=0.0, ge=0, lt=1,
        description="attention-probability dropout of the recipe; it adds dropout work and masks but never "
                    "chooses the kernel (ParallelConfig.attention does)",
    )
    parallel_attention_mlp: bool = Field(default=False, description="attention and MLP read the same input")
    num_mtp_layers: int = Field(default=0, description="multi-token-prediction modules, counted apart")
    extra_params: int = Field(default=0, description="parameters outside the blocks not covered above")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_kind(self) -> str:
        """What people call the attention: mla; mha (kv heads = query heads); mqa (one kv head); gqa
        (groups of query heads share a kv head, Ainslie et al. 2023)."""
        if self.attention_type == "mla":
            return "mla"
        if self.num_kv_heads == self.num_attention_heads:
            return "mha"
        return "mqa" if self.num_kv_heads == 1 else "gqa"


# Bounds of a GPU file's figures: ten to a hundred times any accelerator's, so that a typo (or 1e308)
# is refused in one line instead of overflowing the step-time and cost arithmetic.
MAX_TFLOPS = 1e6
MAX_MEMORY_GIB = 1e5
MAX_BANDWIDTH_GB_S = 1e6
MAX_LATENCY_US = 1e6
MAX_GPUS_PER_NODE = 2**16
MAX_SM_COUNT = 2**16


class GPUSpec(BaseModel):
    """One accelerator and its node, with figures from public sources (see each JSON's 'sources').

    Topology: ``gpus_per_node`` is the fast domain the collectives see (the GPUs sharing one NVLink
    or xGMI fabric: 8 on an HGX board, 72 in a GB200 NVL72 rack); ``gpus_per_host`` is one server
    (what a launcher's nproc_per_node counts: 4 on a GB200 compute tray). A PCIe-only card
    (``interconnect: pcie``) has no NVLink: its fast domain is the host's PCIe fabric, and
    ``intra_node_bw`` is the PCIe link's bandwidth.
    """

    name: str = Field(description="catalog name")
    architecture: str = Field(default="", description="GPU family (hopper, blackwell, cdna3, ada, ...)")
    interconnect: Literal["nvlink", "xgmi", "pcie"] = Field(
        default="nvlink", description="what joins the GPUs of one fast domain: NVLink, AMD xGMI (Infinity Fabric) or PCIe only"
    )
    aliases: list[str] = Field(default_factory=list, description="other spellings, normalised (lower case, no separators)")
    bf16_tflops: float = Field(gt=0, le=MAX_TFLOPS, description="dense BF16 peak, TFLOP/s (no sparsity)")
    fp8_tflops: float | None = Field(default=None, gt=0, le=MAX_TFLOPS, description="dense FP8 peak, TFLOP/s; None when unsupported")
    memory_gib: float = Field(gt=0, le=MAX_MEMORY_GIB, description="HBM capacity usable by one process, GiB")
    hbm_bandwidth_gb_s: float = Field(gt=0, le=MAX_BANDWIDTH_GB_S, description="HBM bandwidth, GB/s")
    intra_node_bw: float = Field(gt=0, le=MAX_BANDWIDTH_GB_S, description="NVLink bandwidth per GPU per direction, GB/s")
    inter_node_bw: float = Field(gt=0, le=MAX_BANDWIDTH_GB_S, description="network bandwidth per GPU per direction, GB/s")
    # Communication parameters of the alpha-beta model (collectives.py documents the choices).
    intra_node_latency_us: float = Field(
        default=1.9, ge=0, le=MAX_LATENCY_US, description="latency of one NVLink hop of a collective, microseconds (NCCL ring/LL128)"
    )
    inter_node_latency_us: float = Field(
        default=4.0, ge=0, le=MAX_LATENCY_US, description="latency of one network hop of a collective, microseconds (NCCL ring/LL128)"
    )
    intra_node_bw_efficiency: float = Field(
        default=0.80, gt=0, le=1, description="NCCL bus bandwidth reached over NVLink, share of intra_node_bw"
    )
    inter_node_bw_efficiency: float = Field(
        default=0.90, gt=0, le=1, description="NCCL bus bandwidth reached over the network, share of inter_node_bw"
    )
    gpus_per_node: int = Field(gt=0, le=MAX_GPUS_PER_NODE, description="GPUs sharing one NVLink/xGMI domain (PCIe cards: one host)")
    gpus_per_host: int | None = Field(default=None, gt=0, le=MAX_GPUS_PER_NODE, description="GPUs in one server; None: gpus_per_node")
    price: float = Field(gt=0, le=MAX_PRICE_PER_GPU_HOUR, description="default price, dollars per GPU-hour")
    price_date: str = Field(default="", description="when the price was read (YYYY-MM)")
    sm_count: int = Field(default=132, gt=0, le=MAX_SM_COUNT, description="streaming multiprocessors (GEMM wave quantization)")
    gemm_efficiency: float = Field(
        gt=0, le=1, description="share of the dense peak that large GEMMs sustain; default: the family's row of "
                                "the calibration table (tools/core/calibration.py)"
    )
    attention_efficiency: float = Field(
        gt=0, le=1, description="share of the dense BF16 peak that flash attention sustains; default: the "
                                "family's row of the calibration table"
    )
    efficiency_basis: Literal["fitted", "assumed"] = Field(
        default="assumed", description="fitted: gemm/attention efficiency fitted on a public run of this GPU family; "
                                       "assumed: no public fit, taken from another family (see sources)"
    )
    sources: dict[str, str] = Field(default_factory=dict, description="where each figure came from")

    @model_validator(mode="before")
    @classmethod
    def _calibrated_efficiencies(cls, data):
        """Efficiencies a GPU file does not set come from the calibration table, by architecture."""
        names = ("gemm_efficiency", "attention_efficiency")
        if not isinstance(data, dict) or all(name in data for name in names):
            return data
        values, basis, sources = family_efficiency(str(data.get("architecture", "")))
        data = dict(data)
        data.setdefault("efficiency_basis", basis if not any(name in data for name in names) else "assumed")
        data["sources"] = {**{n: sources[n] for n in names if n not in data}, **dict(data.get("sources") or {})}
        for name in names:
            data.setdefault(name, values[name])
        return data

    @property
    def host_size(self) -> int:
        """GPUs per server (launchers' nproc_per_node)."""
        return self.gpus_per_host or self.gpus_per_node

    def peak_tflops(self, precision: Precision | str) -> float:
        """Dense peak for the precision used; the MFU denominator."""
        if Precision(precision) is Precision.fp8:
            if self.fp8_tflops is None:
                raise InputError(f"gpu {self.name} has no FP8 tensor cores: use --precision bf16")
            return self.fp8_tflops
        return self.bf16_tflops


GPU_DEFAULTED = ("gpus_per_node", "intra_node_bw", "inter_node_bw", "intra_node_latency_us", "inter_node_latency_us",
                 "intra_node_bw_efficiency", "inter_node_bw_efficiency")
"""ClusterSpec fields whose value, when not given, is the GPU's (its catalog entry)."""
_ZERO_MEANS_CATALOG = ("gpus_per_node", "intra_node_bw", "inter_node_bw")


class ClusterSpec(BaseModel):
    """The GPU plus the cluster flags that override its node and network figures."""

    gpu: GPUSpec
    num_gpus: int = Field(gt=0, description="total GPUs")
    gpus_per_node: int = Field(gt=0, description="GPUs per NVLink domain")
    intra_node_bw: float = Field(gt=0, description="GB/s per GPU per direction inside a node")
    inter_node_bw: float = Field(gt=0, description="GB/s per GPU per direction across nodes")
    intra_node_latency_us: float = Field(default=1.9, ge=0, description="NVLink hop latency, microseconds")
    inter_node_latency_us: float = Field(default=4.0, ge=0, description="network hop latency, microseconds")
    collective_base_latency_us: float = Field(
        default=14.0, ge=0, description="NCCL's fixed latency per ring or tree collective call, microseconds: "
                                        "baseLat of src/graph/tuning.cc for LL128 (Ring and Tree 14.0), the protocol "
                                        "of the hop latencies above (collectives.py)")
    intra_node_bw_efficiency: float = Field(default=0.80, gt=0, le=1, description="share of intra_node_bw reached")
    inter_node_bw_efficiency: float = Field(default=0.90, gt=0, le=1, description="share of inter_node_bw reached")
    host_link_gb_s: float = Field(
        default=25.0, gt=0, description="GB/s per GPU in each direction between GPU and host memory (activation and "
                                        "optimizer offload, QLoRA's paged optimizer): assumed, PCIe Gen4/5 x16 "
                                        "sustains about 25 GB/s per GPU when a node's GPUs share the host "
                                        "(ZeRO-Offload, Ren et al. 2021 §4)")
    cpu_adam_params_per_s: float = Field(
        default=1.0e9, gt=0, description="parameters per second a CPU Adam updates for one GPU's share of the host "
                                         "cores (optimizer offload): assumed, a well-vectorised CPU Adam "
                                         "(ZeRO-Offload's, Ren et al. 2021 §4)")

    @property
    def gpus_per_host(self) -> int:
        """GPUs per server: the GPU's host size, never more than the fast domain it sits in."""
        return min(self.gpu.host_size, self.gpus_per_node)

    @classmethod
    def build(cls, gpu: GPUSpec, gpus: int, **given: float | int | None) -> ClusterSpec:
        """The cluster of `gpus` GPUs: each ClusterSpec field given (not None) as given; the GPU's catalog value
        for the node size and links (GPU_DEFAULTED; a node size or bandwidth of 0 also takes it), the
        field's default for the rest."""
        unknown = sorted(set(given) - set(cls.model_fields) - {"gpu", "num_gpus"})
        if unknown:
            raise TypeError(f"ClusterSpec has no field {', '.join(unknown)}")
        values = {name: value for name, value in given.items()
                  if value is not None and not (name in _ZERO_MEANS_CATALOG and not value)}
        for name in GPU_DEFAULTED:
            values.setdefault(name, getattr(gpu, name))
        return cls(gpu=gpu, num_gpus=gpus, **values)
