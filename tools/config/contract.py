"""The typed contract: Job, Layout and SearchOptions. Every knob is defined here once (the result models,
`Estimate` and its parts, in tools/config/results.py; the field metadata Cli, NOT_LEAN and Knob in
tools/config/fields.py).

Data flow (ARCHITECTURE.md draws it):

    request text -> PlanRequest (agent/request.py) -> Job + Layout (this module)
      -> resolve_config (tools/config/layout.py: validates, derives dp, fills seq/schedule) -> ParallelConfig
      -> evaluate (tools/perf/estimate.py: memory, step time, cost) -> Estimate -> PlanReport (agent/report.py)

- `Job`: what to train and on what (model, GPU, count, tokens, price, goodput, cluster overrides).
- `Layout`: every parallelism, memory and kernel knob, as a user gives it (null: the default rule).
- `ParallelConfig`: a Layout with every knob resolved (dp derived, seq and schedule filled in); what
  the calculators read.
- `Estimate`: the result of one layout (params, memory_gib, fits/reason, time, training, config, notes);
  `trainplan estimate --json` is `Estimate.model_dump(mode="json")`.

What derives from these fields (nothing else lists the knobs):
- the CLI options of `estimate`, `export` and `search` (trainplan/cli_common.py `options`),
- the tool argument models of `calculate_memory`, `estimate_step_time`, `search_configs`, `submit_plan`
  (agent/tool_args.py builds them with `optional_model`) and the planner's PlanRequest (agent/request.py),
- the `config` echoed in every result (`Config` below), `estimate --from` / `export --from`, the
  report's launch settings and `trainplan estimate`'s readable view,
- the `trainplan.estimate` / `trainplan.search` / `trainplan.plan` keyword parameters, written out for
  IDEs in trainplan/_api.py, which `python -m trainplan.api_gen --write` generates from these models
  (tests/test_api_gen.py fails when it is stale).

The result models (tools/config/results.py) are read as attributes (`estimate.time.step_s`).

To add a knob:
1. Add a field to `Layout` (or `Job`) below: type, default, description. The description is the CLI
   help, the tool argument description and the API documentation; say what null/the default means.
   Annotate it with `Cli(...)` only when the flag is not simply `--field-name` (see `Cli`), with NOT_LEAN
   when the lean tool set leaves it out, and with `Knob(...)` for the knob lists it belongs to (searched,
   chosen by the search, a parallel size, stated by a planning request, ...; see `Knob`): SEARCHED_KNOBS,
   PARALLEL_SIZES, agent/request.py PINS and the rest are derived from these marks.
2. Make it act: validate it in `tools/config/layout.resolve_config` (which passes every Layout field through)
   and read `cfg.<name>` in the calculator it changes (memory.py, step.py, ...), and in the exporter
   that must write it.
3. Run `python -m trainplan.api_gen --write`: it regenerates the public keyword signatures
   (trainplan/_api.py) from the fields; tests/test_api_gen.py fails if you forget. No hand edit.
Nothing else: the CLI flag, the tool argument, `export --from` and the `config` echo follow. The hand
edits stay in at most 3 files (this one, layout.py and the calculator or exporter it changes); trainplan/_api.py
is rewritten by the command.

Defaults that every tool shares (a null means the same thing everywhere):
- seq: the model's maximum sequence length capped at DEFAULT_SEQ_CAP (`default_seq`);
- gbs: `plan_defaults.default_gbs` (DEFAULT_GBS_RULE) when a step time is needed.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

from trainplan.tools.config.engines import ENGINE_LIST
from trainplan.tools.config.fields import NOT_LEAN, Cli, Knob, described, fields_of, knob_names
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT, DEFAULT_GBS_RULE, DEFAULT_HEADROOM, EVIDENCE_MARGIN, FINETUNE_SEQ, default_gbs
from trainplan.tools.config.resolve import DEFAULT_LORA_RANK
from trainplan.tools.core.enums import Attention, Dispatcher, GroupedGemm, Launch, LoraDropoutPosition, LoraTargets, LossKernel, Method, Objective, OffloadModule, Precision, Recompute, RecomputeModule, Schedule

# --- the shared defaults -------------------------------------------------------------------------
# gbs and the search/plan headroom: plan_defaults (the published-runs batch rule, DEFAULT_HEADROOM).

DEFAULT_SEQ_CAP = 8192
"""seq, when not given: the model's maximum sequence length, capped here (pretraining runs train at
4K-8K tokens and extend the context afterwards; Llama 3 405B pretrained at 8K)."""
DEFAULT_SEQ_RULE = (f"the model's maximum sequence length, capped at {DEFAULT_SEQ_CAP} ({FINETUNE_SEQ} with method "
                    "lora or qlora, a fine-tuning default)")

def default_seq(max_seq_len: int, fine_tune: bool = False) -> int:
    """The sequence length when none is given; see DEFAULT_SEQ_RULE (plan_defaults.FINETUNE_SEQ for a fine-tune)."""
    return min(max_seq_len, FINETUNE_SEQ if fine_tune else DEFAULT_SEQ_CAP)


# --- the numbers of a job, checked once ----------------------------------------------------------

MIN_LINK_GB_S = 0.1
"""Slowest link bandwidth a job may give, GB/s per GPU per direction (1 Gb Ethernet carries 0.125 GB/s)."""
POSITIVE_JOB_NUMBERS = ("price", "gpus_per_node", "intra_node_bw", "inter_node_bw", "deadline_days", "budget_usd")
"""Job and search numbers that must be finite and above zero when given."""


MAX_GPUS = 2**20
"""The most GPUs a request may name (1,048,576: over ten times the largest published training cluster);
beyond it a count is a typo, and the vectorised search's int64 products stay exact."""
MAX_SEQUENCES_OR_TOKENS = 2**26
"""The largest seq, mbs or gbs a request may name (67M: past any published context or batch)."""


class Job(BaseModel):
    """What to train and on what: the model, the hardware, the token budget and its price."""

    model: Annotated[str, Knob(asked=0)] = Field(description="catalog model name (llama3-8b, llama3-70b, llama3-405b, deepseek-v3, "
                                   "gpt3-175b, ...; see list_catalog) or a path to an HF config.json")
    gpu: Annotated[str, Knob(asked=0)] = Field(description="catalog GPU name (h100-sxm-80gb, h800-sxm-80gb, a100-sxm-80gb, h200-sxm-141gb, "
                                 "b200, gb200-nvl72, mi300x, l40s, rtx-4090, ...; see list_catalog; aliases like h100 "
                                 "or mi300x work) or a path to a GPU JSON")
    gpus: Annotated[int, Knob(asked=0)] = Field(description="total GPUs")
    tokens: Annotated[float | str | None, Cli(as_text=True), Knob(one_step=False, asked=2)] = Field(
        default=None, description="training tokens, a number (15.6e12) or text with a suffix ('15T', '300B'); "
                                  "needed for steps, days and cost; null: no training cost")
    price: Annotated[float | None, Knob(one_step=False, asked=2)] = Field(default=None, description="dollars per GPU-hour; null: the GPU's catalog price")
    goodput: Annotated[float | None, NOT_LEAN, Knob(one_step=False, asked=2)] = Field(
        default=None, description=f"share of wall-clock time that trains, in (0, 1]; null: {DEFAULT_GOODPUT} "
                                  "(Llama 3 reports more than 90% effective training time)")
    gpus_per_node: Annotated[int | None, NOT_LEAN, Knob(asked=1)] = Field(
        default=None, description="GPUs per NVLink/xGMI domain (PCIe cards: per host); null: the GPU's catalog value")
    intra_node_bw: Annotated[float | None, NOT_LEAN] = Field(
        default=None, description="NVLink/xGMI (PCIe cards: PCIe) GB/s per GPU per direction; null: the GPU's "
                                  "catalog value")
    inter_node_bw: Annotated[float | None, NOT_LEAN] = Field(
        default=None, description="network GB/s per GPU per direction; null: the GPU's catalog value")
    headroom_gib: Annotated[float | None, NOT_LEAN] = Field(
        default=None, description="GiB per GPU to keep free when deciding fits; null: 0 for one layout, and "
                                  f"{DEFAULT_HEADROOM:.0%} of the GPU's memory for search and plan")
    ramp_start_gbs: Annotated[int | None, Knob(one_step=False, searchable=False)] = Field(
        default=None, description="batch-size ramp: the first global batch, sequences (with ramp_tokens); "
                                  "null: no ramp")
    ramp_tokens: Annotated[float | str | None, Cli(as_text=True), Knob(one_step=False, searchable=False)] = Field(
        default=None, description="batch-size ramp: tokens over which gbs grows linearly to gbs, e.g. 250B "
                                  "(with ramp_start_gbs); null: no ramp")


# --- the layout ----------------------------------------------------------------------------------


def _comma_separated(value: Any) -> Any:
    """A module list written as the command line writes it, comma-separated ("mlp,core_attn"), read as a list
    wherever it comes from (a tool call's JSON too)."""
    return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


CommaSeparated = BeforeValidator(_comma_separated)


class Layout(BaseModel):
    """Every parallelism, memory and kernel knob, as given; None means the default rule stated in
    the description. dp is never given: it is gpus / (tp*pp*cp)."""

    tp: Annotated[int, Knob(searched=True, size=True, pin=True, asked=3)] = Field(default=1, ge=1, description="tensor-parallel size (with sequence parallelism)")
    pp: Annotated[int, Knob(searched=True, size=True, pin=True, asked=3)] = Field(default=1, ge=1, description="pipeline-parallel size")
    cp: Annotated[int, Knob(searched=True, size=True, pin=True, asked=3)] = Field(default=1, ge=1, description="context-parallel size")
    ep: Annotated[int, Knob(searched=True, size=True, pin=True, asked=3)] = Field(default=1, ge=1, description="expert-parallel size (MoE models only); etp*ep must divide "
                                                 "tp*cp*dp (MoE Parallel Folding)")
    etp: Annotated[int | None, NOT_LEAN, Knob(size=True)] = Field(default=None, ge=1, description="expert tensor-parallel size (Megatron "
                            "--expert-tensor-parallel-size); null: equal to tp")
    vpp: Annotated[int, Knob(searched=True, pin=True, asked=3)] = Field(default=1, ge=1, description="virtual pipeline stages per rank (>1: the interleaved schedule)")
    zero: Annotated[int, Knob(searched=True, pin=True, asked=3)] = Field(default=1, ge=0, le=3, description="ZeRO stage 0-3: 1 shards optimizer states, 2 also "
                                                         "gradients, 3 also weights (FSDP)")
    dp_shard: Annotated[int | None, NOT_LEAN, Knob(searched=True, size=True)] = Field(
        default=None, ge=1, description="data-parallel ranks one ZeRO shard spans (hybrid sharding, HSDP): what "
        "zero shards (1: optimizer states, 2: also gradients, 3: also weights) is split over dp_shard*cp ranks and "
        "replicated over dp/dp_shard groups, whose gradient shards are all-reduced (PyTorch FSDP HYBRID_SHARD, "
        "torchtitan data_parallel_shard_degree, Megatron --num-distributed-optimizer-instances dp/dp_shard); must "
        "divide dp, needs zero >= 1; null: dp (every data-parallel rank, full sharding)")
    mbs: Annotated[int, Knob(searched=True, pin=True, asked=3)] = Field(default=1, ge=1, description="micro-batch size, sequences")
    gbs: Annotated[int | None, Knob(job_wide=True, asked=1)] = Field(default=None, ge=1, description="global batch size, sequences; sets the micro-batches "
                                                            f"per step, gbs / (dp*mbs); null: {DEFAULT_GBS_RULE}")
    seq: Annotated[int | None, Knob(job_wide=True, asked=0)] = Field(default=None, ge=1, description=f"sequence length, tokens; null: {DEFAULT_SEQ_RULE}")
    recompute: Annotated[Recompute, Knob(searched=True, pin=True, asked=3)] = Field(default=Recompute.selective, description="activation recompute: none (keep "
                                 "all), selective (recompute the attention core), full (rerun each layer's forward)")
    recompute_modules: Annotated[tuple[RecomputeModule, ...] | None, Cli(as_text=True), CommaSeparated, Knob(chosen=True)] = Field(
        default=None, description="with recompute=selective, the modules to recompute (Megatron --recompute-modules: "
                                  "core_attn, layernorm, mla_up_proj, moe_act, mlp, moe; comma-separated on the "
                                  "command line); DeepSeek-V3 recomputed layernorm, mla_up_proj and moe_act; null: "
                                  "core_attn (Megatron's default)")
    schedule: Annotated[Schedule | None, Knob(searched=True, pin=True, asked=3)] = Field(default=None, description="pipeline schedule: gpipe, 1f1b, interleaved "
                                      "(needs vpp>1), zb-h1, dualpipe (even pp); null: 1f1b, or interleaved when vpp>1")
    precision: Annotated[Precision, Knob(job_wide=True, asked=2)] = Field(default=Precision.bf16, description="GEMM precision: bf16 or fp8 (Hopper and newer)")
    attention: Annotated[Attention, Knob(pin=True, asked=5)] = Field(default=Attention.flash, description="attention kernel: flash (fused, causal blocks "
                                 "skipped; the GPU's own, e.g. Transformer Engine), flash2 (FlashAttention-2, as "
                                 "PyTorch SDPA runs it: Ampere instructions on newer GPUs), eager (unfused s x s "
                                 "scores, 2021-22 Megatron) or flash1 (FlashAttention 1 or its Triton port, MPT 2023); a "
                                 "search given an engine and no value takes the engine's (tools/engines/support.py "
                                 "ENGINE_ATTENTION)")
    fused_kernels: Annotated[bool, Cli("--fused-kernels/--unfused-kernels"), NOT_LEAN, Knob(pin=True, asked=5)] = Field(
        default=True, description="fused norm, rotary and activation kernels (Megatron, Transformer Engine, "
                                  "torch.compile); false: PyTorch eager ops, as Hugging Face models or FSDP without "
                                  "torch.compile run them; a search given an engine and no value takes the engine's "
                                  "(tools/config/engines.py)")
    launch: Annotated[Launch, NOT_LEAN] = Field(default=Launch.eager, description="how the host issues each layer's kernels: eager "
                           "(PyTorch eager, every op pays host dispatch and launch, so small kernels wait on the "
                           "host), compile (torch.compile: only the generated kernels and collectives are issued) or "
                           "cuda_graphs (one graph replay per layer pass: the host floor is gone); a search given an engine "
                           "and no value takes the engine's (tools/config/engines.py)")
    sequence_parallel: Annotated[bool, Cli("--sequence-parallel/--no-sequence-parallel"), NOT_LEAN] = Field(
        default=True, description="Megatron sequence parallelism with tp>1")
    optimizer_offload: Annotated[bool, NOT_LEAN] = Field(default=False, description="ZeRO-Offload: optimizer states and step on the CPU")
    bf16_grads: Annotated[bool, Cli("--bf16-grads/--fp32-grads"), NOT_LEAN] = Field(
        default=False, description="bf16 gradients (DeepSpeed's 16 B/param) instead of an fp32 buffer")
    bf16_moments: Annotated[bool, NOT_LEAN, Knob(chosen=True, stored=True)] = Field(
        default=False, description="Adam moments m and v in bf16, master weights in fp32: 8 B/param of optimizer "
                                   "states instead of 12 (DeepSeek-V3 §3.3.3; Megatron --use-precision-aware-optimizer "
                                   "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)")
    pure_bf16: Annotated[bool, Cli("--pure-bf16/--mixed-precision"), NOT_LEAN, Knob(pin=True, asked=5)] = Field(
        default=False, description="every model state in bf16 and no fp32 master copy: the optimizer updates the bf16 "
                                   "parameters in place, their gradients are bf16 and the Adam moments take their "
                                   "dtype (torch.optim.Adam's zeros_like): 2 + 2 + 4 = 8 B/param instead of 18, as "
                                   "torchtune's dtype bf16 recipes and NeMo AutoModel's own model classes (cast to bf16, "
                                   "torch.optim.Adam) train; false: mixed precision with an fp32 master (fp32_params "
                                   "says where it lives)")
    optimizer_8bit: Annotated[bool, NOT_LEAN, Knob(pin=True, asked=5)] = Field(
        default=False, description="Adam's two moments in 8 bits with a block-wise fp32 absmax (bitsandbytes AdamW8bit "
        "and PagedAdamW8bit; Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization): 2.004 B/param of "
        "moments in place of 8 (fp32) or 4 (pure bf16), the master copy as it was, and an Adam step that streams "
        "12 B/param less; the Hugging Face Trainer tools write optim adamw_bnb_8bit (paged_adamw_8bit with qlora) "
        "and the other engines refuse it")
    fp32_params: Annotated[bool, Cli("--fp32-params/--bf16-params"), NOT_LEAN] = Field(
        default=False, description="the parameters are kept in fp32 and are the optimizer's master copy, cast to "
                                   "bf16 only as they are all-gathered for compute: 4 B/param where a bf16 copy and "
                                   "an fp32 master take 2 + 4, so ZeRO-3 holds 16 B/param of sharded states (14 with "
                                   "bf16_grads) instead of 18; as PyTorch FSDP and FSDP2 mixed precision run "
                                   "(Composer/llm-foundry, fms-fsdp, torchtitan, Accelerate); false: bf16 parameters "
                                   "beside an fp32 master in the optimizer, as Megatron's distributed optimizer and "
                                   "DeepSpeed ZeRO store them (tools/perf/memory.py); a search given an engine and no "
                                   "value takes the engine's (tools/engines/support.py FP32_PARAM_ENGINES)")
    fp8_activations: Annotated[bool, NOT_LEAN, Knob(chosen=True, stored=True)] = Field(
        default=False, description="DeepSeek-V3's low-precision activation storage (§3.3.3), with precision=fp8: the "
                                   "MoE SwiGLU inputs cached in FP8 and their outputs recomputed, the attention output "
                                   "kept as one 12-bit E5M6 copy that both the attention backward and the output "
                                   "projection read, each cached tensor with an fp32 scale per 1x128 tile (§3.3.2)")
    tp_comm_overlap: Annotated[bool, NOT_LEAN] = Field(default=False, description="overlap TP/SP all-gathers and reduce-scatters with "
                                                             "the GEMMs (Megatron --tp-comm-overlap)")
    overlap_grad_reduce: Annotated[bool, Cli("--overlap-grad-reduce/--no-overlap-grad-reduce"), NOT_LEAN] = Field(
        default=True, description="data-parallel gradient reduction and ZeRO's weight gathers run beside the "
                                  "backward and forward (Megatron-Core --overlap-grad-reduce --overlap-param-gather, "
                                  "PyTorch DDP and FSDP, DeepSpeed ZeRO overlap_comm); false: after the step's last "
                                  "backward, as Megatron-LM in 2021-22 (Korthikanti et al. 2022 §6.3) and DeepSpeed's "
                                  "pipeline engine (TrainSchedule: ReduceGrads after the last micro-batch) ran them")
    blocking_p2p: Annotated[bool, Cli("--blocking-p2p/--async-p2p"), NOT_LEAN] = Field(
        default=False, description="pipeline sends and receives block their rank before each compute step, one "
                                   "transfer after another, as DeepSpeed's pipeline engine runs them "
                                   "(deepspeed/runtime/pipe/schedule.py TrainSchedule: a forward step receives the "
                                   "activation and sends the previous gradient, a backward step sends the previous "
                                   "activation and receives the gradient); false: a transfer delays only the "
                                   "operation waiting for it")
    offload_modules: Annotated[tuple[OffloadModule, ...] | None, Cli(as_text=True), CommaSeparated, NOT_LEAN] = Field(
        default=None, description="modules whose saved activations are copied to host memory after their forward and "
                                  "reloaded for their backward (Megatron --fine-grained-activation-offloading "
                                  "--offload-modules: attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, "
                                  "moe_act; comma-separated on the command line); null: none")
    deallocate_pipeline_outputs: Annotated[bool, Cli("--deallocate-pipeline-outputs/--keep-pipeline-outputs"), NOT_LEAN] = Field(
        default=True, description="once a pipeline stage has sent its output to the next, keep only its autograd node, "
                                  "not its data (Megatron's deallocate_pipeline_outputs, which Megatron training always "
                                  "sets); false: every in-flight chunk keeps its 2sbh/t output until its backward")
    save_mlp_act_output: Annotated[bool, Cli("--save-mlp-act-output/--recompute-mlp-act-output"), NOT_LEAN] = Field(
        default=True, description="the dense MLP's activation output (SwiGLU's silu(gate)*up, the down-projection "
                                  "input) is saved for the backward, as Megatron's fused bias_swiglu before Transformer "
                                  "Engine's Linear does; false: a fused SwiGLU kernel saves only the gate and up "
                                  "outputs and its backward recomputes the product, as flash attention recomputes its "
                                  "softmax (xformers.ops.swiglu, Meta's kernel library): 2sbf/t fewer bytes per layer "
                                  "and micro-batch, no recomputed GEMM")
    method: Annotated[Method, Knob(fine_tuning=True, asked=6)] = Field(default=Method.full, description="what is trained: full (every weight), lora (low-rank "
                           "adapters beside a frozen bf16 base) or qlora (adapters beside a frozen 4-bit NF4 base)")
    lora_rank: Annotated[int | None, Knob(fine_tuning=True, asked=6)] = Field(default=None, ge=1, description="adapter rank r with method lora or qlora; null: "
                                  f"{DEFAULT_LORA_RANK} (full: must stay null)")
    lora_targets: Annotated[LoraTargets | None, Knob(fine_tuning=True, asked=6)] = Field(default=None, description="linear layers with adapters: attention "
                                             "(q, k, v, o), qv (q, v) or all-linear (every one); null: all-linear")
    lora_alpha: Annotated[float | None, NOT_LEAN, Knob(pin=True, asked=6)] = Field(
        default=None, gt=0, description="LoRA's alpha with method lora or qlora: the update is scaled by alpha / rank, "
        "which changes no memory or time, and the launch settings write it (PEFT's lora_alpha); null: 2 x rank")
    lora_dropout: Annotated[float, NOT_LEAN, Knob(pin=True, asked=6)] = Field(
        default=0.0, ge=0.0, lt=1.0, description="dropout probability on each adapter's input (PEFT's LoraConfig "
        "lora_dropout; LoRA and QLoRA only): above 0 every adapted module saves its dropout's bf16 output and 1 B "
        "mask for the backward and runs the dropout kernel (tools/perf/finetune_tensors.py dropout_changes); 0: PEFT's "
        "default, an nn.Identity")
    lora_dropout_position: Annotated[LoraDropoutPosition, NOT_LEAN] = Field(
        default=LoraDropoutPosition.pre, description="where each adapter's dropout acts with lora_dropout above 0: pre "
        "(on the adapter's input, as PEFT and torchtune: each adapted module saves its dropped bf16 copy of its input "
        "and a 1 B mask) or post (on the adapter's output, NeMo AutoModel's default: lora_A reads the module's own "
        "input, and only a 1 B mask per output element is saved)")
    double_quant: Annotated[bool | None, NOT_LEAN] = Field(
        default=None, description="qlora's NF4 block scales quantised again (bitsandbytes bnb_4bit_use_double_quant): "
        "4.127 bits per base weight and two dequantisation kernels; false: fp32 scales, 4.5 bits and one kernel "
        "(transformers' BitsAndBytesConfig default); null: true, as the QLoRA paper, Axolotl and LLaMA-Factory run "
        "it (qlora only)")
    fp32_norms: Annotated[bool | None, NOT_LEAN] = Field(
        default=None, description="the norms hold fp32 weights, as PEFT's prepare_model_for_kbit_training leaves a "
        "k-bit model (TRL's SFTTrainer calls it and casts only the embedding and head back): the norm outputs, the "
        "4-bit linears' outputs, the SwiGLU and the residual stream run in fp32, and each linear saves its own bf16 "
        "cast of its input (tools/perf/finetune_tensors.py fp32_norm_changes); null: true for qlora, false otherwise")
    loss_kernel: Annotated[LossKernel | None, NOT_LEAN, Knob(pin=True, asked=5)] = Field(
        default=None, description="how the LM head's logits and the loss are computed (tools/perf/loss.py): fused "
        "(Megatron's vocab-parallel cross-entropy, one fp32 softmax made and turned into the gradient in place: 4 B "
        "per token per vocabulary entry), materialised (the Hugging Face models and torchtitan: the whole logits "
        "upcast to fp32, the log-softmax saved, its gradient apart: 12 B), chunked (torchtune's "
        "CEWithChunkedOutputLoss: 6.5 B) or fused_linear (Liger, Cut Cross-Entropy, Unsloth: the logits never "
        "whole, 0 B); null: fused for full training, materialised for lora and qlora (the Hugging Face stacks); "
        "a search given an engine and no value takes the engine's (tools/engines/support.py ENGINE_LOSS_KERNEL)")
    document_tokens: Annotated[int | None, NOT_LEAN, Knob(pin=True, asked=5)] = Field(
        default=None, ge=1, description="mean tokens of the documents packed into each sequence when attention is "
        "masked to each document (FlexAttention's block-causal mask in torchtune's packed datasets; FlashAttention's "
        "variable-length kernels under TRL's padding_free, Axolotl's sample_packing and LLaMA-Factory's neat_packing): "
        "a fused kernel then runs each query over its own document only, so its attention work is that of this span, "
        "not the sequence (unfused attention still computes every masked score); null or at least seq: one document "
        "per sequence, causal over all of it")
    dispatcher: Annotated[Dispatcher, NOT_LEAN, Knob(pin=True, asked=4)] = Field(default=Dispatcher.alltoall, description="MoE token dispatcher: alltoall or "
                                   "allgather (Megatron --moe-token-dispatcher-type; both send BF16 tokens), or "
                                   "deepep (DeepSeek-V3's DeepEP kernels: FP8 dispatch and BF16 combine under "
                                   "precision fp8)")
    capacity_factor: Annotated[float | None, NOT_LEAN] = Field(
        default=None, gt=0, description="MoE expert capacity factor, experts padded to capacity (Megatron "
        "--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity); null: dropless")
    force_balance: Annotated[bool, NOT_LEAN] = Field(default=False, description="router forced to balance tokens over experts, as "
                                "benchmarks do (Megatron --moe-router-force-load-balancing); false: learned routing "
                                "and its load imbalance")
    grouped_gemm: Annotated[GroupedGemm, NOT_LEAN] = Field(default=GroupedGemm.per_expert, description="expert GEMMs: per_expert "
                                      "(host-issued loop, Megatron/Transformer Engine GroupedLinear) or fused (one "
                                      "device kernel, e.g. DeepGEMM)")
    moe_a2a_overlap: Annotated[bool, NOT_LEAN] = Field(
        default=False, description="Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, with "
        "--delay-wgrad-compute): the forward of one micro-batch runs beside the backward of another, layer by layer, "
        "so each one's expert-parallel all-to-all hides under the other's compute (megatron/core/pipeline_parallel/"
        "combined_1f1b.py); needs ep > 1, the alltoall or deepep dispatcher, no full recompute and, with pp > 1, "
        "the interleaved schedule (transformer_config.py)")



class ParallelConfig(Layout):
    """One layout, every knob resolved (tools/config/layout.resolve_config): dp derived, seq and schedule set."""

    dp: int = Field(default=1, ge=1, description="data-parallel size, gpus / (tp*pp*cp)")
    seq: int = described(Layout, "seq", ge=1)
    schedule: Schedule = described(Layout, "schedule", default=Schedule.one_f_one_b)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def num_microbatches(self) -> int:
        """m = gbs / (dp * mbs); 1 when no global batch is set."""
        if self.gbs is None:
            return 1
        return self.gbs // (self.dp * self.mbs)

    @property
    def dp_shard_size(self) -> int:
        """Data-parallel ranks one ZeRO shard spans: dp_shard, or dp when unset (full sharding)."""
        return self.dp_shard or self.dp

    @property
    def dp_replicas(self) -> int:
        """Replicas of each ZeRO shard (hybrid sharding): dp / dp_shard_size; 1 with full sharding."""
        return self.dp // self.dp_shard_size

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size: etp, or tp when unset (Megatron's default)."""
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size: tp * cp * dp / (etp * ep). MoE Parallel Folding lays the expert
        grid etp x ep x edp over the same tp x cp x dp ranks of each pipeline stage (moe.py)."""
        return max(1, self.tp * self.cp * self.dp // (self.expert_tp * self.ep))

    def layout(self) -> dict[str, Any]:
        """The Layout fields of this config (what estimate/export take back to reproduce it)."""
        return {name: getattr(self, name) for name in Layout.model_fields}


PARALLEL_SIZES = knob_names(Layout, size=True)
"""The Layout parallel sizes (Knob.size): check_job_numbers holds each to the GPU count."""
FINE_TUNING_KNOBS = knob_names(Layout, fine_tuning=True)
"""The Layout knobs that choose what is trained (full weights, or LoRA/QLoRA adapters of a rank on some
targets): a plan that leaves them out plans full training."""

SEARCHED_KNOBS = knob_names(Layout, searched=True)
"""The Layout knobs a search varies unless pinned (tools/search/driver.py Pins holds one slot per name)."""
SEARCH_FIXED_KNOBS = knob_names(Layout, searched=False)
"""The Layout knobs a search takes as given, every one it does not vary (null: the shared default
rule); tools/search/space.FIXED_DEFAULTS resolves them."""
SEARCH_CHOSEN_KNOBS = knob_names(Layout, chosen=True)
"""Fixed knobs a search chooses per layout when the request leaves them null (tools/search/recipes.py)."""
SEARCH_CHOSEN_RULE = ("the search chooses per layout: the fewest recompute modules that fit (cheapest per GiB "
                      "first), and with precision fp8 DeepSeek-V3's low-precision storage (bf16_moments with "
                      "fp8_activations) only where a layout needs it to fit")
"""What null means for SEARCH_CHOSEN_KNOBS in a search (CLI help and tool schema)."""


def search_chosen_description(name: str, layout: type[Layout] = Layout) -> str:
    """A SEARCH_CHOSEN_KNOBS field's description for a search: its meaning, then SEARCH_CHOSEN_RULE."""
    meaning = (layout.model_fields[name].description or "").split("; null:")[0]
    return f"{meaning}; null: {SEARCH_CHOSEN_RULE}"


SEARCH_JOB_EXCLUDED = knob_names(Job, searchable=False)
"""Job fields a search does not take (a batch ramp is priced by estimate)."""


def search_fields(job: type[Job] = Job, layout: type[Layout] = Layout,
                  options: type[BaseModel] | None = None) -> dict[str, Any]:
    """The search's inputs, name -> FieldInfo: the Job (less the ramp), the Layout knobs it searches or
    fixes, and the SearchOptions. `trainplan search`, the search_configs tool and trainplan.search take these.
    The models are parameters so that tests/test_knob_registry.py can pass a Layout with a new knob."""
    fields = fields_of(job, exclude=knob_names(job, searchable=False))
    fields.update({name: layout.model_fields[name]
                   for name in (*knob_names(layout, searched=True), *knob_names(layout, searched=False))})
    fields.update((options or SearchOptions).model_fields)
    return fields


class SearchOptions(BaseModel):
    """What a search optimises and may use, beyond the Job and the Layout knobs it searches."""

    objective: Annotated[Objective, Knob(asked=0)] = Field(default=Objective.throughput, description="what to rank by: throughput (most "
                                 "tokens/s), cost (fewest dollars; GPU-seconds per step without tokens), time "
                                 "(fewest days)")
    top_k: int = Field(default=5, ge=1, description="how many of the best layouts to return")
    max_gpus: Annotated[int | None, NOT_LEAN, Knob(asked=0)] = Field(default=None, description="also try other GPU counts: max_gpus and halvings of it "
                                 "down to what the model needs, plus gpus; null: exactly gpus")
    deadline_days: Annotated[float | None, Knob(asked=0)] = Field(default=None, description="reject layouts whose training takes longer than "
                                        "this many days (needs tokens); null: no deadline")
    budget_usd: Annotated[float | None, Cli("--budget"), Knob(asked=0)] = Field(
        default=None, description="reject layouts whose training costs more dollars than this (needs tokens); "
                                  "null: no budget")
    allow_cross_node_tp: Annotated[bool, NOT_LEAN] = Field(default=False, description="allow tp larger than a node")
    evidence_margin: Annotated[float, NOT_LEAN] = Field(default=EVIDENCE_MARGIN, ge=0, description="how much better on the objective a "
                                   "layout outside the evals' evidence (tools/search/evidence.py: CP at short sequence, "
                                   "DualPipe on dense, uneven PP, ...) must be than the best inside it to lead")
    pareto: bool = Field(default=False, description="also report the days/cost front across GPU counts (needs tokens)")
    engine: Annotated[str | None, Knob(asked=0)] = Field(default=None, description=f"keep only layouts this engine runs: {ENGINE_LIST} (tools/config/engines.py); null: any layout")


__all__ = ["DEFAULT_GBS_RULE", "DEFAULT_GOODPUT", "DEFAULT_SEQ_CAP", "DEFAULT_SEQ_RULE", "Job", "Layout", "Objective",
           "SEARCHED_KNOBS", "SearchOptions", "search_fields", "ParallelConfig", "Attention", "OffloadModule", "Precision",
           "Recompute", "RecomputeModule", "Schedule", "default_gbs", "default_seq"]
