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

Limits and errors:

- Retries are the openai SDK's own (max_retries, exponential backoff with jitter, Retry-After);
  `make_client` marks errors that repeat deterministically (a server that cannot parse the
  request, a context overflow) as not retryable through the SDK's ``x-should-retry`` header.
- One deadline bounds the whole run (`Settings.deadline_s`): every request gets the time left as
  its timeout and is abandoned when the deadline passes (DeadlineExceeded), whatever the SDK is
  doing (retrying, sleeping on a Retry-After, reading a stream that never ends); with a client
  from `make_client`, the SDK's pending retries of an abandoned request never reach the server.
- A streamed reply is never retried once it has started: tokens already shown are not shown twice.
  A stream that breaks off raises AgentError.
- A reply cut at max_tokens (``finish_reason == "length"``) is final: it comes back with
  `truncated` set and a truncation notice appended to the text.
- A context overflow (HTTP 400 "exceeds the available context size") is retried once with the
  tool results of earlier turns left out or, when there are none, with `small_context_tools`;
  after that it raises AgentError. Tool results go to the model as compact JSON with floats at 6
  significant digits.
- Every failure raises AgentError with one line for the CLI; `kind` says which: "config" (no
  server, authentication, unknown model), "server" (5xx, other 4xx), "context" (overflow),
  "deadline", "stream" or "turns" (the turn cap, MaxTurnsExceeded).

Events sent to `on_event(kind, data)`: "request" {turn, left_s}, "token" {text} (streaming only),
"tool_call" {id, name, arguments}, "tool_result" {id, name, result}, "reask" {numbers},
"reask_tools" {message}, "retry" {attempt, delay_s, error}, "compact" {omitted, tools}.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai

from .config import PLACEHOLDER_API_KEY, Settings, llm_configured, load_settings
from .grounding import GroundingReport, RequestText, check_grounding, mark_ungrounded

__all__ = ["AgentError", "MaxTurnsExceeded", "DeadlineExceeded", "AgentResult", "run_agent", "make_client",
           "REASK_PREFIX", "NO_TOOLS_REASK", "is_reask", "TRUNCATION_NOTICE"]

log = logging.getLogger(__name__)

REASK_PREFIX = "These numbers are not in any tool result:"
NO_TOOLS_REASK = ("You answered without calling any tool, so none of your numbers is checked. Call the tools for "
                  "every number, then call {tool} with the layout you recommend, then answer.")
NO_SUBMIT_REASK = ("You did not call {tool}. Call {tool} with the layout you recommend (it checks that the layout "
                   "fits), then answer.")
TRUNCATION_NOTICE = ("[cut off: this reply reached the limit of {max_tokens} tokens per reply "
                     "(TRAINPLAN_LLM_MAX_TOKENS)]")
OMITTED_RESULT = json.dumps({"omitted": "an earlier tool result, left out to fit the LLM's context; call the "
                                        "tool again if you need it"})
_REASK_PREFIXES = (REASK_PREFIX, NO_TOOLS_REASK.split(",")[0], "You did not call ")
_CONTEXT_OVERFLOW = re.compile(r"exceeds? the available context|context (?:size|length|window)|"
                               r"maximum context|too many tokens", re.IGNORECASE)
_DETERMINISTIC = re.compile(r"failed to parse|parse error|invalid json|" + _CONTEXT_OVERFLOW.pattern,
                            re.IGNORECASE)
_SDK_LOGGER = "openai._base_client"


class AgentError(Exception):
    """The agent cannot go on. str() is one line; `kind` is config, server, context, deadline, stream
    or turns (module docstring). Every kind but config is a failure of this request, after which the
    offline planner can still answer."""

    def __init__(self, message: str, kind: str = "server") -> None:
        super().__init__(message)
        self.kind = kind


class MaxTurnsExceeded(AgentError):
    """The model was still calling tools when the turn cap was reached."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "turns")


class DeadlineExceeded(AgentError):
    """The run's deadline passed before the model gave a final answer."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "deadline")


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


Event = Callable[[str, dict], None]


def is_reask(content: object) -> bool:
    """True for the loop's own re-ask messages (user role, but not the user's words)."""
    return isinstance(content, str) and content.startswith(_REASK_PREFIXES)


class _Abandoned(Exception):
    """Raised inside an abandoned request's worker thread, so that the SDK sends nothing more."""


_worker = threading.local()  # the state of the request a worker thread runs ("cancelled" once abandoned)


def _refuse_abandoned_requests(request: Any) -> None:
    """httpx request hook: after the deadline, the SDK's pending retries of an abandoned request stop
    here instead of reaching the server (an exception that is not an HTTP error is never retried)."""
    state = getattr(_worker, "state", None)
    if state is not None and state["cancelled"]:
        raise _Abandoned("the request was abandoned at the deadline")


def _no_retry_on_deterministic_errors(response: Any) -> None:
    """httpx response hook: a 5xx whose body says the request itself is bad (unparsable, too long)
    repeats identically, so tell the SDK not to retry it (its x-should-retry header)."""
    if response.status_code < 500:
        return
    try:
        body = response.read().decode("utf-8", "replace")
    except Exception:  # a broken body is the SDK's to report
        log.debug("could not read the body of an HTTP %s response", response.status_code, exc_info=True)
        return
    if _DETERMINISTIC.search(body):
        response.headers["x-should-retry"] = "false"


def make_client(settings: Settings | None = None) -> openai.OpenAI:
    """An OpenAI client from the settings, retrying transient errors with the SDK's own retries."""
    settings = settings or load_settings()
    return openai.OpenAI(
        api_key=settings.api_key or PLACEHOLDER_API_KEY,
        base_url=settings.base_url,
        max_retries=settings.max_retries,
        timeout=settings.deadline_s,
        http_client=openai.DefaultHttpxClient(event_hooks={"request": [_refuse_abandoned_requests],
                                                           "response": [_no_retry_on_deterministic_errors]}),
    )


def run_agent(
    user_request: str,
    *,
    system_prompt: str,
    tools: list[dict],
    dispatch: Callable[[str, str], Any],
    client: openai.OpenAI | None = None,
    model: str | None = None,
    max_turns: int = 12,
    stream: bool = False,
    on_event: Event | None = None,
    history: list[dict] | None = None,
    settings: Settings | None = None,
    require_tool: str | None = None,
    small_context_tools: list[dict] | None = None,
    small_context_view: Callable[[Any], Any] | None = None,
) -> AgentResult:
    """Answer `user_request` with the model, calling tools through `dispatch` (module docstring).

    `dispatch(name, arguments_json)` returns a JSON-able result and never raises. `history` is a
    previous AgentResult.messages (its system message is replaced by `system_prompt`). `settings`
    gives the deadline, max_tokens and (when no client is given) the endpoint. `small_context_tools`:
    a leaner tool set to retry with when the server says the request exceeds its context and no
    earlier tool result is left to leave out; from then on, `small_context_view(result)` is what the
    model gets of each tool result (the grounding check keeps the full result).
    """
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
            reply, finish = _request(client, {**request, "messages": messages}, stream, emit, deadline,
                                     settings.deadline_s)
        except openai.BadRequestError as exc:
            # a context overflow: retry once with earlier tool results left out, else with the lean tools
            if not compacted and _CONTEXT_OVERFLOW.search(_detail(exc)) and any(shrink() for shrink in shrinks):
                compacted = True
                continue
            raise AgentError(_error_line(exc, client, model), _kind(exc)) from exc
        except openai.OpenAIError as exc:
            raise AgentError(_error_line(exc, client, model), _kind(exc)) from exc
        messages.append(reply)
        if reply.get("tool_calls"):
            for call in reply["tool_calls"]:
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                emit("tool_call", {"id": call["id"], "name": name, "arguments": arguments})
                problem = _arguments_problem(name, arguments, finish)
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
        report = check_grounding(text, sources)
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
    """Why a call's arguments cannot be run (not JSON, not an object), or None."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        cut = ", cut off at the reply's token limit" if finish == "length" else ""
        return (f"{name}: the arguments are not valid JSON{cut} ({exc.msg} at column {exc.colno}), so the tool "
                f"did not run: call {name} again with one complete JSON object")
    if not isinstance(value, dict):
        return f"{name}: the arguments must be one JSON object, not {type(value).__name__}: call {name} again"
    return None


def _sources(messages: list[dict]) -> list[Any]:
    """Grounding sources already in the conversation: user requests (not re-asks) and tool results."""
    out: list[Any] = []
    for m in messages:
        content = m.get("content")
        if m["role"] == "tool":
            try:
                out.append(json.loads(content))
            except (TypeError, json.JSONDecodeError):
                out.append(content)
        elif m["role"] == "user" and isinstance(content, str) and not is_reask(content):
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


# --- one request, bounded by the deadline ----------------------------------------------------------


def _request(client: openai.OpenAI, kwargs: dict, stream: bool, emit: Event, deadline: float,
             deadline_s: float) -> tuple[dict, str | None]:
    """One chat completion as (assistant message, finish_reason), abandoned at the deadline.

    It runs in a worker thread so that nothing the SDK does (retries, Retry-After sleeps, a server
    that never answers or streams forever) can outlast the deadline; events from an abandoned
    request are dropped."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(_deadline_line(deadline_s))
    state: dict[str, Any] = {"cancelled": False, "stream": None, "tokens": 0}
    box: dict[str, Any] = {}

    def guarded(kind: str, data: dict) -> None:
        if not state["cancelled"]:
            emit(kind, data)

    def work() -> None:
        _worker.state = state
        try:
            # the SDK's own timeout just after the deadline: the deadline, not the SDK, says when to stop
            box["value"] = _complete(client, {**kwargs, "timeout": left + 1.0}, stream, guarded, state)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="trainplan-llm-request", daemon=True)
    with _sdk_retry_events(guarded):
        worker.start()
        worker.join(left)
    if worker.is_alive():
        state["cancelled"] = True
        if state["stream"] is not None:
            try:
                state["stream"].close()
            except Exception:  # the worker may be closing it too
                log.debug("closing an abandoned stream failed", exc_info=True)
        raise DeadlineExceeded(_deadline_line(deadline_s))
    if "error" in box:
        raise box["error"]
    return box["value"]


def _deadline_line(deadline_s: float) -> str:
    return (f"the LLM gave no final answer within the {deadline_s:g} s deadline; raise TRAINPLAN_LLM_DEADLINE_S "
            "or use a faster model")


@contextmanager
def _sdk_retry_events(emit: Event) -> Iterator[None]:
    """Turn the openai SDK's own retry log records into "retry" events while a request runs."""
    logger = logging.getLogger(_SDK_LOGGER)

    class Bridge(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.attempt = 0
            self.error = "error"

        def emit(self, record: logging.LogRecord) -> None:
            if record.threadName != "trainplan-llm-request":
                return
            message = record.msg if isinstance(record.msg, str) else ""
            if message.startswith("Encountered"):
                self.error = record.getMessage().removeprefix("Encountered ").removeprefix("an ")
            elif message.startswith("Retrying request in") and record.args:
                self.attempt += 1
                emit("retry", {"attempt": self.attempt, "delay_s": float(record.args[0]), "error": self.error})

    bridge = Bridge()
    level = logger.level
    logger.addHandler(bridge)
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(bridge)
        logger.setLevel(level)


def _complete(client: openai.OpenAI, kwargs: dict, stream: bool, emit: Event, state: dict) -> tuple[dict, str | None]:
    """One chat completion, as the assistant message to append and its finish_reason."""
    if stream:
        chunks = client.chat.completions.create(**kwargs, stream=True)
        state["stream"] = chunks
        return _complete_streaming(chunks, emit, state)
    response = client.chat.completions.create(**kwargs)
    if not response.choices:
        raise AgentError(f"the LLM server at {client.base_url} returned no choices for model '{kwargs['model']}'")
    choice = response.choices[0]
    message = choice.message
    return _assistant(message.content, [
        (c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]), choice.finish_reason


def _complete_streaming(chunks: openai.Stream, emit: Event, state: dict) -> tuple[dict, str | None]:
    """Assemble a streamed reply: content pieces, and tool calls accumulated by their index.
    A stream that breaks off is not retried (its tokens were shown): it raises AgentError."""
    text: list[str] = []
    slots: dict[int, list] = {}  # index -> [id, name, arguments]
    finish = None
    try:
        with chunks:
            for chunk in chunks:
                if state["cancelled"]:
                    break
                if not chunk.choices:
                    continue  # e.g. a usage-only chunk
                choice = chunk.choices[0]
                finish = choice.finish_reason or finish
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    state["tokens"] += 1
                    emit("token", {"text": delta.content})
                for piece in delta.tool_calls or []:
                    slot = slots.setdefault(len(slots) if piece.index is None else piece.index, [None, "", ""])
                    slot[0] = piece.id or slot[0]
                    if piece.function:
                        slot[1] += piece.function.name or ""
                        slot[2] += piece.function.arguments or ""
    except (openai.APIError, OSError, ValueError) as exc:
        if state["cancelled"]:
            raise AgentError("the request was abandoned at the deadline", "deadline") from exc
        raise AgentError(f"the LLM server's stream broke off after {state['tokens']} text pieces "
                         f"({_one_line(_detail(exc))}); not retried, so nothing is shown twice", "stream") from exc
    return _assistant("".join(text) or None, [tuple(slots[i]) for i in sorted(slots)]), finish


def _assistant(content: str | None, calls: list[tuple]) -> dict:
    """An assistant message dict; missing call ids are filled in, empty arguments become "{}"."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call_id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": arguments or "{}"}}
            for call_id, name, arguments in calls
        ]
    return message


# --- errors ----------------------------------------------------------------------------------------


def _detail(exc: Exception) -> str:
    """The server's own message of an SDK error, when it sent one."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if inner.get("message"):
            return str(inner["message"])
    return str(getattr(exc, "message", None) or exc)


def _kind(exc: Exception) -> str:
    """AgentError.kind of an SDK error."""
    if isinstance(exc, openai.APITimeoutError):
        return "server"
    if isinstance(exc, openai.APIConnectionError):
        return "config"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in (401, 403, 404):
            return "config"
        if _CONTEXT_OVERFLOW.search(_detail(exc)):
            return "context"
    return "server"


def _error_line(exc: Exception, client: openai.OpenAI, model: str) -> str:
    """One line that says what failed and what to check."""
    url = str(client.base_url).rstrip("/")
    if isinstance(exc, openai.APITimeoutError):
        return f"the LLM server at {url} timed out; check OPENAI_BASE_URL or use --backend offline"
    if isinstance(exc, openai.APIConnectionError):
        return (f"cannot reach the LLM server at {url}: {_one_line(exc.__cause__ or exc)}; "
                "check OPENAI_BASE_URL or use --backend offline")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        hint = {401: "check OPENAI_API_KEY", 403: "check OPENAI_API_KEY",
                404: f"check TRAINPLAN_MODEL (now '{model}') and OPENAI_BASE_URL",
                429: "wait, or check the account's quota"}.get(status, "")
        if _CONTEXT_OVERFLOW.search(_detail(exc)):
            hint = "the conversation is longer than the model's context: start a new one or give the server more context"
        verb = "failed" if status >= 500 else "rejected the request"
        line = f"the LLM server at {url} {verb} with HTTP {status}: {_one_line(_detail(exc))}"
        return f"{line}; {hint}" if hint else line
    return f"the LLM request to {url} failed: {_one_line(exc)}"


def _one_line(value: object, limit: int = 300) -> str:
    """`value` as text on one line, at most `limit` characters."""
    text = re.sub(r"\s+", " ", str(value)).strip() or type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
