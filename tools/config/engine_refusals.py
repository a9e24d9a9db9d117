"""What an engine cannot run, as rules: the Refusal type, the rule factories that several engines share, and
each engine's own rules (read by the EngineProfile registry, tools/config/engines.py).

A refusal's predicate is written with numpy operators, so it takes one layout (a ParallelConfig, through
tools/engines/support.py `knobs_of`) or a table of many (the search's numpy columns). Sources are in each
exporter's module docstring (tools/engines/).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from trainplan.tools.config.codes import PRECISION_CODES, SCHEDULE_BY_CODE, SCHEDULE_CODES
from trainplan.tools.core.enums import Precision, Schedule
from trainplan.tools.config.stages import chunks_per_rank
from trainplan.tools.hardware.specs import ModelSpec

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


def no_hybrid_refusal(engine: str, how: str) -> Refusal:
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


def module_recompute_refusal(engine: str) -> Refusal:
    """Engines that checkpoint whole layers or nothing (tools/config/engines.py, recompute granularity): selective
    recompute of modules beyond the attention core is Megatron-Core's --recompute-modules, which they lack."""
    return Refusal(engine, lambda m, k: k.recompute_modules != 0, lambda m, k: module_recompute_message(engine))


def module_recompute_message(engine: str) -> str:
    """The line refusing module recompute in `engine` (module_recompute_refusal), also for a search request."""
    return (f"selective recompute of chosen modules is Megatron-Core's --recompute-modules; {engine} checkpoints "
            "whole layers or nothing: use --recompute full or none, or --engine megatron")


def hf_trainer_refusals(engine: str) -> tuple[Refusal, ...]:
    """What the Hugging Face Trainer based fine-tuning tools cannot run: one rule set for all of them."""
    return (
        Refusal(engine, _model_parallel,
                lambda m, k: (f"{engine} runs data-parallel layouts only (DDP, FSDP or DeepSpeed ZeRO; tp=pp=cp=ep=1), "
                              f"got tp={k.tp} pp={k.pp} cp={k.cp} ep={k.ep}: use --tp 1 --pp 1 --cp 1 --ep 1, or "
                              "--engine megatron or torchtitan")),
        Refusal(engine, lambda m, k: k.precision == _FP8,
                lambda m, k: f"precision=fp8: the {engine} export writes bf16 training only: use --precision bf16"),
        Refusal(engine, lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
                lambda m, k: f"optimizer offload in {engine} is DeepSpeed ZeRO offload: use --zero 1 or more"),
        no_hybrid_refusal(engine, f"{engine}'s export writes DeepSpeed ZeRO, which"),
    )


def adapter_refusal(engine: str, instead: str) -> Refusal:
    """Engines whose launch settings have no LoRA/QLoRA adapters: their export would train the full model."""
    return Refusal(engine, lambda m, k: k.adapter != 0,
                   lambda m, k: (f"method lora/qlora: {engine}'s launch settings have no adapters, so they would train "
                                 f"every weight: use --engine {instead}, or --method full"))


def adapter_dropout_refusal(engine: str) -> Refusal:
    """Engines whose launch settings train PEFT adapters: PEFT's dropout acts on each adapter's input
    (lora_B(lora_A(dropout(x)))) and has no setting to move it to the output, as NeMo AutoModel's default does
    (Layout.lora_dropout_position post): the run would save a dropped copy of every adapted input the plan did
    not count."""
    return Refusal(engine, lambda m, k: (k.adapter != 0) & (k.dropout_on_output != 0),
                   lambda m, k: (f"lora_dropout_position=post: {engine} writes PEFT adapters, whose dropout acts on "
                                 "each adapter's input and saves a dropped copy of it: use --lora-dropout-position pre, "
                                 "or --lora-dropout 0"))


def pure_bf16_refusal(engine: str, without_zero: bool = False) -> Refusal:
    """The engines whose settings train with an fp32 master copy (Megatron's distributed optimizer, DeepSpeed's bf16
    optimizer, FSDP mixed precision in torchtitan and Accelerate, the Trainer tools' DeepSpeed files): a pure-bf16
    plan (Layout.pure_bf16, 8 B/param) would hold less memory than the run. `without_zero` (EngineProfile
    pure_bf16_without_zero: TRL, LLaMA-Factory): pure bf16 runs there without DeepSpeed, so only ZeRO 1-3 are
    refused."""
    if without_zero:
        return Refusal(engine, lambda m, k: (k.pure_bf16 != 0) & (k.zero >= 1),
                       lambda m, k: (f"pure_bf16 with zero={k.zero}: the {engine} settings run ZeRO through DeepSpeed, "
                                     "whose bf16 optimizer keeps an fp32 master copy: use --zero 0, or --mixed-precision"))
    return Refusal(engine, lambda m, k: k.pure_bf16 != 0,
                   lambda m, k: (f"pure_bf16: the {engine} settings train with an fp32 master copy, up to 10 B/param "
                                 "more than the layout was planned with (pure bf16 is torchtune's dtype bf16, NeMo "
                                 "AutoModel's, and TRL's or LLaMA-Factory's without ZeRO): use --mixed-precision"))


def optimizer_8bit_refusal(engine: str, hf_trainer: bool, instead: str) -> Refusal:
    """8-bit Adam moments (Layout.optimizer_8bit): the Hugging Face Trainer tools select bitsandbytes' AdamW8bit by
    their optim setting, but under DeepSpeed ZeRO the optimizer and its states are DeepSpeed's (32-bit), so they
    refuse it with zero 1-3; the other engines' settings run a 32-bit Adam (Megatron's and DeepSpeed's fused Adam,
    torch.optim.AdamW in torchtitan and the Accelerate script)."""
    if hf_trainer:
        return Refusal(engine, lambda m, k: (k.optimizer_8bit != 0) & (k.zero >= 1),
                       lambda m, k: (f"optimizer_8bit with zero={k.zero}: the {engine} settings run ZeRO through "
                                     "DeepSpeed, whose optimizer keeps 32-bit moments: use --zero 0, or drop "
                                     "--optimizer-8bit"))
    return Refusal(engine, lambda m, k: k.optimizer_8bit != 0,
                   lambda m, k: (f"optimizer_8bit: the {engine} settings run a 32-bit Adam: use --engine {instead} "
                                 "(at zero 0), or drop --optimizer-8bit"))


def document_mask_refusal(engine: str, instead: str) -> Refusal:
    """The engines whose settings write no per-document attention mask (EngineProfile.document_mask false): a plan
    whose attention runs within packed documents (Layout.document_tokens below seq) would run causal over whole
    sequences there, more attention work than planned and attention across documents."""
    return Refusal(engine, lambda m, k: k.documents != 0,
                   lambda m, k: (f"document_tokens: the {engine} settings pack no documents behind a per-document "
                                 f"attention mask: use --engine {instead}, or drop --document-tokens"))


def param_storage_refusal(engine: str, instead: str) -> Refusal:
    """Full training planned with fp32 parameters as the master (16 B/param of ZeRO-3 states) on an engine that
    keeps bf16 parameters beside an fp32 master (18): the plan would hold less memory than the run."""
    return Refusal(engine, lambda m, k: (k.fp32_params != 0) & (k.adapter == 0),
                   lambda m, k: (f"fp32_params: {engine} keeps bf16 parameters beside an fp32 master copy in its "
                                 "optimizer, 2 B/param more than the layout was planned with: use --bf16-params, or "
                                 f"--engine {instead}"))


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


def head_split_refusal(engine: str, why: str) -> Refusal:
    """tp must divide the attention heads and the key/value heads (query groups): `why` says how `engine` fails."""
    def message(m, k) -> str:
        factors = [f"the {n} {what}" for n, what in ((m.num_attention_heads, "attention heads"),
                                                      (query_groups(m), "query groups (key/value heads)"))
                   if n % k.tp != 0]
        return (f"tp={k.tp} does not divide {' nor '.join(factors)} of {m.name}: {why}: use --tp "
                f"{_tp_that_fits(m, k.tp)} (or another divisor of the heads and the query groups)")
    return Refusal(engine, _splits_heads, message)


MEGATRON_REFUSALS = (
    Refusal("megatron", lambda m, k: (k.pp > 1) & (k.schedule != _1F1B) & (k.schedule != _INTER),
            lambda m, k: (f"schedule={_schedule(k)} is not a Megatron-LM schedule (it has 1f1b and interleaved):"
                          " use --schedule 1f1b, or --schedule interleaved with --vpp 2 or more")),
    Refusal("megatron", lambda m, k: (k.zero >= 2) & (k.pp > 1),
            lambda m, k: (f"zero={k.zero} with pp={k.pp}: Megatron-LM shards gradients/weights only through "
                          "Megatron-FSDP, which its guide documents without pipeline parallelism: use --zero 1 or --pp 1")),
    Refusal("megatron", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload in Megatron-LM runs with the distributed optimizer: use --zero 1 or more"),
)

DEEPSPEED_REFUSALS = (
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
    Refusal("deepspeed", lambda m, k: ((k.tp > 1) | (k.pp > 1)) & (k.adapter != 0),
            lambda m, k: (f"tp={k.tp} pp={k.pp} with LoRA/QLoRA adapters: DeepSpeed's AutoTP shards every nn.Linear's "
                          "weight as a dense matrix, which PEFT's adapter layers and bitsandbytes' packed 4-bit weights "
                          "are not, and its pipeline engine needs the model rewritten as a PipelineModule; no working "
                          "example of PEFT adapters under either exists: use --tp 1 --pp 1 (ZeRO shards the frozen "
                          "base) or more GPUs")),
    Refusal("deepspeed", lambda m, k: (k.tp > 1) & (k.zero >= 3),
            lambda m, k: (f"tp={k.tp} with zero={k.zero}: DeepSpeed's AutoTP training works with ZeRO stage 0, 1 or "
                          "2 only: use --zero 2, or --tp 1 for ZeRO-3")),
    Refusal("deepspeed", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload in DeepSpeed is part of ZeRO: use --zero 1 or more"),
    no_hybrid_refusal("deepspeed", "DeepSpeed"),
)


def _more_stages_than_layers(m: ModelSpec, k) -> np.ndarray:
    """A layout with more pipeline stages (pp x chunks per rank) than layers: some stage would hold none (the
    torchtitan export moves layers into a stage the plan's split leaves empty while there are enough,
    torchtitan.model_parts)."""
    return (np.asarray(k.pp) > 1) & (np.asarray(k.pp) * chunks_per_rank(k.schedule, k.vpp) > m.num_layers)


TORCHTITAN_REFUSALS = (
    Refusal("torchtitan", _more_stages_than_layers,
            lambda m, k: (f"pp={k.pp} with {int(chunks_per_rank(k.schedule, k.vpp))} model chunks per rank makes "
                          f"{int(k.pp * chunks_per_rank(k.schedule, k.vpp))} pipeline stages for {m.num_layers} "
                          "layers: torchtitan "
                          "builds every stage from its module_fqns_per_model_part, so use a smaller --pp or --vpp")),
    Refusal("torchtitan", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload in torchtitan is FSDP CPU offload: use --zero 1 or more"),
    Refusal("torchtitan", lambda m, k: (k.ep > 1) & (k.zero == 0) & (k.cp % k.ep != 0),
            lambda m, k: (f"ep={k.ep}: torchtitan takes expert-parallel ranks from the FSDP group (dp_shard*cp), "
                          f"which is cp={k.cp} with zero=0: use --zero 1 or more")),
)

ACCELERATE_REFUSALS = (
    Refusal("accelerate", _model_parallel,
            lambda m, k: (f"accelerate export covers pure FSDP/DDP layouts (tp=pp=cp=ep=1), got tp={k.tp} pp={k.pp} "
                          f"cp={k.cp} ep={k.ep}: use --engine megatron, torchtitan or deepspeed")),
    Refusal("accelerate", lambda m, k: (k.optimizer_offload != 0) & (k.zero == 0),
            lambda m, k: "optimizer offload needs sharding in accelerate (FSDP): use --zero 1 or more"),
)
