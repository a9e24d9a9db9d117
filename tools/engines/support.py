"""What each engine cannot run: one table, read by the exporters (which refuse the layout with the
message) and by the layout search (`engine=`, which keeps only layouts the engine runs).

A refusal's predicate is written with numpy operators, so it takes one layout (a ParallelConfig,
through `knobs_of`) or a table of many (the search's numpy columns). Sources are in each exporter's
module docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from trainplan.tools.config.codes import PRECISION_CODES, SCHEDULE_BY_CODE, SCHEDULE_CODES
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.core.enums import Precision, Schedule
from trainplan.tools.engines.common import ExportError

HF_TRAINER_ENGINES = ("axolotl", "llamafactory", "trl")
"""Fine-tuning tools built on the Hugging Face Trainer: data-parallel only (DDP, FSDP or DeepSpeed ZeRO)."""
ENGINES = ("megatron", "deepspeed", "torchtitan", "accelerate", *HF_TRAINER_ENGINES)
FP32_PARAM_ENGINES = ("torchtitan", "accelerate")
"""Engines whose parameters stay fp32 and are the optimizer's master copy (Layout.fp32_params, tools/perf/memory.py):
torchtitan shards an fp32 model with FSDP2 (MixedPrecisionPolicy param_dtype bf16, reduce_dtype fp32: "The
optimizer step uses the sharded parameter in the original dtype"), Accelerate runs FSDP2 or DDP with bf16 mixed
precision over fp32 parameters. The others keep bf16 parameters beside an fp32 master in the optimizer:
Megatron's distributed optimizer, DeepSpeed ZeRO, and the Hugging Face Trainer tools as exported here (their
ZeRO is a DeepSpeed file)."""


ENGINE_ATTENTION = {"megatron": "flash", "deepspeed": "flash2", "torchtitan": "flash2", "accelerate": "flash2",
                    **{engine: "flash2" for engine in HF_TRAINER_ENGINES}}
"""Layout.attention as each engine runs it: Megatron runs Transformer Engine's fused attention (cuDNN, the GPU's own
instructions: flash); the others run FlashAttention-2 itself (flash2), written for Ampere's instructions:
torchtitan through PyTorch's F.scaled_dot_product_attention, whose flash backend is FlashAttention-2, and the
Hugging Face models that DeepSpeed, Accelerate and the Trainer tools load with attn_implementation
"flash_attention_2" (common.HF_ATTN_IMPLEMENTATION)."""


ENGINE_LOSS_KERNEL = {"megatron": "fused", "deepspeed": "materialised", "torchtitan": "materialised",
                      "accelerate": "materialised", **{engine: "materialised" for engine in HF_TRAINER_ENGINES}}
"""Layout.loss_kernel as each engine computes the loss (tools/perf/loss.py): Megatron's vocab-parallel cross-entropy
(fused); torchtitan's cross_entropy_loss upcasts the whole logits (`pred.flatten(0, 1).float()`), and the Hugging
Face models that DeepSpeed, Accelerate and the Trainer tools (TRL, Axolotl, LLaMA-Factory) load compute
`logits.float()` in their loss_function (materialised). Axolotl's and LLaMA-Factory's Liger or Cut Cross-Entropy
plugins, and Unsloth, run fused_linear when enabled: set loss_kernel."""


def stores_fp32_params(engine: str) -> bool:
    """Layout.fp32_params as `engine` stores the parameters (FP32_PARAM_ENGINES)."""
    return engine in FP32_PARAM_ENGINES


def engine_knobs(engine: str) -> dict:
    """The Layout knobs an engine decides by how it runs: its parameter storage (FP32_PARAM_ENGINES) and its
    attention kernel (ENGINE_ATTENTION) and its loss kernel (ENGINE_LOSS_KERNEL). A search given the engine takes
    these where the request sets none."""
    return {"fp32_params": stores_fp32_params(engine), "attention": ENGINE_ATTENTION[engine],
            "loss_kernel": ENGINE_LOSS_KERNEL[engine]}


ENGINE_DECIDED_KNOBS = tuple(engine_knobs(ENGINES[0]))
"""The names of the knobs engine_knobs sets (every engine sets the same ones)."""


def param_storage_note(engine: str, cfg: ParallelConfig) -> str | None:
    """The note of an FP32_PARAM_ENGINES export of a full-training ZeRO-3 layout planned with bf16 parameters
    beside an fp32 master: the engine holds less than planned (None otherwise)."""
    if not stores_fp32_params(engine) or cfg.fp32_params or cfg.zero < 3 or is_lora(cfg.method):
        return None
    return (f"{engine} keeps fp32 parameters as the optimizer's master copy (FSDP mixed precision): with ZeRO-3 it "
            "holds 2 B/param of sharded state less than this layout was planned with (bf16 parameters beside an "
            "fp32 master); --fp32-params plans it as it runs")


_1F1B, _INTER = SCHEDULE_CODES[Schedule.one_f_one_b], SCHEDULE_CODES[Schedule.interleaved]
_FP8 = PRECISION_CODES[Precision.fp8]


@dataclass(frozen=True)
class Refusal:
    engine: str
    refuses: Callable[[ModelSpec, SimpleNamespace], np.ndarray]
    message: Callable[[ModelSpec, SimpleNamespace], str]


def _schedule(k) -> str:
    return SCHEDULE_BY_CODE[int(k.schedule)].value


def _model_parallel(m, k) -> np.ndarray:
    """Layouts that split the model (tp, pp, cp or ep > 1), which pure data-parallel engines cannot run."""
    return (k.tp > 1) | (k.pp > 1) | (k.cp > 1) | (k.ep > 1)


def _hybrid(m, k) -> np.ndarray:
    """Layouts with hybrid sharding (dp_shard < dp: ZeRO shard groups replicated dp/dp_shard times)."""
    return k.dp_shard < k.dp


def _no_hybrid_refusal(engine: str, how: str) -> Refusal:
    """Engines whose ZeRO shards over every data-parallel rank: DeepSpeed ZeRO (and the fine-tuning tools'
    DeepSpeed files). ZeRO++'s hpZ (zero_hpz_partition_size) is not hybrid sharding: it keeps a secondary
    copy of the weights inside a node for the backward gathers, while gradients, optimizer states and the
    primary weights stay sharded over all ranks; MiCS, DeepSpeed's hybrid sharding, was removed
    (DeepSpeed 0.19 refuses zero_optimization.mics_shard_size)."""
    return Refusal(engine, _hybrid,
                   lambda m, k: (f"dp_shard={k.dp_shard} (hybrid sharding over dp={k.dp}): {how} shards ZeRO over "
                                 "every data-parallel rank (ZeRO++ hpZ only keeps a second copy of the weights per node, "
                                 "and MiCS was removed): use --engine torchtitan, accelerate or megatron, or drop "
                                 "--dp-shard"))


def _hf_trainer_refusals(engine: str) -> tuple[Refusal, ...]:
    """What the Hugging Face Trainer based fine-tuning tools cannot run: one rule set for all three."""
    return (
        Refusal(engine, _model_parallel,
                lambda m, k: (f"{engine} runs data-parallel layouts only (DDP, FSDP or DeepSpeed ZeRO; tp=pp=cp=ep=1), "
                              f"got tp={k.tp} pp={k.pp} cp={k.cp} ep={k.ep}: use --tp 1 --pp 1 --cp 1 --ep 1, or "
                              "--engine megatron or torchtitan")),
        Refusal(engine, lambda m, k: k.precision == _FP8,
                lambda m, k: f"precision=fp8: the {engine} export writes bf16 training only: use --precision bf16"),
        Refusal(engine, lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
                lambda m, k: f"optimizer offload in {engine} is DeepSpeed ZeRO offload: use --zero 1 or more"),
        _no_hybrid_refusal(engine, f"{engine}'s export writes DeepSpeed ZeRO, which"),
    )


def _adapter_refusal(engine: str, instead: str) -> Refusal:
    """Engines whose launch settings have no LoRA/QLoRA adapters: their export would train the full model."""
    return Refusal(engine, lambda m, k: k.adapter != 0,
                   lambda m, k: (f"method lora/qlora: {engine}'s launch settings have no adapters, so they would train "
                                 f"every weight: use --engine {instead}, or --method full"))


def _param_storage_refusal(engine: str) -> Refusal:
    """Full training planned with fp32 parameters as the master (16 B/param of ZeRO-3 states) on an engine that
    keeps bf16 parameters beside an fp32 master (18): the plan would hold less memory than the run."""
    return Refusal(engine, lambda m, k: (k.fp32_params != 0) & (k.adapter == 0),
                   lambda m, k: (f"fp32_params: {engine} keeps bf16 parameters beside an fp32 master copy in its "
                                 "optimizer, 2 B/param more than the layout was planned with: use --bf16-params, or "
                                 f"--engine {' or '.join(FP32_PARAM_ENGINES)}"))


def query_groups(model: ModelSpec) -> int:
    """The key/value heads tensor parallelism splits (Megatron's num_query_groups): the query heads for MLA,
    whose latent key/value has no groups."""
    return model.num_attention_heads if model.attention_type == "mla" else model.num_kv_heads


def _tp_that_fits(model: ModelSpec, tp) -> int:
    """The largest tp <= `tp` that divides the attention heads and the query groups (the fix to name)."""
    common = math.gcd(model.num_attention_heads, query_groups(model))
    return max(d for d in range(1, min(int(tp), common) + 1) if common % d == 0)


def _splits_heads(m, k) -> np.ndarray:
    return (m.num_attention_heads % k.tp != 0) | (query_groups(m) % k.tp != 0)


def _head_split_refusal(engine: str, why: str) -> Refusal:
    """tp must divide the attention heads and the key/value heads (query groups): `why` says how `engine` fails."""
    def message(m, k) -> str:
        factors = [f"the {n} {what}" for n, what in ((m.num_attention_heads, "attention heads"),
                                                      (query_groups(m), "query groups (key/value heads)"))
                   if n % k.tp != 0]
        return (f"tp={k.tp} does not divide {' nor '.join(factors)} of {m.name}: {why}: use --tp "
                f"{_tp_that_fits(m, k.tp)} (or another divisor of the heads and the query groups)")
    return Refusal(engine, _splits_heads, message)


REFUSALS: tuple[Refusal, ...] = (
    *(_param_storage_refusal(engine) for engine in ENGINES if not stores_fp32_params(engine)),
    _head_split_refusal("megatron", "Megatron-Core's TransformerConfig raises unless num_query_groups % "
                                    "tensor_model_parallel_size == 0, and each rank holds whole heads"),
    _head_split_refusal("torchtitan", "torchtitan shards wq/wk/wv column-wise over the TP ranks and reads each "
                                      "rank's heads from its shard (view(bs, seqlen, -1, head_dim)), so each must "
                                      "hold whole key/value heads"),
    _head_split_refusal("deepspeed", "DeepSpeed AutoTP gives TP rank r kv//tp + (r < kv%tp) key/value heads "
                                     "(DeepSpeed deepspeed/module_inject/tp_shard.py get_shard_size), none to the ranks past the "
                                     "kv-th"),
    _adapter_refusal("megatron", "axolotl, llamafactory or trl"),
    _adapter_refusal("torchtitan", "axolotl, llamafactory or trl"),
    Refusal("megatron", lambda m, k: (k.pp > 1) & (k.schedule != _1F1B) & (k.schedule != _INTER),
            lambda m, k: (f"schedule={_schedule(k)} is not a Megatron-LM schedule (it has 1f1b and interleaved):"
                          " use --schedule 1f1b, or --schedule interleaved with --vpp 2 or more")),
    Refusal("megatron", lambda m, k: (k.zero >= 2) & (k.pp > 1),
            lambda m, k: (f"zero={k.zero} with pp={k.pp}: Megatron-LM shards gradients/weights only through "
                          "Megatron-FSDP, which its guide documents without pipeline parallelism: use --zero 1 or --pp 1")),
    Refusal("megatron", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload in Megatron-LM runs with the distributed optimizer: use --zero 1 or more"),
    Refusal("deepspeed", lambda m, k: k.cp > 1,
            lambda m, k: (f"cp={k.cp}: DeepSpeed has no ring context parallelism (its Ulysses sequence parallelism "
                          "is a different algorithm): use --engine megatron or torchtitan, or --cp 1")),
    Refusal("deepspeed", lambda m, k: k.precision == _FP8,
            lambda m, k: ("precision=fp8: ds_config has no FP8 training setting: use --precision bf16,"
                          " or --engine megatron / torchtitan for FP8")),
    Refusal("deepspeed", lambda m, k: (k.pp > 1) & (k.schedule != _1F1B),
            lambda m, k: (f"schedule={_schedule(k)}: DeepSpeed's pipeline engine runs only its 1F1B-like "
                          "TrainSchedule: use --schedule 1f1b --vpp 1")),
    Refusal("deepspeed", lambda m, k: (k.pp > 1) & (k.zero >= 2),
            lambda m, k: (f"zero={k.zero} with pp={k.pp}: DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 "
                          "only: use --zero 1 or --pp 1")),
    Refusal("deepspeed", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload in DeepSpeed is part of ZeRO: use --zero 1 or more"),
    _no_hybrid_refusal("deepspeed", "DeepSpeed"),
    Refusal("torchtitan", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload in torchtitan is FSDP CPU offload: use --zero 1 or more"),
    Refusal("torchtitan", lambda m, k: (k.ep > 1) & (k.zero == 0) & (k.cp % k.ep != 0),
            lambda m, k: (f"ep={k.ep}: torchtitan takes expert-parallel ranks from the FSDP group (dp_shard*cp), "
                          f"which is cp={k.cp} with zero=0: use --zero 1 or more")),
    Refusal("accelerate", _model_parallel,
            lambda m, k: (f"accelerate export covers pure FSDP/DDP layouts (tp=pp=cp=ep=1), got tp={k.tp} pp={k.pp} "
                          f"cp={k.cp} ep={k.ep}: use --engine megatron, torchtitan or deepspeed")),
    Refusal("accelerate", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload needs sharding in accelerate (FSDP): use --zero 1 or more"),
    *(refusal for engine in HF_TRAINER_ENGINES for refusal in _hf_trainer_refusals(engine)),
)


def knobs_of(cfg: ParallelConfig) -> SimpleNamespace:
    """A resolved layout as the refusals read it."""
    return SimpleNamespace(tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep, zero=cfg.zero, dp=cfg.dp,
                           dp_shard=cfg.dp_shard_size,
                           schedule=SCHEDULE_CODES[cfg.schedule], precision=PRECISION_CODES[cfg.precision],
                           optimizer_offload=int(cfg.optimizer_offload), adapter=int(is_lora(cfg.method)),
                           fp32_params=int(cfg.fp32_params))


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ExportError(f"engine='{engine}' is not one of: {', '.join(ENGINES)}")


def learned_positions(model: ModelSpec) -> int:
    """Positions a learned-position model can run (0: no learned table): its max_seq_len, which the table's
    rows hold (OPT's table has 2 rows more, an offset, tools/hardware/hf.py)."""
    return model.max_seq_len if model.learned_position_embeddings else 0


def refuse_positions(model: ModelSpec, seq: int) -> None:
    """A sequence longer than a learned position table: Megatron asserts max_position_embeddings >= seq_length
    (NVIDIA/Megatron-LM megatron/training/arguments.py, validate_args) and would build a larger table than the model's; a Hugging Face model
    (DeepSpeed, Accelerate, the Trainer tools) indexes its position embedding past the table."""
    positions = learned_positions(model)
    if positions and seq > positions:
        raise ExportError(f"seq={seq} is beyond the {positions} learned positions of {model.name}: its position "
                          f"table has no rows past {positions}, and the engines index or assert on it: use --seq "
                          f"{positions} or less, or a model config whose table holds {seq} positions "
                          "(max_position_embeddings / n_positions)")


def refuse(engine: str, model: ModelSpec, cfg: ParallelConfig) -> None:
    """Raise ExportError with the first refusal of `engine` that the layout meets, or for a sequence past the
    model's learned positions (refuse_positions)."""
    _check_engine(engine)
    refuse_positions(model, cfg.seq)
    knobs = knobs_of(cfg)
    for refusal in REFUSALS:
        if refusal.engine == engine and bool(refusal.refuses(model, knobs)):
            raise ExportError(refusal.message(model, knobs))


def runs(engine: str, model: ModelSpec, knobs) -> np.ndarray:
    """True where `engine` runs the layouts: knobs holds numpy columns tp, pp, cp, ep, zero, dp, dp_shard,
    schedule, precision, optimizer_offload, adapter (1 for lora/qlora) and fp32_params (codes as in codes.py)."""
    _check_engine(engine)
    ok = np.ones(np.broadcast(knobs.tp, knobs.pp, knobs.zero, knobs.schedule).shape, dtype=bool)
    for refusal in REFUSALS:
        if refusal.engine == engine:
            ok &= ~np.asarray(refusal.refuses(model, knobs), dtype=bool)
    return ok
