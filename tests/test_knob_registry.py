"""A knob added to Layout with its metadata (tools/config/fields.py Cli, NOT_LEAN, Knob) reaches every surface
derived from the fields, with no other edit: the CLI options, the tool argument schemas, the lean tool set, the
search's fixed knobs, the planning request and the public estimate/search signatures (trainplan/api_gen.py).
Each surface is built here from a Layout subclass that has the new knobs; a surface that kept a hand list of knob
names would miss them."""

from __future__ import annotations

import inspect
from typing import Annotated

from pydantic import Field

from trainplan import api_gen, cli_common
from trainplan.agent import request, tool_args
from trainplan.tools.config.contract import Job, Layout, SearchOptions, search_fields
from trainplan.tools.config.fields import NOT_LEAN, Knob, asked_names, fields_of, knob_names, lean_dropped
from trainplan.tools.search import space


class LayoutWithNewKnobs(Layout):
    """Layout plus a fixed memory knob the lean tool set leaves out and a searched parallel size a request pins."""

    spare_buffers: Annotated[bool, NOT_LEAN] = Field(default=False, description="keep spare buffers (a test knob)")
    xp: Annotated[int, Knob(searched=True, size=True, pin=True, asked=3)] = Field(
        default=1, ge=1, description="x-parallel size (a test knob)")


NEW = ("spare_buffers", "xp")


def test_the_real_layout_has_neither_knob():
    assert not set(NEW) & set(Layout.model_fields)


def test_cli_options_offer_the_new_knobs():
    estimate_flags = {p.name for p in cli_common.options(fields_of(Job, LayoutWithNewKnobs), mode="override")}
    search_flags = {p.name for p in cli_common.options(search_fields(layout=LayoutWithNewKnobs))}
    assert set(NEW) <= estimate_flags and set(NEW) <= search_flags


def test_tool_schemas_take_the_new_knobs():
    one_step = tool_args.layout_args_model(layout=LayoutWithNewKnobs).model_json_schema()["properties"]
    search = tool_args.search_args_model(layout=LayoutWithNewKnobs).model_json_schema()["properties"]
    assert set(NEW) <= set(one_step) and set(NEW) <= set(search)
    assert search["xp"]["description"].startswith("pin the x-parallel size")


def test_lean_tool_set_drops_the_knob_marked_not_lean():
    dropped = lean_dropped(Job, LayoutWithNewKnobs, SearchOptions)
    assert "spare_buffers" in dropped and "xp" not in dropped


def test_search_fixes_or_varies_each_new_knob():
    assert "spare_buffers" in space.fixed_knobs(LayoutWithNewKnobs)
    assert "xp" not in space.fixed_knobs(LayoutWithNewKnobs)
    assert knob_names(LayoutWithNewKnobs, searched=True)[-1] == "xp"
    assert "xp" in knob_names(LayoutWithNewKnobs, size=True)


def test_planning_request_pins_the_pinnable_knob_only():
    assert request.pins_of(LayoutWithNewKnobs) == (*request.PINS[:9], "xp", *request.PINS[9:])
    fields = request.plan_request_model(layout=LayoutWithNewKnobs).model_fields
    assert "xp" in fields and "spare_buffers" not in fields
    assert fields["xp"].description.startswith("pinned x-parallel size")
    assert asked_names(LayoutWithNewKnobs) == (*request._LAYOUT[:12], "xp", *request._LAYOUT[12:])


def test_public_signatures_generated_from_the_layout_take_the_new_knobs():
    source = api_gen.render(layout=LayoutWithNewKnobs)
    estimate, search = source.split("\ndef estimate(")[1].split("\ndef search(")
    assert "spare_buffers: bool = False," in estimate and "xp: int = 1," in estimate
    assert "xp: Any = None," in search and "spare_buffers: bool | None = None," in search
    assert "\n    xp:" not in api_gen.render() and "spare_buffers" not in api_gen.render()
    namespace: dict = {}
    exec(compile(source, "<generated _api>", "exec"), namespace)   # the rendered module runs as written
    estimate_keywords = inspect.signature(namespace["estimate"]).parameters
    assert estimate_keywords["xp"].default == 1 and estimate_keywords["xp"].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.signature(namespace["search"]).parameters["spare_buffers"].default is None
