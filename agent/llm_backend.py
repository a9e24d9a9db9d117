"""The LLM backend of `plan`: the function-calling loop (agent/llm.py) with the rendered system prompt and
the registry's tools (agent/toolset.py's lean schemas), and the report of its conversation.

The recommended layout is the one the model hands over with submit_plan, re-evaluated with `estimate`; the
model's text is the rationale and its grounding check goes in the report. Prose is never parsed for a layout:
when the model does not submit (after one re-ask), the offline planner's layout is used and the report says
so. When the tools refuse or fail on the submitted layout, or the LLM fails on a complete request, the
offline plan (agent/offline_plan.py) is returned, labelled with the failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from trainplan.agent.prompt_text import system_prompt
from trainplan.tools.hardware import catalog
from trainplan.tools.core import safe_json
from trainplan.tools.perf.cost import parse_tokens
from trainplan.tools.core.errors import InputError
from trainplan.tools.core.file_access import user_named_files
from trainplan.agent.registry import dispatch

from .config import LlmEndpoint
from .job_defaults import complete_request, shown_job
from .offline_plan import distinct_results, offline_report
from .plan_search import ALTERNATIVES, evaluate_for_job
from .prose import neutralise, neutralise_line
from .report import Grounding, LayoutChoice, PlanReport, ReportNotes, ReportOrigin, build_report
from .request_rules import json_paths_in
from .request import PlanRequest, require_complete
from .toolset import SUBMIT_PLAN, agent_tools, lean_agent_tools, lean_result, submitted_layout

__all__ = ["calls_from_messages", "failure_text", "grounding_of", "offline_after_llm_failure", "plan_openai",
           "report_from_conversation", "run_llm"]

_CONFIG_TOOLS = ("estimate_step_time", "calculate_memory", "search_configs", "submit_plan")


def _configs_in(calls: list[dict]) -> list[tuple[int, str, dict]]:
    """(order, tool, config) of every layout the tools evaluated in a conversation, latest last."""
    out = []
    for i, call in enumerate(calls):
        result = call.get("result")
        if call["name"] not in _CONFIG_TOOLS or not isinstance(result, dict) or "error" in result:
            continue
        if call["name"] == "search_configs":
            for rank, candidate in enumerate(result.get("candidates", [])):
                out.append((i - rank * 1e-3, "search_configs", candidate["config"]))
        elif result.get("fits", True) and "config" in result:
            out.append((i, call["name"], result["config"]))
    return out


def _job_from_submission(partial: PlanRequest, config: dict, arguments: dict) -> PlanRequest:
    """The request as the submission settled it: the submitted layout's job; tokens and price from the
    request, else from the submission."""
    given: dict[str, Any] = {"model": partial.model or config["model"], "gpu": partial.gpu or config["gpu"],
                             "gpus": config["gpus"], "seq": config["seq"], "gbs": config["gbs"],
                             "precision": config["precision"]}
    if partial.model and catalog.load_model(partial.model).name != config["model"]:
        given["model"] = config["model"]
    if partial.gpu and catalog.load_gpu(partial.gpu).name != config["gpu"]:
        given["gpu"] = config["gpu"]
    for key in ("tokens", "price"):
        if arguments.get(key) is not None and getattr(partial, key) is None:
            given[key] = parse_tokens(arguments[key]) if key == "tokens" else arguments[key]
    data = partial.model_dump()
    data.update({k: v for k, v in given.items() if v is not None})
    return PlanRequest(**data)


def calls_from_messages(messages: list[dict]) -> list[dict]:
    """Tool calls of a conversation, each with its result: {id, name, arguments, result}."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    calls = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            content = results.get(call["id"])
            try:
                result = (safe_json.loads(content, "a tool result", safe_json.TRANSCRIPT)
                          if isinstance(content, str) else content)
            except InputError:
                result = None
            calls.append({"id": call["id"], "name": call["function"]["name"],
                          "arguments": call["function"]["arguments"], "result": result})
    return calls


def grounding_of(report: Any, reasked: bool = False, called_tools: bool = True) -> Grounding:
    """A Grounding from agent.grounding's GroundingReport; not ok when the LLM called no tool."""
    status = ("no_tool_calls" if not called_tools else "empty_answer" if report.empty
              else "grounded" if report.ok else "ungrounded")
    share = report.share_grounded
    if not called_tools and share is not None:
        share = 0.0  # no tool result grounds anything: numbers echoed from the request check nothing
    return Grounding(ok=report.ok and called_tools, status=status, share_grounded=share,
                     grounded=len(report.grounded), weak=[neutralise_line(g.mention.text) for g in report.weak],
                     from_request=[neutralise_line(g.mention.text) for g in report.from_request],
                     ungrounded=[neutralise_line(m.text) for m in report.ungrounded], reasked=reasked)


def _parsed_arguments(arguments: Any) -> dict:
    try:
        parsed = (safe_json.loads(arguments or "{}", "the arguments", safe_json.ARGUMENTS)
                  if isinstance(arguments, str) else arguments)
    except InputError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def report_from_conversation(request_text: str, partial: PlanRequest, *, text: str, calls: list[dict],
                             grounding: Grounding | None, llm_model: str | None, truncated: bool = False,
                             engine: str | None = None) -> PlanReport:
    """The report of an LLM conversation, built from its last accepted submit_plan call and re-evaluated
    with the tools. Without one, the offline planner's layout, and the report says so. When the tools
    refuse the submitted layout on re-evaluation (its model, a value) or fail on it, the plan is not lost:
    the offline planner's (for `engine`), labelled with the failure (offline_after_llm_failure)."""
    tool_calls = [{"name": c["name"], "arguments": _parsed_arguments(c["arguments"])} for c in calls]
    submitted = submitted_layout(calls)
    if submitted is None:
        require_complete(partial)
        report = offline_report(partial, request_text, engine)
        status = "no_submission" if calls else "no_tool_calls"
        said = ("the LLM called no tool, so it gave no grounded plan" if not calls else
                "the LLM did not submit a layout with submit_plan")
        return report.model_copy(update={
            "backend": "openai", "llm_model": neutralise_line(llm_model) or None, "llm_status": status,
            "llm_answer": neutralise(text),
            "grounding": grounding, "tool_calls": tool_calls, "truncated": truncated,
            "assumptions": [*report.assumptions, f"{said}: the recommended layout and every number in this "
                            "report are the offline planner's (search + estimate)"]})
    turn = LlmTurn(text=text, calls=calls, tool_calls=tool_calls, grounding=grounding, llm_model=llm_model,
                   truncated=truncated)
    try:
        return _report_of_submission(request_text, partial, submitted, turn)
    except Exception as exc:   # whatever the tools refuse or break on, the request still gets its plan
        return _offline_after_submission(request_text, partial, exc, turn, engine)


def failure_text(exc: Exception) -> str:
    """An exception as a report states it: the message, and the kind when it is not an input error."""
    message = str(exc).strip() or type(exc).__name__
    return message if isinstance(exc, InputError) else f"{type(exc).__name__}: {message}"


def _offline_after_submission(request_text: str, partial: PlanRequest, exc: Exception, turn: LlmTurn,
                              engine: str | None) -> PlanReport:
    """The labelled offline plan of a request whose submitted layout the tools could not re-evaluate; a request
    the offline planner cannot complete raises the original refusal (an InputError: one line)."""
    try:
        require_complete(partial)
    except InputError:
        if isinstance(exc, InputError):
            raise exc from None
        raise InputError(f"the LLM's plan could not be re-evaluated ({failure_text(exc)}), and the request "
                         "lacks what the offline planner needs: name the model, the GPU and the GPU count") from None
    error = f"the tools refused the layout it submitted: {failure_text(exc)}"
    report = offline_after_llm_failure(partial, request_text, InputError(error), turn.llm_model, engine)
    return report.model_copy(update={"llm_answer": turn.text, "grounding": turn.grounding,
                                     "tool_calls": turn.tool_calls})


@dataclasses.dataclass(frozen=True)
class LlmTurn:
    """What the LLM's conversation gave: its text, its raw tool calls and their parsed arguments
    (tool_calls), the grounding check of its text, the model that answered, and whether it was cut short."""
    text: str
    calls: list[dict]
    tool_calls: list[dict]
    grounding: Grounding | None
    llm_model: str | None
    truncated: bool


def _report_of_submission(request_text: str, partial: PlanRequest, submitted: tuple[dict, dict],
                          turn: LlmTurn) -> PlanReport:
    """The report of an accepted submit_plan call, its layout re-evaluated with the tools."""
    arguments, result = submitted
    config = result["config"]
    job, assumptions = complete_request(_job_from_submission(partial, config, arguments))
    recommended = evaluate_for_job(config, job, timeline=True)
    others = []
    for _, _, other in _configs_in(turn.calls):
        if other != config and all(other.get(k) == job[k] for k in ("seq", "gbs")):
            try:
                others.append(evaluate_for_job(other, job))
            except InputError:
                continue
    others = distinct_results(sorted(others, key=lambda r: -r.get("time", {}).get("tokens_per_s", 0.0)), recommended)
    report = build_report(ReportOrigin(backend="openai", request_text=request_text,
                                       llm_model=neutralise_line(turn.llm_model) or None, tool_calls=turn.tool_calls,
                                       grounding=turn.grounding),
                          LayoutChoice(request=shown_job(job), recommended=recommended,
                                       alternatives=others[:ALTERNATIVES]),
                          ReportNotes(rationale=neutralise(turn.text), assumptions=assumptions))
    return report.model_copy(update={"llm_status": "submitted", "truncated": turn.truncated})


def run_llm(request_text: str, *, endpoint: LlmEndpoint = LlmEndpoint(), stream: bool = False,
            on_event: Callable[[str, dict], None] | None = None, history: list[dict] | None = None,
            max_turns: int = 16, require_submit: bool = True) -> Any:
    """One run of the function-calling loop with the system prompt and the registry's tools."""
    from .config import load_settings
    from .llm import AgentToolset, run_agent

    settings = endpoint.settings or load_settings()
    # The LLM's tool calls may open the files the user's own words named (this request and earlier
    # turns); any other file only under the allowed roots (tools/core/file_access.py).
    user_text = [request_text, *(m.get("content") for m in history or ()
                                 if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str))]
    with user_named_files([path for text in user_text for path in json_paths_in(text)]):
        toolset = AgentToolset(tools=agent_tools(strict=True), dispatch=dispatch,
                               require_tool=SUBMIT_PLAN if require_submit else None,
                               small_context_tools=lean_agent_tools(strict=True), small_context_view=lean_result)
        return run_agent(request_text, system_prompt=system_prompt(), toolset=toolset,
                         endpoint=LlmEndpoint(client=endpoint.client, model=endpoint.model or settings.model,
                                              settings=settings),
                         max_turns=max_turns, stream=stream, on_event=on_event, history=history)


def plan_openai(request_text: str, partial: PlanRequest, *, endpoint: LlmEndpoint = LlmEndpoint(),
                stream: bool = False, on_event: Callable[[str, dict], None] | None = None,
                history: list[dict] | None = None, engine: str | None = None) -> tuple[PlanReport, Any]:
    """Run the agent and build the report from its submit_plan call; returns (report, AgentResult). engine: the
    offline plan's, should the tools refuse the submitted layout."""
    result = run_llm(request_text, endpoint=endpoint, stream=stream, on_event=on_event, history=history)
    grounding = grounding_of(result.grounding, result.reasked, called_tools=bool(result.tool_calls))
    report = report_from_conversation(request_text, partial, text=result.text, calls=result.tool_calls,
                                      grounding=grounding, llm_model=result.model, truncated=result.truncated,
                                      engine=engine)
    return report, result


def offline_after_llm_failure(request: PlanRequest, request_text: str, error: Exception,
                              llm_model: str | None, engine: str | None = None) -> PlanReport:
    """The offline plan of a complete request whose LLM run failed, labelled with the LLM's error."""
    report = offline_report(request, request_text, engine)
    return report.model_copy(update={"llm_model": neutralise_line(llm_model) or None, "llm_status": "failed",
                                     "llm_error": neutralise_line(str(error))})
