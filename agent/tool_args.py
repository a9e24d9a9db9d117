"""The arguments models of the agent's tools (agent/registry.py pairs each with its tool and function).

Every model derives from ToolArgs: unknown keys, NaN, infinities and bools for numbers are refused. The
layout and search models are generated from the contract (tools/config/contract.py `optional_model`), so an
argument's name and description are the contract's; every other field carries its description here.
An optional knob is typed ``X | None`` with default None (OpenAI strict mode): null is its default.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainplan.tools.config.contract import Job, Layout, search_chosen_description, search_fields
from trainplan.tools.config.fields import fields_of, knob_names, optional_model
from trainplan.tools.config.plan_defaults import DEFAULT_GOODPUT
from trainplan.tools.core.enums import Schedule


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown keys are an error the model can fix; NaN and infinities
    are refused; a count is never a bool (JSON `true` is not 1)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name)
                if isinstance(value, bool) and info is not None and bool not in _types_of(info.annotation):
                    raise ValueError(f"{name}={str(value).lower()} is a true/false value, not a number: send a "
                                     "number (or null for the default)")
        return data


def _types_of(annotation: Any) -> set[type]:
    """The plain types an annotation admits (int | None -> {int, NoneType}; Literal -> the values' types)."""
    origin = get_origin(annotation)
    if origin is None:
        return {annotation} if isinstance(annotation, type) else set()
    if origin is Literal:
        return {type(v) for v in get_args(annotation)}
    return set().union(*(_types_of(a) for a in get_args(annotation)))


def _opt(description: str) -> Any:
    """An optional knob: None means the documented default."""
    return Field(default=None, description=description)


RecomputeName = Literal["none", "selective", "full"]
ScheduleName = Literal[tuple(s.value for s in Schedule)]  # type: ignore[valid-type]
PrecisionName = Literal["bf16", "fp8"]


# The layout tools take the Job's cluster fields and every Layout knob (contract.py), each nullable:
# null is the field's default rule, the same in every tool (gbs: DEFAULT_GBS_RULE; seq: DEFAULT_SEQ_RULE).
_NOT_FOR_ONE_STEP = knob_names(Job, Layout, one_step=False)


def layout_args_model(job: type[Job] = Job, layout: type[Layout] = Layout) -> type[ToolArgs]:
    """The one-layout tools' arguments from the models' fields (less those marked Knob(one_step=False))."""
    model = optional_model("LayoutArgs", fields_of(job, layout, exclude=knob_names(job, layout, one_step=False)),
                           base=ToolArgs, required=("model", "gpu", "gpus"))
    model.__doc__ = "A job's hardware and one layout: every Layout knob, null meaning its default."
    return model


LayoutArgs = layout_args_model()
MemoryArgs = StepArgs = LayoutArgs


class LimitArgs(LayoutArgs):
    """A layout whose limit is asked: every Layout knob as calculate_memory takes it, and what to solve."""

    gpu: str | None = Field(description=f"{LayoutArgs.model_fields['gpu'].description}; null only with solve=gpu, "
                                        "which tries every catalog GPU")
    solve: Literal["seq", "mbs", "gpu"] = Field(description="seq: the longest sequence that fits; mbs: the largest "
                                                "micro-batch that fits; gpu: the catalog GPUs it fits on with the "
                                                "same GPU count (gpu is then ignored), the smallest and the cheapest "
                                                "per token")



class CatalogArgs(ToolArgs):
    kind: Literal["all", "models", "gpus"] | None = _opt("which catalog to list: all, models or gpus; null: all")


class DescribeArgs(ToolArgs):
    model: str = Field(description="catalog model name or a path to an HF config.json")
    seq: int | None = _opt("sequence length for the FLOPs per token (attention grows with it); "
                           "null: the model's default")


class PipelineArgs(ToolArgs):
    schedule: ScheduleName = Field(description="gpipe, 1f1b, interleaved (needs vpp>1), zb-h1 or dualpipe "
                                               "(even pp and an even number of micro-batches)")
    pp: int = Field(description="pipeline stages (ranks)")
    num_microbatches: int = Field(description="micro-batches per step, m = gbs / (dp*mbs)")
    vpp: int | None = _opt("model chunks per rank for the interleaved schedule; null: 1")
    forward_s: float | None = _opt("seconds of one micro-batch's forward through one stage; null: 1.0 "
                                   "(then times are in units of a forward)")
    backward_s: float | None = _opt("seconds of one micro-batch's backward (input + weight gradient) "
                                    "through one stage; null: 2 x forward_s")
    weight_grad_s: float | None = _opt("the weight-gradient part of backward_s, run apart by zb-h1 and "
                                       "dualpipe; null: backward_s / 2")
    p2p_s: float | None = _opt("seconds to send one activation or gradient between adjacent stages; null: 0")
    timeline: bool | None = _opt("also return an ASCII timeline (ranks x time); null: false")


class CostArgs(ToolArgs):
    tokens: float | str = Field(description="training tokens: a number (15.6e12) or text with a suffix "
                                            "('15T', '300B')")
    step_s: float = Field(description="seconds per training step, from estimate_step_time (time.step_s)")
    gbs: int = Field(description="global batch, sequences per step")
    seq: int = Field(description="sequence length, tokens")
    gpus: int = Field(description="total GPUs")
    gpu: str | None = _opt("catalog GPU name, for its default price; null: price must be given")
    price: float | None = _opt("dollars per GPU-hour; null: the GPU's catalog price")
    goodput: float | None = _opt(f"share of wall-clock time that trains, in (0, 1]; null: {DEFAULT_GOODPUT} "
                                 "(Llama 3 reports more than 90% effective training time)")


def search_args_model(job: type[Job] = Job, layout: type[Layout] = Layout) -> type[ToolArgs]:
    """The search_configs tool's arguments from the models' fields (contract.search_fields, less pareto)."""
    model = optional_model(
        "SearchArgs", {k: v for k, v in search_fields(job, layout).items() if k != "pareto"}, base=ToolArgs,
        required=("model", "gpu", "gpus"),
        descriptions={**{n: f"pin the {layout.model_fields[n].description}; null: search it"
                         for n in knob_names(layout, searched=True)},
                      **{n: search_chosen_description(n, layout) for n in knob_names(layout, chosen=True)}})
    model.__doc__ = "A search: the Job, the searched Layout knobs as pins, and the SearchOptions."
    return model


SearchArgs = search_args_model()


class SubmitPlanArgs(ToolArgs):
    layout: StepArgs = Field(description="the layout you recommend: model, gpu, gpus and every knob as "
                                         "estimate_step_time takes them (null: the tool's default)")
    tokens: float | str | None = _opt("training tokens the plan's cost assumes, a number or '15T'; null: the "
                                      "request's")
    price: float | None = _opt("dollars per GPU-hour; null: the request's or the GPU's catalog price")
