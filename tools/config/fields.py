"""Field metadata and the helpers that read a model's fields (tools/config/contract.py uses them on Job, Layout
and SearchOptions).

- `Cli`: how a field appears on the command line (trainplan/cli_common.py reads it with `cli_of`);
- `Lean` / `NOT_LEAN`: whether the lean tool set (agent/toolset.py) offers a field (`lean_dropped`);
- `Knob`: which knob lists a field belongs to (`knob_names`, `asked_names` derive them: contract.SEARCHED_KNOBS,
  agent/request.py PINS, ...);
- `fields_of`, `optional_model`, `described`, `shown_default`, `field_docs`: tool argument models, re-typed
  fields and API documentation built from the fields, so that no knob is written twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, Field

@dataclass(frozen=True)
class Cli:
    """How a field appears on the command line when the plain `--field-name` is not enough.

    flag: the option's declaration (e.g. "--budget", "--bf16-grads/--fp32-grads");
    as_text: the CLI reads text and the model parses it (tokens "15T").
    """

    flag: str | None = None
    as_text: bool = False


@dataclass(frozen=True)
class Lean:
    """Field metadata: whether the lean tool set (agent/toolset.py, a small context) offers the field."""

    offered: bool = True


NOT_LEAN = Lean(offered=False)
"""A field the lean tool set leaves out: null (its default) is what a plan mostly passes."""


@dataclass(frozen=True)
class Knob:
    """Field metadata: which lists of knobs a field belongs to. Each list is derived from these marks, in
    field order (`knob_names`); a field without a Knob has the defaults.

    searched: a search varies it unless pinned (SEARCHED_KNOBS; tools/search/space.py Pins has its slot);
    chosen: a search chooses it per layout when the request leaves it null (SEARCH_CHOSEN_KNOBS);
    stored: a memory-only knob the search sets per layout (tools/search/space.py STORAGE_KNOBS);
    job_wide: a search takes it once for the whole job, not as a fixed knob (space.FIXED_KNOBS leaves it out);
    searchable: a search takes it at all (False: SEARCH_JOB_EXCLUDED);
    size: a parallel size, no larger than the GPU count (PARALLEL_SIZES);
    fine_tuning: it chooses what is trained (FINE_TUNING_KNOBS);
    one_step: the one-layout tools take it (False: agent/registry.py _NOT_FOR_ONE_STEP);
    pin: a planning request may pin it (agent/request.py PINS);
    asked: a planning request may state it (agent/request.py PlanRequest); the fields of a model are
      ordered by this number, then by field order; None: a request does not state it.
    """

    searched: bool = False
    chosen: bool = False
    stored: bool = False
    job_wide: bool = False
    searchable: bool = True
    size: bool = False
    fine_tuning: bool = False
    one_step: bool = True
    pin: bool = False
    asked: int | None = None


def knob_of(info: Any) -> Knob:
    """The Knob metadata of a pydantic FieldInfo (the default when it has none)."""
    return next((m for m in info.metadata if isinstance(m, Knob)), Knob())


def knob_names(*models: type[BaseModel], **marks: Any) -> tuple[str, ...]:
    """The fields of `models`, in order, whose Knob has every attribute in `marks` as given."""
    return tuple(name for model in models for name, info in model.model_fields.items()
                 if all(getattr(knob_of(info), mark) == value for mark, value in marks.items()))


def asked_names(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` a planning request may state (Knob.asked), by that number, then field order."""
    asked = [(knob_of(info).asked, i, name) for i, (name, info) in enumerate(model.model_fields.items())]
    return tuple(name for rank, _, name in sorted(a for a in asked if a[0] is not None))


def lean_dropped(*models: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `models` marked NOT_LEAN, in order, each once."""
    return tuple(dict.fromkeys(name for model in models for name, info in model.model_fields.items()
                               if any(isinstance(m, Lean) and not m.offered for m in info.metadata)))


def cli_of(info: Any) -> Cli:
    """The Cli metadata of a pydantic FieldInfo (the default when it has none)."""
    return next((m for m in info.metadata if isinstance(m, Cli)), Cli())



def described(model: type[BaseModel], name: str, **kwargs: Any) -> Any:
    """A Field carrying `model.name`'s description: a field re-typed elsewhere keeps one definition."""
    return Field(description=model.model_fields[name].description, **kwargs)



# --- deriving argument models ----------------------------------------------------------------------


def fields_of(*models: type[BaseModel], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """name -> FieldInfo of the models' fields, in order, less `exclude`."""
    return {name: info for model in models for name, info in model.model_fields.items() if name not in exclude}


def optional_model(name: str, fields: dict[str, Any], *, base: type[BaseModel] = BaseModel,
                   required: tuple[str, ...] = (), descriptions: dict[str, str] | None = None) -> type[BaseModel]:
    """A model with `fields` (name -> FieldInfo), each `X | None = None` (null: the field's default rule)
    except those in `required`. Tool argument models are built this way, so that OpenAI strict mode
    (every field present, null allowed) works and no knob is written twice."""
    from pydantic import create_model

    built: dict[str, Any] = {}
    descriptions = descriptions or {}
    for field_name, info in fields.items():
        description = descriptions.get(field_name, info.description)
        annotation = _inline_choices(info.annotation)
        if field_name in required:
            built[field_name] = (annotation, Field(description=description))
            continue
        if info.default is not None and "null:" not in description:
            description = f"{description}; null: {shown_default(info.default)}"
        before = [m for m in info.metadata if isinstance(m, BeforeValidator)]  # e.g. CommaSeparated
        optional = Annotated[(annotation | None, *before)] if before else annotation | None
        built[field_name] = (optional, Field(default=None, description=description))
    return create_model(name, __base__=base, **built)


def _inline_choices(annotation: Any) -> Any:
    """An Enum type as a Literal of its values, so that a tool schema lists them inline."""
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return Literal[tuple(member.value for member in annotation)]  # type: ignore[valid-type]
    arguments = get_args(annotation)
    if arguments and get_origin(annotation) in (Union, UnionType):
        return Union[tuple(_inline_choices(a) for a in arguments)]  # type: ignore[return-value]
    return annotation


def shown_default(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_docs(*models: type[BaseModel]) -> str:
    """`name: description` lines for the fields of `models` (API docstrings)."""
    lines = []
    for model in models:
        for name, info in model.model_fields.items():
            lines.append(f"    {name}: {info.description}")
    return "\n".join(lines)


