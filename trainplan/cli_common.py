"""Command-line options generated from the contract's fields (tools/config/contract.py), so that a field
added to Job, Layout or SearchOptions becomes a flag of `estimate`, `search` and `export` with no edit here.

    options(fields, mode=...) -> [inspect.Parameter]   # one typer option per field
    command(function, parameters)                       # give a `**options` function that signature

A field's flag is `--field-name` (a Cli(...) annotation on the field overrides it); its help is the
field's description; an Enum field offers its values. mode "value" keeps the field's default;
"override" makes every option default to None (export --from: only what is given overrides the file);
"pin" makes the searched Layout knobs None (search).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import typer

from trainplan.tools.config.fields import Cli, cli_of, shown_default
from trainplan.tools.core.errors import InputError

Json = Annotated[bool, typer.Option("--json", help="print the result object as JSON")]
Solve = Annotated[Optional[str], typer.Option(
    "--solve", help="instead of one estimate, the limit of this layout: seq (the longest sequence that fits), mbs "
    "(the largest micro-batch that fits) or gpu (the catalog GPUs it fits on, smallest and cheapest); tools/search/limits.py")]
From = Annotated[Optional[Path], typer.Option(
    "--from", help="a saved estimate/plan JSON: its 'config' object gives the layout; flags override it")]


def _base_type(annotation: Any, cli: Cli) -> tuple[Any, bool]:
    """(the type typer parses, whether None is allowed) for a field's annotation."""
    arguments = get_args(annotation)
    nullable = False
    if get_origin(annotation) in (Union, UnionType):
        nullable = type(None) in arguments
        arguments = tuple(a for a in arguments if a is not type(None))
        annotation = arguments[0] if len(arguments) == 1 else str
    if cli.as_text:
        annotation = str
    if get_origin(annotation) is Literal:
        annotation = str
    return annotation, nullable


def _flag(name: str, info: Any, base: Any, cli: Cli, both_ways: bool) -> str:
    if cli.flag:
        return cli.flag
    flag = "--" + name.replace("_", "-")
    if base is bool and (both_ways or info.default is True):
        return f"{flag}/--no-{flag[2:]}"
    return flag


def options(fields: dict[str, Any], *, mode: Literal["value", "override"] = "value",
            none: tuple[str, ...] = (), helps: dict[str, str] | None = None) -> list[inspect.Parameter]:
    """One keyword-only typer option per field (name -> FieldInfo). Fields in `none` default to None
    (a search pin); mode "override" does that to every field (export --from)."""
    parameters = []
    for name, info in fields.items():
        cli = cli_of(info)
        base, nullable = _base_type(info.annotation, cli)
        optional = mode == "override" or name in none
        default = None if optional else info.get_default(call_default_factory=True)
        required = info.is_required() and not optional
        if isinstance(default, Enum):
            default = default.value
        help_text = (helps or {}).get(name, info.description or "").replace("; null: ", "; default: ")
        if (optional and not info.is_required() and info.default is not None and "default:" not in help_text
                and name not in none):
            help_text += f"; default: {shown_default(info.default)}"
        option = typer.Option(_flag(name, info, base, cli, both_ways=optional), help=help_text,
                              show_default=not optional and not required and default is not None)
        annotation = Annotated[Optional[base] if (nullable or optional) else base, option]  # noqa: UP045
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                            default=inspect.Parameter.empty if required else default))
    return parameters


def command(function: Callable[..., Any], parameters: list[inspect.Parameter]) -> Callable[..., Any]:
    """Give `function(**options)` the signature typer reads, so its options are `parameters`."""
    function.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    function.__annotations__ = {p.name: p.annotation for p in parameters}
    return function


def given(values: dict[str, Any]) -> dict[str, Any]:
    """The options that were given (not None), Enum members as their values."""
    return {k: getattr(v, "value", v) for k, v in values.items() if v is not None}


def saved_config(path: Path, fields: dict[str, Any]) -> dict[str, Any]:
    """The layout in a saved `estimate --json` result (key 'config') or a plan (its recommended config),
    every value type-checked against its field (`"tp": "8"` is refused in one line)."""
    from trainplan.tools.hardware.catalog import read_json_object  # bounded, UTF-8, strict JSON (no NaN), one object

    data = read_json_object(Path(path), "--from")
    recommended = data.get("recommended")
    candidates = [data.get("config"), recommended.get("config") if isinstance(recommended, dict) else None, data]
    for config in candidates:
        if isinstance(config, dict) and "tp" in config:
            return {key: _typed(path, key, config[key], fields[key]) for key in fields
                    if config.get(key) is not None}
    raise InputError(f"--from file '{path}' has no 'config' object with a layout: save one with estimate --json")


def _typed(path: Path, key: str, value: Any, info: Any) -> Any:
    """A saved value as its field's type, checked strictly as JSON (no "8" for 8, no list for a name)."""
    import json

    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(info.annotation).validate_json(json.dumps(value), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"--from file '{path}': '{key}' {first['msg'][:120].lower()}: fix the file or pass "
                         f"--{key.replace('_', '-')}") from None
    return value


def merged_options(fields: dict[str, Any], values: dict[str, Any], source: Path | None) -> dict[str, Any]:
    """A saved config (--from), then the options that were given over it."""
    merged = saved_config(source, fields) if source is not None else {}
    merged.update(given(values))
    return merged


DataDirOpt = Annotated[Optional[list[str]], typer.Option(
    "--data-dir", help="a folder whose model and GPU JSON files tool calls (the LLM's, an MCP client's) may open, "
                       "besides the working directory and TRAINPLAN_DATA_DIRS; repeatable")]


def allow_data_dirs(folders: list[str] | None) -> None:
    """--data-dir: let tool calls open files under these folders (tools/core/file_access.py)."""
    from trainplan.tools.core.file_access import add_data_dirs

    add_data_dirs(folders or [])
