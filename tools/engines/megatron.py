"""Megatron-LM / Megatron-Core command-line arguments (pretrain_gpt.py).

Every flag written here was checked against the argument parser in NVIDIA/Megatron-LM
megatron/training/arguments.py (commit 000c4ac24f61159c138b0975def722c65245983c); the test file
tests/test_export.py holds that list with the citation and checks each exported flag against it.

Mapping decisions (and why):
- ZeRO-1 is Megatron's distributed optimizer (--use-distributed-optimizer). ZeRO-2 and ZeRO-3 are
  Megatron-FSDP (--use-megatron-fsdp with --data-parallel-sharding-strategy optim_grads /
  optim_grads_params and the flags its user guide marks as required). The distributed optimizer alone
  keeps a full fp32 gradient buffer, so it is not ZeRO-2 in memory.
- Megatron-FSDP's guide documents TP/CP/EP but not pipeline parallelism, so ZeRO-2/3 with pp > 1 is
  refused rather than guessed.
- Hybrid sharding (dp_shard < dp) is --num-distributed-optimizer-instances dp/dp_shard: the distributed
  optimizer (and Megatron-FSDP, whose HSDP mode replicates across the instances unless
  --enable-full-sharding-in-hsdp) shards over dp*cp/instances consecutive ranks and all-reduces the
  shards across the instances (megatron/core/parallel_state.py, intra_partial_data_parallel_size).
- Megatron-LM schedules: 1F1B without interleaving, and interleaved 1F1B. GPipe, ZB-H1 and DualPipe
  are not Megatron-LM schedules and are refused.
- Layers per stage follow trainplan's split (stages.layers_per_stage): even splits need no flag,
  uneven ones use --decoder-first/last-pipeline-num-layers when Megatron's rules allow it
  (middle stages equal, each divisible by vpp), and --pipeline-model-parallel-layout otherwise.
- tp must divide the attention heads and the query groups (Megatron-Core's TransformerConfig raises on
  num_query_groups % tensor_model_parallel_size), and a learned-position model's seq stays within its table
  (arguments.py asserts max_position_embeddings >= seq_length): support.REFUSALS and refuse_positions.
"""

from __future__ import annotations

import shlex

from trainplan.tools.config.stages import model_layers_per_stage
from trainplan.tools.config.resolve import DEFAULT_RECOMPUTE_MODULES
from trainplan.tools.core.enums import Dispatcher, GroupedGemm
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Precision, Recompute, Schedule
from trainplan.tools.engines.common import ExportResult, batch_of, comment_block, fusion_note, header, slug
from trainplan.tools.engines.support import refuse


def _moe_layer_freq(model: ModelSpec) -> str | None:
    """--moe-layer-freq as a run-length pattern, e.g. "([0]*3+[1]*58)"; None when every layer is MoE."""
    if not model.moe_layers or len(model.moe_layers) == model.num_layers:
        return None
    flags = [1 if i in set(model.moe_layers) else 0 for i in range(model.num_layers)]
    runs: list[list[int]] = []
    for flag in flags:
        if runs and runs[-1][0] == flag:
            runs[-1][1] += 1
        else:
            runs.append([flag, 1])
    return "(" + "+".join(f"[{flag}]*{count}" for flag, count in runs) + ")"


def _chunks(counts: list[int], vpp: int) -> list[list[int]]:
    """Layers of each (virtual stage, rank): chunks[v][p], each rank's layers split evenly over its vpp chunks."""
    chunks = [[0] * len(counts) for _ in range(vpp)]
    for p, n in enumerate(counts):
        base, extra = divmod(n, vpp)
        for v in range(vpp):
            chunks[v][p] = base + (1 if v < extra else 0)
    return chunks


def _layout_string(counts: list[int], vpp: int, mtp: int) -> str:
    """Megatron's --pipeline-model-parallel-layout: stages in order v*pp + p, E=embedding t=layer m=MTP L=loss."""
    pp = len(counts)
    stages = []
    for v, row in enumerate(_chunks(counts, vpp)):
        for p, n in enumerate(row):
            text = "t" * n
            if v == 0 and p == 0:
                text = "E" + text
            if v == vpp - 1 and p == pp - 1:
                text = text + "m" * mtp + "L"
            stages.append(text)
    return "|".join(stages)


def _pipeline_split(model: ModelSpec, cfg: ParallelConfig) -> tuple[list[tuple[str, object]], str | None]:
    """Flags that place the layers on the stages, and a note when the split is not Megatron's default."""
    if cfg.pp == 1:
        return [], None
    counts = model_layers_per_stage(model, cfg.pp)
    vpp_flag = [("--num-virtual-stages-per-pipeline-rank", cfg.vpp)] if cfg.vpp > 1 else []
    if len(set(counts)) == 1:
        return vpp_flag, None
    first, middle, last = counts[0], counts[1:-1], counts[-1]
    split = "/".join(str(c) for c in counts)
    if len(set(middle)) <= 1 and all(c % cfg.vpp == 0 for c in (first, last, *middle)):
        flags = [("--decoder-first-pipeline-num-layers", first), ("--decoder-last-pipeline-num-layers", last)]
        return vpp_flag + flags, f"uneven pipeline split {split} layers per stage (trainplan's split)"
    layout = _layout_string(counts, cfg.vpp, model.num_mtp_layers)
    return ([("--pipeline-model-parallel-layout", layout)],
            f"uneven pipeline split {split} layers per stage written as --pipeline-model-parallel-layout"
            " (it also sets the virtual stages)")


LLAMA3_ROPE_DEFAULTS = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
"""The llama3 RoPE scaling Megatron-Core applies under --use-rope-scaling (rope_utils.apply_rope_scaling's
defaults); only the factor is a flag (--rope-scaling-factor)."""


def _rope_flags(model: ModelSpec, notes: list[str]) -> list[tuple[str, object]]:
    """--rotary-base (an int in Megatron's parser) and the llama3 scaling; other scalings are notes."""
    flags: list[tuple[str, object]] = []
    if model.rope_theta is not None:
        flags.append(("--rotary-base", round(model.rope_theta)))
        if model.rope_theta != round(model.rope_theta):
            notes.append(f"rope_theta {model.rope_theta:g} is not a whole number: Megatron's --rotary-base takes an int")
    if model.rope_scaling_type == "llama3":
        flags += [("--use-rope-scaling", None), ("--rope-scaling-factor", f"{model.rope_scaling_factor or 8.0:g}")]
        notes.append("llama3 RoPE scaling: Megatron fixes low/high frequency factors 1 and 4 and an original "
                     "context of 8,192; check them against the model's rope_scaling")
    elif model.rope_scaling_type is not None:
        notes.append(f"the model's {model.rope_scaling_type} RoPE scaling (factor {model.rope_scaling_factor or 1:g}) "
                     "has no pretrain_gpt.py flag written here: set it from the model card")
    return flags


def _model_flags(model: ModelSpec, cfg: ParallelConfig, notes: list[str]) -> list[tuple[str, object]]:
    flags: list[tuple[str, object]] = [
        ("--num-layers", model.num_layers),
        ("--hidden-size", model.hidden_size),
        ("--ffn-hidden-size", model.intermediate_size),
        ("--num-attention-heads", model.num_attention_heads),
        ("--seq-length", cfg.seq),
        # A learned table is never grown (support.refuse_positions); rotary positions have no table.
        ("--max-position-embeddings", max(model.max_seq_len, cfg.seq)),
    ]
    unexpressed = []
    if model.attention_type == "mla":
        flags.append(("--multi-latent-attention", None))
        if model.q_lora_rank is not None:
            flags.append(("--q-lora-rank", model.q_lora_rank))
        flags += [("--kv-lora-rank", model.kv_lora_rank), ("--qk-head-dim", model.qk_nope_head_dim),
                  ("--qk-pos-emb-head-dim", model.qk_rope_head_dim), ("--v-head-dim", model.v_head_dim)]
    else:
        if model.head_dim * model.num_attention_heads != model.hidden_size:
            flags.append(("--kv-channels", model.head_dim))
        if model.num_kv_heads < model.num_attention_heads:
            flags += [("--group-query-attention", None), ("--num-query-groups", model.num_kv_heads)]
    activation = model.activation.lower()
    if model.gated_mlp and activation in ("silu", "swish"):
        flags.append(("--swiglu", None))
    elif model.gated_mlp:
        unexpressed.append(f"gated {model.activation} MLP")
    elif activation in ("relu2", "squared_relu"):
        flags.append(("--squared-relu", None))
    elif not activation.startswith("gelu"):
        unexpressed.append(f"{model.activation} activation")
    flags.append(("--normalization", "RMSNorm" if model.norm_type == "rmsnorm" else "LayerNorm"))
    if model.norm_eps is not None:
        flags.append(("--norm-epsilon", f"{model.norm_eps:g}"))
    if model.learned_position_embeddings:
        flags.append(("--position-embedding-type", "learned_absolute"))
    else:
        flags += [("--position-embedding-type", "rope"), *_rope_flags(model, notes)]
    flags.append(("--vocab-size", model.vocab_size))
    notes.append(f"--vocab-size {model.vocab_size} is the config's; with --tokenizer-type HuggingFaceTokenizer "
                 "Megatron takes the tokenizer's size, padded to a multiple of --make-vocab-size-divisible-by x tp")
    biases = (model.qkv_bias, model.o_bias, model.mlp_bias)
    if biases == (False, False, False):
        flags.append(("--disable-bias-linear", None))
    elif biases == (True, False, False):
        flags += [("--disable-bias-linear", None), ("--add-qkv-bias", None)]
    elif biases != (True, True, True):
        unexpressed.append("biases on only some linear layers")
    if model.qk_norm:
        flags.append(("--qk-layernorm", None))
    if not model.tie_word_embeddings:
        flags.append(("--untie-embeddings-and-output-weights", None))
    if model.is_moe:
        flags += [("--num-experts", model.num_experts), ("--moe-router-topk", model.experts_per_token),
                  ("--moe-ffn-hidden-size", model.moe_intermediate_size)]
        if model.num_shared_experts:
            flags.append(("--moe-shared-expert-intermediate-size",
                          model.num_shared_experts * model.shared_expert_intermediate_size))
        freq = _moe_layer_freq(model)
        if freq:
            flags.append(("--moe-layer-freq", freq))
        flags.append(("--expert-tensor-parallel-size", cfg.expert_tp))
        # DeepEP runs as Megatron's flex dispatcher (arguments.py: "Only works with flex token dispatcher"),
        # which hands it the BF16 hidden states (fused_a2a.py), not FP8 tokens, and asserts "Flex token
        # dispatcher requires TPxEP > 1" and no --moe-pad-expert-input-to-capacity (token_dispatcher.py).
        flex_refuses = cfg.tp * cfg.ep == 1 or cfg.capacity_factor is not None
        if cfg.dispatcher is Dispatcher.deepep and flex_refuses:
            flags.append(("--moe-token-dispatcher-type", Dispatcher.alltoall.value))
            notes.append("dispatcher=deepep was planned, but Megatron's flex dispatcher needs tp x ep > 1 and no "
                         "capacity padding: the alltoall dispatcher is written instead")
        elif cfg.dispatcher is Dispatcher.deepep:
            flags += [("--moe-token-dispatcher-type", "flex"), ("--moe-enable-deepep", None)]
            if cfg.precision is Precision.fp8:
                notes.append("dispatcher=deepep was planned with FP8 dispatch as DeepSeek-V3 ran it; Megatron's "
                             "flex dispatcher sends BF16 tokens through DeepEP, about twice the dispatch bytes")
        else:
            flags.append(("--moe-token-dispatcher-type", cfg.dispatcher.value))
        flags.append(("--moe-grouped-gemm", None))
        if cfg.grouped_gemm is GroupedGemm.fused:
            notes.append("grouped_gemm=fused was planned (one device kernel for all local experts); Megatron's "
                         "--moe-grouped-gemm runs Transformer Engine's GroupedLinear, which may issue one GEMM per "
                         "expert: the step time assumed no host-issued per-expert GEMMs")
        if cfg.capacity_factor is not None:
            flags += [("--moe-expert-capacity-factor", cfg.capacity_factor), ("--moe-pad-expert-input-to-capacity", None)]
        if cfg.force_balance:
            flags.append(("--moe-router-force-load-balancing", None))
            notes.append("force_balance: the router ignores its scores and balances tokens, as benchmarks do; "
                         "drop --moe-router-force-load-balancing to train a real model")
        if cfg.moe_a2a_overlap:   # the combined 1F1B, with the delayed expert wgrad NVIDIA's presets pair it with
            flags += [("--overlap-moe-expert-parallel-comm", None), ("--delay-wgrad-compute", None)]
        if model.shared_expert_gate:
            unexpressed.append("a sigmoid gate on the shared expert")
        notes.append("router details (score function, group-limited routing, load-balancing loss) are not in"
                     " the model spec: add --moe-router-* flags from the model card")
    if model.num_mtp_layers:
        flags.append(("--mtp-num-layers", model.num_mtp_layers))
    if model.parallel_attention_mlp:
        unexpressed.append("parallel attention and MLP")
    if model.embedding_norm or model.norms_per_layer != 2:
        unexpressed.append("extra norms (embedding norm or sandwich norms)")
    if unexpressed:
        notes.append(f"{model.name} has features without a pretrain_gpt.py flag ({', '.join(unexpressed)}):"
                     " the shape flags describe the nearest GPT model; pass a custom --spec for the real one")
    return flags


def _sharding_flags(cfg: ParallelConfig, notes: list[str]) -> list[tuple[str, object]]:
    if cfg.zero == 0:
        flags: list[tuple[str, object]] = []
    elif cfg.zero == 1:
        flags = [("--use-distributed-optimizer", None)]
    else:
        strategy = "optim_grads" if cfg.zero == 2 else "optim_grads_params"
        flags = [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", strategy),
                 ("--no-gradient-accumulation-fusion", None), ("--use-distributed-optimizer", None),
                 ("--ckpt-format", "fsdp_dtensor")]
        notes.append(f"zero={cfg.zero} is Megatron-FSDP ({strategy}); its user guide recommends unsetting"
                     " CUDA_DEVICE_MAX_CONNECTIONS")
    if cfg.dp_replicas > 1:
        flags.append(("--num-distributed-optimizer-instances", cfg.dp_replicas))
    if cfg.optimizer_offload:
        flags += [("--optimizer-cpu-offload", None), ("--use-precision-aware-optimizer", None)]
    if cfg.bf16_grads:
        flags.append(("--grad-reduce-in-bf16", None))
    if cfg.tp_comm_overlap:
        flags.append(("--tp-comm-overlap", None))
    if cfg.overlap_grad_reduce and cfg.dp * cfg.cp > 1 and cfg.zero <= 1:   # the step model hides them (data_parallel.py)
        flags.append(("--overlap-grad-reduce", None))
        if cfg.zero == 1:
            flags.append(("--overlap-param-gather", None))
    if cfg.blocking_p2p and cfg.pp > 1:
        notes.append("blocking_p2p times DeepSpeed's pipeline engine, one blocking transfer after another; "
                     "Megatron-LM batches each step's send and receive, so this layout may run faster than planned")
    return flags


ARRAY = "MEGATRON_ARGS"


def _render(flags: list[tuple[str, object]], lines: list[str]) -> str:
    """A bash array, as Megatron-LM's example scripts write their arguments."""
    parts = [flag if value is None else f"{flag} {' '.join(shlex.quote(str(v)) for v in value)}"
             if isinstance(value, tuple) else f"{flag} {shlex.quote(str(value))}" for flag, value in flags]
    return comment_block(lines) + f"{ARRAY}=(\n" + "".join(f"    {part}\n" for part in parts) + ")\n"


def export_megatron(model: ModelSpec, cfg: ParallelConfig, *, model_ref: str) -> ExportResult:
    notes: list[str] = []
    refuse("megatron", model, cfg)   # support.REFUSALS: what Megatron-LM cannot run
    if cfg.pp == 1 and cfg.schedule is not Schedule.one_f_one_b:
        notes.append(f"schedule={cfg.schedule.value} has no effect without pipeline parallelism; nothing exported for it")
    batch = batch_of(cfg)
    flags: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", cfg.tp),
        ("--pipeline-model-parallel-size", cfg.pp),
        ("--context-parallel-size", cfg.cp),
        ("--expert-model-parallel-size", cfg.ep),
    ]
    if cfg.sequence_parallel:
        flags.append(("--sequence-parallel", None))
    split_flags, split_note = _pipeline_split(model, cfg)
    flags += split_flags
    if split_note:
        notes.append(split_note)
    flags += [("--micro-batch-size", batch.micro), ("--global-batch-size", batch.global_)]
    flags += _model_flags(model, cfg, notes)
    flags.append(("--bf16", None))
    # The kernel is the layout's choice (Megatron-Core AttnBackend: flash, fused, unfused, local, auto);
    # the dropout is the recipe's (Megatron's --attention-dropout defaults to 0.1, which flash and
    # Transformer Engine's fused kernels apply inside the kernel).
    flags += [("--attention-backend", "flash" if cfg.attention.fused else "unfused"),
              ("--attention-dropout", model.attention_dropout)]
    if (note := fusion_note(cfg, fused_by_default=True)):
        notes.append(note)
    if cfg.precision is Precision.fp8:
        flags.append(("--fp8-format", "hybrid"))
        notes.append("fp8 uses Transformer Engine's default recipe (delayed scaling); pick --fp8-recipe for your GPU")
    if cfg.recompute is Recompute.selective:
        flags.append(("--recompute-granularity", "selective"))
        if cfg.recompute_modules and set(cfg.recompute_modules) != set(DEFAULT_RECOMPUTE_MODULES):
            # Megatron-Core's fine-grained recompute (0.13+, arguments.py --recompute-modules, nargs='*').
            flags.append(("--recompute-modules", tuple(m.value for m in cfg.recompute_modules)))
    elif cfg.recompute is Recompute.full:
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", 1)]
    flags += _sharding_flags(cfg, notes)
    if cfg.bf16_moments:
        notes.append("the plan keeps Adam's moments in bf16: add --use-precision-aware-optimizer --exp-avg-dtype bf16 "
                     "--exp-avg-sq-dtype bf16, or the optimizer states take 4 B/param (before ZeRO sharding) more than planned")
    if cfg.fp8_activations:
        notes.append("the plan stores activations as DeepSeek-V3's framework does (§3.3.3: FP8 SwiGLU inputs with the "
                     "SwiGLU outputs recomputed, one E5M6 attention output): Megatron-LM has no flag for it "
                     "(--activation-func-fp8-input-store covers the SwiGLU inputs only), so its activations take "
                     "more memory than planned")
    if (cfg.tp > 1 or cfg.cp > 1) and cfg.zero < 2:
        notes.append("tensor or context parallelism needs CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs before Blackwell")
    notes.append(f"launch on exactly {cfg.num_gpus} ranks (data-parallel size = world / (tp*pp*cp) ="
                 f" {cfg.num_gpus}/{cfg.tp * cfg.pp * cfg.cp} = {cfg.dp}); add data, tokenizer, optimizer and"
                 " learning-rate flags")
    lines = header("megatron", model, cfg, model_ref)
    lines.append(f'usage: source this file; torchrun ... pretrain_gpt.py "${{{ARRAY}[@]}}" <data and tokenizer flags>')
    return ExportResult(engine="megatron", filename_suggestion=f"{slug(model_ref)}-megatron-args.sh",
                        content=_render(flags, lines), format="args", notes=notes)


def parse_args_text(text: str) -> dict[str, str | None]:
    """Flags of an exported args file: {'--flag': 'value', 'v1 v2' for a list (nargs='*'), or None for a
    switch}. The inverse of _render."""
    body = text.split(f"{ARRAY}=(", 1)[1].rsplit(")", 1)[0]
    tokens = shlex.split(body, comments=True)
    parsed: dict[str, str | None] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        if not flag.startswith("--"):
            raise ValueError(f"expected a flag, got {flag!r}")
        j = i + 1
        while j < len(tokens) and not tokens[j].startswith("--"):
            j += 1
        parsed[flag] = " ".join(tokens[i + 1:j]) if j > i + 1 else None
        i = j
    return parsed


__all__ = ["export_megatron", "parse_args_text"]
