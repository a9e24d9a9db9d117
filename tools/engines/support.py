"""What each engine cannot run, as the exporters ask it: `refuse` raises the first refusal of the engine's
(tools/config/engines.py ENGINE_REFUSALS, the rules of tools/config/engine_refusals.py) that a resolved layout
meets, with its message; the layout search asks tools/config/engines.py `runs` directly.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.config.engine_refusals import Refusal
from trainplan.tools.config.engines import ENGINE_REFUSALS, check_engine, job_refusal_knobs, stores_fp32_params
from trainplan.tools.config.engines import runs as runs_any
from trainplan.tools.config.resolve import beyond_default_modules, is_lora
from trainplan.tools.core.enums import Recompute
from trainplan.tools.engines.common import ExportError
from trainplan.tools.hardware.specs import ModelSpec

REFUSALS: tuple[Refusal, ...] = tuple(refusal for refusals in ENGINE_REFUSALS.values() for refusal in refusals)
"""Every engine's refusals, engine by engine."""


def param_storage_note(engine: str, cfg: ParallelConfig) -> str | None:
    """The note of an FP32_PARAM_ENGINES export of a full-training ZeRO-3 layout planned with bf16 parameters
    beside an fp32 master: the engine holds less than planned (None otherwise)."""
    if not stores_fp32_params(engine) or cfg.fp32_params or cfg.zero < 3 or is_lora(cfg.method):
        return None
    return (f"{engine} keeps fp32 parameters as the optimizer's master copy (FSDP mixed precision): with ZeRO-3 it "
            "holds 2 B/param of sharded state less than this layout was planned with (bf16 parameters beside an "
            "fp32 master); --fp32-params plans it as it runs")


def reruns_modules(cfg: ParallelConfig) -> bool:
    """Whether selective recompute reruns modules beyond the attention core (Megatron's default set)."""
    return cfg.recompute is Recompute.selective and beyond_default_modules(cfg.recompute_modules)


def knobs_of(cfg: ParallelConfig) -> SimpleNamespace:
    """A resolved layout as the refusals read it."""
    return SimpleNamespace(tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep, zero=cfg.zero, dp=cfg.dp, vpp=cfg.vpp,
                           dp_shard=cfg.dp_shard_size, schedule=SCHEDULE_CODES[cfg.schedule],
                           recompute_modules=int(reruns_modules(cfg)), **job_refusal_knobs(cfg))


def learned_positions(model: ModelSpec) -> int:
    """Positions a learned-position model can run (0: no learned table): its max_seq_len, which the table's
    rows hold (OPT's table has 2 rows more, an offset, tools/hardware/hf_readers.py)."""
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
    check_engine(engine, ExportError)
    refuse_positions(model, cfg.seq)
    knobs = knobs_of(cfg)
    for refusal in ENGINE_REFUSALS[engine]:
        if bool(refusal.refuses(model, knobs)):
            raise ExportError(refusal.message(model, knobs))


def runs(engine: str, model: ModelSpec, knobs) -> np.ndarray:
    """tools/config/engines.py `runs`, with an unknown engine an ExportError."""
    check_engine(engine, ExportError)
    return runs_any(engine, model, knobs)
