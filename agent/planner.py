"""`plan`: a plain-language request in, a PlanReport out, by the offline planner or the LLM agent.

- offline: agent/offline_plan.py (defaults: agent/job_defaults.py; the searches: agent/plan_search.py). No
  LLM, no network.
- openai: agent/llm_backend.py, the function-calling loop (agent/llm.py) and the report of its submit_plan
  call. When the LLM fails (server error, context overflow, deadline) on a complete request, or the tools
  fail on its plan, the offline plan is returned, labelled with the error.
- auto: openai when an LLM is configured (agent.config.llm_configured), else offline.

Either way the report carries the launch settings of the recommended layout (launch_engine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainplan.tools.hardware import catalog
from trainplan.tools.perf.cost import parse_tokens
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.resolve import is_lora
from trainplan.tools.config import engines as engine_registry

from .agent_errors import AgentError
from .config import LlmEndpoint
from .llm_backend import failure_text, offline_after_llm_failure, plan_openai
from .offline_plan import offline_report
from .report import PlanReport, launch_settings
from .request import PlanRequest, merge, parse_partial, require_complete

__all__ = ["plan", "resolve_backend", "launch_engine"]

DEFAULT_ENGINE = engine_registry.DEFAULT_ENGINE
"""Whose launch settings a plan carries when the request names no engine (the search is then not
restricted to one engine) and Megatron-LM runs the recommended layout."""
LAUNCH_FALLBACK = engine_registry.LAUNCH_FALLBACK
"""When DEFAULT_ENGINE cannot run the recommended layout (e.g. ZeRO-2 with pipeline parallelism), the
first of these that can (tools/config/engines.py launch_order) carries the launch settings instead."""


def resolve_backend(backend: str, client: Any = None) -> str:
    from .config import llm_configured

    if backend not in ("auto", "offline", "openai"):
        raise InputError(f"backend='{backend}' is not one of: auto, offline, openai")
    if backend == "auto":
        return "openai" if client is not None or llm_configured() else "offline"
    return backend


def _request_from(request_text: str | None, request: PlanRequest | None, fields: dict) -> PlanRequest:
    """The parsed text, over `request` (a previous one), under explicit `fields`."""
    base = request or PlanRequest()
    if request_text:
        base = merge(base, parse_partial(request_text))
    unknown = set(fields) - set(PlanRequest.model_fields)
    if unknown:
        raise InputError(f"unknown request field(s) {', '.join(sorted(unknown))}: use "
                         f"{', '.join(PlanRequest.model_fields)}")
    given = {k: v for k, v in fields.items() if v is not None}
    if "tokens" in given:
        given["tokens"] = parse_tokens(given["tokens"])
    return merge(base, PlanRequest(**given)) if given else base


def plan(request_text: str | None = None, *, backend: str = "auto", endpoint: LlmEndpoint = LlmEndpoint(),
         stream: bool = False, on_event: Callable[[str, dict], None] | None = None,
         request: PlanRequest | None = None, engine: str | None = None, **fields: Any) -> PlanReport:
    """Plan a training run from plain language (and/or the contract's fields, tools/config/contract.py: model=, gpu=, gpus=, ...).

    backend: 'offline', 'openai' or 'auto' (openai when an LLM is configured); endpoint: the LLM's client and
    model (agent/config.py LlmEndpoint; empty: from the environment). engine (megatron,
    deepspeed, torchtitan, accelerate): the offline search keeps only layouts it runs, and the report
    carries its launch settings; None: any layout, DEFAULT_ENGINE's launch settings (a LoRA/QLoRA
    request: ADAPTER_ENGINE's layouts when one fits). Raises InputError when
    the request lacks a model or the hardware (checked before the LLM is asked), AgentError when the
    LLM is not configured or unreachable. When the LLM fails after that (a server error, a context
    overflow, the deadline), the offline planner answers and the report carries the LLM's error.
    """
    client, llm_model = endpoint.client, endpoint.model
    chosen = resolve_backend(backend, client)
    parsed = require_complete(_request_from(request_text, request, fields))  # before any time goes to the LLM
    text = request_text or _describe(parsed)
    engine = engine or parsed.engine  # an explicit engine (trainplan plan --engine) wins over the text
    adapters = engine is None and parsed.method is not None and is_lora(parsed.method)

    def step(line: str) -> None:
        if on_event:
            on_event("step", {"text": line})

    if chosen == "offline":   # the LLM path's first line is its own (a configuration error is the only line)
        step(f"understood the request: {_describe(parsed)}")
        step("searching layouts (offline planner)")
    if chosen == "offline":
        report = offline_report(parsed, text, engine)
    else:
        if client is None:
            _settings_model()   # the LLM's configuration (environment values) is checked first: one line
        failure: Exception | None = None
        try:
            report, _ = plan_openai(text, parsed, endpoint=endpoint, stream=stream, on_event=on_event,
                                    engine=engine)
            if report.recommended:
                _add_launch(report, engine, adapters)   # a launch failing on the LLM's layout falls back too
        except AgentError as exc:
            if exc.kind == "config":
                raise
            failure = exc
        except Exception as exc:   # a tool failing on the LLM's plan after the request was understood
            failure = InputError(f"the tools failed on its plan: {failure_text(exc)}")
        if failure is not None:
            if on_event:
                on_event("fallback", {"error": str(failure)})
            report = offline_after_llm_failure(parsed, text, failure, llm_model or _settings_model(), engine)
    if report.search:
        step(f"searched {report.search['evaluated']:,} layouts, {report.search['feasible']:,} feasible")
    if report.recommended:
        if report.launch is None:
            _add_launch(report, report.engine or engine, adapters)
        step(f"recommended {report.layout}; writing {report.launch.engine} launch settings")
    else:
        step("no layout fits: the report says what would")
    return report



def _add_launch(report: PlanReport, engine: str | None, adapters: bool) -> None:
    """The launch settings of the recommended layout: `engine`'s, else launch_engine's."""
    launcher = engine or launch_engine(report.request["model"], report.recommended["config"], adapters)
    report.launch = launch_settings(report.request["model"], report.recommended["config"], launcher)


def launch_engine(model: str, config: dict, adapters: bool = False) -> str:
    """The engine whose launch settings a plan that names none carries: DEFAULT_ENGINE when it runs the
    layout, else the first of LAUNCH_FALLBACK that does, else DEFAULT_ENGINE (whose refusal the report
    then states). With LoRA/QLoRA adapters: ADAPTER_ENGINE, else the first of ADAPTER_FALLBACK, likewise."""
    from trainplan.tools.config.contract import Layout
    from trainplan.tools.engines.support import knobs_of, runs
    from trainplan.tools.config.layout import resolve_config

    spec = catalog.load_model(model)
    knobs = knobs_of(resolve_config(spec, config["gpus"], **{k: config.get(k) for k in Layout.model_fields}))
    order = engine_registry.ADAPTER_ORDER if adapters else (DEFAULT_ENGINE, *LAUNCH_FALLBACK)
    return next((e for e in order if bool(runs(e, spec, knobs))), order[0])


def _settings_model() -> str:
    from .config import load_settings

    return load_settings().model


def _describe(request: PlanRequest) -> str:
    """A request written out from fields, for the report and the LLM."""
    given = request.given()
    head = f"Plan training {given.pop('model', '?')} on {given.pop('gpus', '?')} x {given.pop('gpu', '?')}"
    rest = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in given.items())
    return f"{head}{', ' + rest if rest else ''}"
