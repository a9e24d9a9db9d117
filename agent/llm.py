"""The function-calling loop over the openai SDK's chat completions.

Works with any OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp). One call of run_agent:

1. sends the system prompt, the history and the request, with the tool schemas and max_tokens;
2. runs every tool call of an assistant message (parallel calls included) through `dispatch` and
   answers each with a tool message carrying its `tool_call_id`; a tool error is just a result
   (``{"error": ...}``) that goes back to the model, and the loop continues. Arguments that are
   not valid JSON (typically cut off at max_tokens) are not run: the history keeps ``{}`` in their
   place, so that a strict server (llama.cpp) can parse it again, and the tool message says what
   was wrong;
3. on a final answer: when `require_tool` is set and the model has not called it successfully in
   this run, the model is re-asked once (to use the tools at all, or to call `require_tool`);
   then the answer's numbers are checked against this conversation's tool results and user
   requests (agent/grounding.py). If some are ungrounded it re-asks once more, naming them; any
   that remain after that are marked in the returned text with `` [ungrounded]``.

Limits and errors (one request, its retries and its errors: agent/llm_client.py):

- Retries are the openai SDK's own (max_retries, backoff with jitter, Retry-After), except for
  errors that repeat deterministically; a streamed reply that has started is never retried.
- One deadline bounds the whole run (`Settings.deadline_s`): each request gets the time left.
- A reply cut at max_tokens (``finish_reason == "length"``) is final: it comes back with
  `truncated` set and a truncation notice appended to the text.
- A context overflow (HTTP 400 "exceeds the available context size") is retried once with the
  tool results of earlier turns left out or, when there are none, with `small_context_tools`;
  after that it raises AgentError. Tool results go to the model as compact JSON with floats at 6
  significant digits.
- Every failure raises AgentError with one line for the CLI and a `kind`; MaxTurnsExceeded at the
  turn cap.

Events sent to `on_event(kind, data)`: "request" {turn, left_s}, "token" {text} (streaming only),
"tool_call" {id, name, arguments}, "tool_result" {id, name, result}, "reask" {numbers},
"reask_tools" {message}, "retry" {attempt, delay_s, error}, "compact" {omitted, tools}.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai

from trainplan.tools.core import safe_json
from trainplan.tools.core.errors import InputError

from .config import LlmEndpoint, llm_configured, load_settings
from .grounding import GroundingReport, GroundingTimeout, RequestText, check_grounding, mark_ungrounded
from .llm_client import (AgentError, DeadlineExceeded, Event, MaxTurnsExceeded, deadline_line, error_kind,
                         error_line, is_context_overflow, make_client, request_completion)

__all__ = ["AgentError", "MaxTurnsExceeded", "DeadlineExceeded", "AgentResult", "AgentToolset", "run_agent",
           "make_client",
           "REASK_PREFIX", "NO_TOOLS_REASK", "is_reask", "TRUNCATION_NOTICE"]

REASK_PREFIX = "These numbers are not in any tool result:"
NO_TOOLS_REASK = ("You answered without calling any tool, so none of your numbers is checked. Call the tools for "
                  "every number, then call {tool} with the layout you recommend, then answer.")
NO_SUBMIT_REASK = ("You did not call {tool}. Call {tool} with the layout you recommend (it checks that the layout "
                   "fits), then answer.")
TRUNCATION_NOTICE = ("[cut off: this reply reached the limit of {max_tokens} tokens per reply "
                     "(TRAINPLAN_LLM_MAX_TOKENS)]")
OMITTED_RESULT = json.dumps({"omitted": "an earlier tool result, left out to fit the LLM's context; call the "
                                        "tool again if you need it"})
MAX_CALLS_PER_REPLY = 16
"""Tool calls run from one reply; any more are answered with an error without running (a plan needs a
handful: search, estimate, cost, submit)."""
_REASK_PREFIXES = (REASK_PREFIX, NO_TOOLS_REASK.split(",")[0], "You did not call ")


@dataclass(frozen=True)
class AgentToolset:
    """The tools one run_agent call offers: their schemas, `dispatch(name, arguments_json)` (a JSON-able result,
    never raising), the tool the model must call before it answers (None: none), and the leaner schemas and
    view of results for a server whose context is small (run_agent)."""

    tools: list[dict]
    dispatch: Callable[[str, str], Any]
    require_tool: str | None = None
    small_context_tools: list[dict] | None = None
    small_context_view: Callable[[Any], Any] | None = None


@dataclass
class AgentResult:
    """The outcome of run_agent."""

    text: str  # the final answer; ungrounded numbers left after the re-ask carry " [ungrounded]"
    messages: list[dict]  # the whole conversation, system prompt first; pass it as `history`
    tool_calls: list[dict]  # this run's calls in order: {id, name, arguments (JSON text), result}
    grounding: GroundingReport  # the check of the final answer as the model wrote it
    reasked: bool  # whether the re-ask about ungrounded numbers was sent
    model: str  # the model name requested
    turns: int = field(default=0)  # requests sent to the server
    truncated: bool = False  # the final reply was cut at max_tokens (finish_reason "length")
    tools_reasked: bool = False  # whether the model was re-asked to use the tools / call require_tool



def is_reask(content: object) -> bool:
    """True for the loop's own re-ask messages (user role, but not the user's words)."""
    return isinstance(content, str) and content.startswith(_REASK_PREFIXES)


def run_agent(
    user_request: str,
    *,
    system_prompt: str,
    toolset: AgentToolset,
    endpoint: LlmEndpoint = LlmEndpoint(),
    max_turns: int = 12,
    stream: bool = False,
    on_event: Event | None = None,
    history: list[dict] | None = None,
) -> AgentResult:
    """Answer `user_request` with the model, calling tools through `dispatch` (module docstring).

    `toolset.dispatch(name, arguments_json)` returns a JSON-able result and never raises. `history` is a
    previous AgentResult.messages (its system message is replaced by `system_prompt`). `endpoint.settings`
    gives the deadline, max_tokens and (when no client is given) the endpoint. `toolset.small_context_tools`:
    a leaner tool set to retry with when the server says the request exceeds its context and no
    earlier tool result is left to leave out; from then on, `toolset.small_context_view(result)` is what the
    model gets of each tool result (the grounding check keeps the full result).
    """
    tools, dispatch, require_tool = toolset.tools, toolset.dispatch, toolset.require_tool
    small_context_tools, small_context_view = toolset.small_context_tools, toolset.small_context_view
    client, model, settings = endpoint.client, endpoint.model, endpoint.settings
    if client is None and not llm_configured():
        raise AgentError("no LLM configured: set OPENAI_API_KEY or OPENAI_BASE_URL, or use --backend offline",
                         "config")
    settings = settings or load_settings()
    client = client or make_client(settings)
    model = model or settings.model
    emit: Event = on_event or (lambda kind, data: None)
    deadline = time.monotonic() + settings.deadline_s
    messages = [{"role": "system", "content": system_prompt}]
    messages += [dict(m) for m in history or [] if m.get("role") != "system"]  # copies: a failed run changes nothing
    this_run = len(messages)
    messages.append({"role": "user", "content": user_request})
    sources = _sources(messages)
    calls: list[dict] = []
    reasked = tools_reasked = compacted = False
    request = {"model": model, "max_tokens": settings.max_tokens, **({"tools": tools} if tools else {})}
    view: list[Callable[[Any], Any]] = []  # the model's view of tool results, once the context is small

    def go_small() -> bool:
        if small_context_tools is None or not _use_tools(request, small_context_tools, emit):
            return False
        if small_context_view is not None:
            view.append(small_context_view)
        return True

    shrinks = [lambda: _compact(messages, this_run, emit), go_small]
    for turn in range(1, max_turns + 1):
        emit("request", {"turn": turn, "left_s": max(0.0, deadline - time.monotonic())})
        try:
            reply, finish = request_completion(client, {**request, "messages": messages}, stream, emit, deadline,
                                     settings.deadline_s)
        except openai.BadRequestError as exc:
            # a context overflow: retry once with earlier tool results left out, else with the lean tools
            if not compacted and is_context_overflow(exc) and any(shrink() for shrink in shrinks):
                compacted = True
                continue
            raise AgentError(error_line(exc, client, model), error_kind(exc)) from exc
        except openai.OpenAIError as exc:
            raise AgentError(error_line(exc, client, model), error_kind(exc)) from exc
        messages.append(reply)
        if reply.get("tool_calls"):
            for index, call in enumerate(reply["tool_calls"]):
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                if time.monotonic() >= deadline:  # each call may take seconds: the deadline holds between them
                    raise DeadlineExceeded(deadline_line(settings.deadline_s))
                emit("tool_call", {"id": call["id"], "name": name, "arguments": arguments})
                problem = _arguments_problem(name, arguments, finish)
                if index >= MAX_CALLS_PER_REPLY:
                    problem = (f"{name}: not run: one reply may make at most {MAX_CALLS_PER_REPLY} tool calls; "
                               "call the ones you need again in the next reply")
                if problem:
                    result: Any = {"error": problem}
                    call["function"]["arguments"] = "{}"  # valid JSON in the history; the error says why
                else:
                    result = dispatch(name, arguments)
                emit("tool_result", {"id": call["id"], "name": name, "result": result})
                calls.append({"id": call["id"], "name": name, "arguments": arguments, "result": result})
                sources.append(result)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": _tool_content(view[0](result) if view else result)})
            continue
        text = reply.get("content") or ""
        truncated = finish == "length"
        last_turn = turn == max_turns
        # a reply without the required tool is no plan, cut off or not: re-ask once
        if require_tool and not last_turn and not tools_reasked and not _succeeded(calls, require_tool):
            tools_reasked = True
            template = NO_SUBMIT_REASK if calls else NO_TOOLS_REASK
            message = template.format(tool=require_tool)
            emit("reask_tools", {"message": message})
            messages.append({"role": "user", "content": message})
            continue
        try:
            report = check_grounding(text, sources, deadline=deadline)
        except GroundingTimeout:
            raise DeadlineExceeded(deadline_line(settings.deadline_s)) from None
        unwilling = tools_reasked and not calls  # re-asked to use the tools, and still did not: final
        if report.ok or reasked or truncated or last_turn or unwilling or not text.strip():
            final = mark_ungrounded(text, report.ungrounded)
            if truncated:
                final = f"{final}\n\n{TRUNCATION_NOTICE.format(max_tokens=settings.max_tokens)}"
            return AgentResult(final, messages, calls, report, reasked, model, turn, truncated, tools_reasked)
        reasked = True
        numbers = list(dict.fromkeys(m.text for m in report.ungrounded))
        emit("reask", {"numbers": numbers})
        messages.append({"role": "user", "content": f"{REASK_PREFIX} {', '.join(numbers)}. "
                         "Call a tool for them or remove them."})
    raise MaxTurnsExceeded(f"the model was still calling tools after {max_turns} turns "
                           "(the turn cap); simplify the request or raise max_turns")


def _use_tools(request: dict, tools: list[dict], emit: Event) -> bool:
    """Switch the request to a leaner tool set; True when that changed something."""
    if request.get("tools") == tools:
        return False
    request["tools"] = tools
    emit("compact", {"omitted": 0, "tools": [t["function"]["name"] for t in tools]})
    return True


def _rounded(value: Any, digits: int = 6) -> Any:
    """Floats at `digits` significant digits, everywhere in a JSON-like value."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    return value


def _tool_content(result: Any) -> str:
    """A tool result as the model gets it: compact JSON with floats at 6 significant digits (a float's 17
    digits cost tokens and say nothing more at a plan's precision). The grounding check keeps the full
    result."""
    return json.dumps(_rounded(result), separators=(",", ":"))


def _succeeded(calls: list[dict], name: str) -> bool:
    return any(c["name"] == name and not (isinstance(c["result"], dict) and "error" in c["result"]) for c in calls)


def _arguments_problem(name: str, arguments: str, finish: str | None) -> str | None:
    """Why a call's arguments cannot be run (not JSON, not an object, past safe_json's limits), or None."""
    try:
        value = safe_json.loads(arguments or "{}", f"{name}: the arguments", safe_json.ARGUMENTS)
    except InputError as exc:
        message = str(exc).removesuffix(": fix it")
        if finish == "length" and " not valid JSON" in message:
            message = message.replace(" not valid JSON", " not valid JSON, cut off at the reply's token limit", 1)
        return f"{message}, so the tool did not run: call {name} again with one complete JSON object"
    if not isinstance(value, dict):
        return f"{name}: the arguments must be one JSON object, not {type(value).__name__}: call {name} again"
    return None


def _sources(messages: list[dict]) -> list[Any]:
    """Grounding sources already in the conversation: user requests (not re-asks) and tool results."""
    out: list[Any] = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "tool":
            try:
                out.append(safe_json.loads(content, "a tool result", safe_json.TRANSCRIPT))
            except (TypeError, InputError):
                out.append(content)
        elif m.get("role") == "user" and isinstance(content, str) and not is_reask(content):
            out.append(RequestText(content))
    return out


def _compact(messages: list[dict], before: int, emit: Event) -> bool:
    """Leave out the tool results of earlier turns (index < before); True when something was left out."""
    omitted = 0
    for message in messages[:before]:
        if message.get("role") == "tool" and message.get("content") != OMITTED_RESULT:
            message["content"] = OMITTED_RESULT
            omitted += 1
    if omitted:
        emit("compact", {"omitted": omitted})
    return bool(omitted)


