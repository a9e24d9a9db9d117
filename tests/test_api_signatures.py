"""trainplan.estimate, trainplan.search and trainplan.plan (trainplan/__init__.py) write their keyword parameters
out for IDEs; these tests hold each list to the contract's fields (tools/config/contract.py), both ways, with
the defaults, so that a knob added to or removed from the contract cannot drift from the public API."""

from __future__ import annotations

import inspect

import trainplan
from trainplan.agent.request import PlanRequest
from trainplan.tools.config.contract import Job, Layout, search_fields

ESTIMATE_ONLY = {"timeline"}
PLAN_ONLY = {"request_text", "backend", "llm_model", "options"}


def _default(info):
    return getattr(info.default, "value", info.default)


def test_estimate_takes_exactly_the_job_and_layout_fields_with_their_defaults():
    parameters = inspect.signature(trainplan.estimate).parameters
    fields = {**Job.model_fields, **Layout.model_fields}
    assert set(parameters) - ESTIMATE_ONLY == set(fields)
    for name, info in fields.items():
        expected = inspect.Parameter.empty if info.is_required() else _default(info)
        assert parameters[name].default == expected, name


def test_search_takes_exactly_the_search_fields_each_null_unless_required():
    parameters = inspect.signature(trainplan.search).parameters
    fields = search_fields()
    assert set(parameters) == set(fields)
    for name, info in fields.items():
        expected = inspect.Parameter.empty if info.is_required() else None   # null: the field's default rule
        assert parameters[name].default == expected, name


def test_plan_takes_exactly_the_request_fields_each_null():
    parameters = inspect.signature(trainplan.plan).parameters
    assert set(parameters) - PLAN_ONLY == set(PlanRequest.model_fields) - {"unparsed"}
    assert all(parameters[name].default is None for name in set(parameters) - PLAN_ONLY)
