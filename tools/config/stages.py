"""How a model's layers split over pipeline stages: the one definition the layout, the step model, the memory
model, the search and the engines' exports (and their refusals) read."""

from __future__ import annotations

import functools

import numpy as np

from trainplan.tools.config.codes import SCHEDULE_CODES
from trainplan.tools.core.enums import Schedule
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.hardware.specs import ModelSpec


def layers_per_stage(num_layers: int, pp: int, last_stage_extra: float = 0.0) -> list[int]:
    """Split L layers over pp stages as evenly as possible; any extra layers go to the middle stages.

    The first stage also holds the embedding and the last the LM head and loss, so Llama 3 405B's
    126 layers on PP16 give the first and last stage one fewer layer (Llama 3 paper §3.3.2).
    `last_stage_extra` is other work on the last stage in layer-equivalents (the LM head, an MTP
    module): when it reaches half a layer or more, the last stage gets correspondingly fewer layers
    (keeping at least one) and the rest are split evenly.
    """
    if pp == 1:
        return [num_layers]
    last = None
    if round(last_stage_extra) >= 1:
        last = max(1, min(num_layers - (pp - 1), round((num_layers + last_stage_extra) / pp - last_stage_extra)))
        num_layers, pp = num_layers - last, pp - 1
    base, extra = divmod(num_layers, pp)
    counts = [base] * pp
    # Hand the extra layers to the stages away from the ends first.
    ends = (0, pp - 1) if last is None else (0,)
    order = sorted(range(pp), key=lambda i: (i in ends, abs(i - (pp - 1) / 2)))
    for i in order[:extra]:
        counts[i] += 1
    return counts if last is None else counts + [last]


def model_layers_per_stage(model: ModelSpec, pp: int) -> list[int]:
    """layers_per_stage for a model (a fresh list; _model_layers_per_stage is cached per model and pp,
    as the search asks for the same split many times)."""
    return list(_model_layers_per_stage(model, pp))


@functools.lru_cache(maxsize=1024)
def _model_layers_per_stage(model: ModelSpec, pp: int) -> tuple[int, ...]:
    """layers_per_stage for a model. Megatron's even split by default (so a plan runs with its
    default flags and its theoretical memory formula applies); a model with MTP modules, which run
    on the last stage beside the LM head, gets that stage balanced against them.

    One layer-equivalent is the mean active parameters of a block (its GEMM FLOPs per token / 2);
    the LM head is h*V of them, and an MTP module is one block plus another pass of the head.
    """
    if not model.num_mtp_layers:
        return tuple(layers_per_stage(model.num_layers, pp))
    counts = count_params(model)
    per_layer = sum(layer.active for layer in counts.layers) / model.num_layers
    head = model.hidden_size * model.vocab_size / per_layer
    return tuple(layers_per_stage(model.num_layers, pp, head + model.num_mtp_layers * (1 + head)))


def v_shaped(schedule_code):
    """Whether a schedule (its code; numpy-friendly) gives each rank the two chunks of a V, stages p and 2pp-1-p:
    zb_h1 and dualpipe."""
    code = np.asarray(schedule_code)
    return (code == SCHEDULE_CODES[Schedule.zb_h1]) | (code == SCHEDULE_CODES[Schedule.dualpipe])


def chunks_per_rank(schedule_code, vpp):
    """Model chunks each pipeline rank holds (numpy-friendly): two for the V schedules (v_shaped), vpp for the
    looped ones."""
    return np.where(v_shaped(schedule_code), 2, np.asarray(vpp))
