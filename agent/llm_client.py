"""One chat completion for the agent loop (agent/llm.py): the openai client, the deadline, the
errors.

- `make_client` builds the client with the SDK's own retries (max_retries, backoff with jitter,
  Retry-After) and two httpx hooks: a 5xx whose body says the request itself is bad (unparsable,
  too long) is marked not retryable through the SDK's ``x-should-retry`` header, since it repeats
  identically; and the pending retries of a request abandoned at the deadline never reach the
  server.
- `request_completion` runs one request in a worker thread and abandons it when the deadline
  passes (DeadlineExceeded), whatever the SDK is doing (retrying, sleeping on a Retry-After,
  reading a stream that never ends); events from an abandoned request are dropped. The SDK's retry
  log records become "retry" events.
- A streamed reply is never retried once it has started, so tokens already shown are not shown
  twice: a stream that breaks off raises AgentError ("stream").
- Every failure is an AgentError with one line for the CLI (`error_line`); its `kind` is config
  (no server, authentication, unknown model), server (5xx, other 4xx), context (overflow),
  deadline, stream or turns.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import openai

from .agent_errors import AgentError, DeadlineExceeded, MaxTurnsExceeded
from .config import PLACEHOLDER_API_KEY, Settings, load_settings

__all__ = ["AgentError", "MaxTurnsExceeded", "DeadlineExceeded", "Event", "make_client", "request_completion",
           "deadline_line",
           "error_line", "error_kind", "is_context_overflow", "detail"]

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())

Event = Callable[[str, dict], None]
_CONTEXT_OVERFLOW = re.compile(r"exceeds? the available context|context (?:size|length|window)|"
                               r"maximum context|too many tokens", re.IGNORECASE)
_DETERMINISTIC = re.compile(r"failed to parse|parse error|invalid json|" + _CONTEXT_OVERFLOW.pattern,
                            re.IGNORECASE)
_SDK_LOGGER = "openai._base_client"


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


# --- one request, bounded by the deadline ----------------------------------------------------------


def request_completion(client: openai.OpenAI, kwargs: dict, stream: bool, emit: Event, deadline: float,
             deadline_s: float) -> tuple[dict, str | None]:
    """One chat completion as (assistant message, finish_reason), abandoned at the deadline.

    It runs in a worker thread so that nothing the SDK does (retries, Retry-After sleeps, a server
    that never answers or streams forever) can outlast the deadline; events from an abandoned
    request are dropped."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(deadline_line(deadline_s))
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
        raise DeadlineExceeded(deadline_line(deadline_s))
    if "error" in box:
        raise box["error"]
    return box["value"]


def deadline_line(deadline_s: float) -> str:
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


class _Malformed(ValueError):
    """A reply that is not a chat completion (module docstring: a hostile or broken server)."""


def _get(obj: Any, name: str, where: str) -> Any:
    """obj.name of an SDK object (or a dict), None when absent; _Malformed when obj cannot have fields."""
    if isinstance(obj, dict):
        return obj.get(name)
    if obj is None or isinstance(obj, (str, bytes, int, float, bool, list, tuple)):
        raise _Malformed(f"{where} is {_kind(obj)}, not an object")
    return getattr(obj, name, None)


def _kind(value: Any) -> str:
    return {str: "a string", list: "a list", tuple: "a list", type(None): "missing", bool: "true/false",
            int: "a number", float: "a number", dict: "an object"}.get(type(value), type(value).__name__)


def _optional_text(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Malformed(f"{where} is {_kind(value)}, not text")
    return value


def _list(value: Any, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{where} is {_kind(value)}, not a list")
    return value


def _malformed_line(client: openai.OpenAI, exc: Exception) -> str:
    return (f"the LLM server at {str(client.base_url).rstrip('/')} sent a reply that is not a chat completion "
            f"({_one_line(exc, 160)}); check OPENAI_BASE_URL, or use --backend offline")


def _complete(client: openai.OpenAI, kwargs: dict, stream: bool, emit: Event, state: dict) -> tuple[dict, str | None]:
    """One chat completion, as the assistant message to append and its finish_reason; a reply that is not a
    chat completion (not JSON, `choices` a string, no message, arguments a list) is an AgentError."""
    if stream:
        try:
            chunks = client.chat.completions.create(**kwargs, stream=True)
        except (_Malformed, ValueError, TypeError, AttributeError, KeyError) as exc:
            raise AgentError(_malformed_line(client, exc)) from exc
        state["stream"] = chunks
        return _complete_streaming(chunks, emit, state, client)
    try:
        response = client.chat.completions.create(**kwargs)
        choices = _list(_get(response, "choices", "the reply"), "choices")
        if not choices:
            raise AgentError(f"the LLM server at {client.base_url} returned no choices for model '{kwargs['model']}'")
        choice = choices[0]
        message = _get(choice, "message", "the choice")
        content = _optional_text(_get(message, "content", "the choice's message"), "the message's content")
        calls = []
        for call in _list(_get(message, "tool_calls", "the choice's message"), "tool_calls"):
            function = _get(call, "function", "a tool call")
            calls.append((_optional_text(_get(call, "id", "a tool call"), "a tool call's id"),
                          _name(_get(function, "name", "a tool call's function")),
                          _optional_text(_get(function, "arguments", "a tool call's function"), "tool arguments")))
        finish = _optional_text(_get(choice, "finish_reason", "the choice"), "finish_reason")
    except (_Malformed, ValueError, TypeError, AttributeError, KeyError) as exc:
        raise AgentError(_malformed_line(client, exc)) from exc
    return _assistant(content, calls), finish


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Malformed(f"a tool call's name is {_kind(value)}")
    return value[:200]


def _complete_streaming(chunks: openai.Stream, emit: Event, state: dict,
                        client: openai.OpenAI | None = None) -> tuple[dict, str | None]:
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
                choices = _list(_get(chunk, "choices", "a stream chunk"), "a chunk's choices")
                if not choices:
                    continue  # e.g. a usage-only chunk
                choice = choices[0]
                finish = _optional_text(_get(choice, "finish_reason", "a chunk's choice"), "finish_reason") or finish
                delta = _get(choice, "delta", "a chunk's choice")
                if delta is None:
                    continue
                piece_text = _optional_text(_get(delta, "content", "a chunk's delta"), "a chunk's content")
                if piece_text:
                    text.append(piece_text)
                    state["tokens"] += 1
                    emit("token", {"text": piece_text})
                for piece in _list(_get(delta, "tool_calls", "a chunk's delta"), "a chunk's tool_calls"):
                    index = _get(piece, "index", "a tool call piece")
                    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
                        raise _Malformed(f"a tool call piece's index is {_kind(index)}")
                    slot = slots.setdefault(len(slots) if index is None else index, [None, "", ""])
                    slot[0] = _optional_text(_get(piece, "id", "a tool call piece"), "a tool call's id") or slot[0]
                    function = _get(piece, "function", "a tool call piece")
                    if function is not None:
                        slot[1] += _optional_text(_get(function, "name", "a tool call's function"), "a name") or ""
                        slot[2] += _optional_text(_get(function, "arguments", "a tool call's function"),
                                                  "tool arguments") or ""
    except _Malformed as exc:
        if state["cancelled"]:
            raise AgentError("the request was abandoned at the deadline", "deadline") from exc
        url = str(client.base_url).rstrip("/") if client is not None else "the LLM server"
        raise AgentError(f"the LLM server at {url} sent a stream chunk that is not a chat completion chunk "
                         f"({_one_line(exc, 160)}); check OPENAI_BASE_URL, or use --backend offline", "stream") from exc
    except (openai.APIError, OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        if state["cancelled"]:
            raise AgentError("the request was abandoned at the deadline", "deadline") from exc
        raise AgentError(f"the LLM server's stream broke off after {state['tokens']} text pieces "
                         f"({_one_line(detail(exc))}); not retried, so nothing is shown twice", "stream") from exc
    calls = []
    for i in sorted(slots):
        call_id, name, arguments = slots[i]
        if not name:
            raise AgentError("the LLM server streamed a tool call with no name; check the server, or use "
                             "--backend offline", "stream")
        calls.append((call_id, name[:200], arguments))
    return _assistant("".join(text) or None, calls), finish


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


def detail(exc: Exception) -> str:
    """The server's own message of an SDK error, when it sent one."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if inner.get("message"):
            return str(inner["message"])
    return str(getattr(exc, "message", None) or exc)


def is_context_overflow(exc: Exception) -> bool:
    """The server said the request is longer than its context (llama.cpp, vLLM, OpenAI wordings)."""
    return bool(_CONTEXT_OVERFLOW.search(detail(exc)))


def error_kind(exc: Exception) -> str:
    """AgentError.kind of an SDK error."""
    if isinstance(exc, openai.APITimeoutError):
        return "server"
    if isinstance(exc, openai.APIConnectionError):
        return "config"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in (401, 403, 404):
            return "config"
        if _CONTEXT_OVERFLOW.search(detail(exc)):
            return "context"
    return "server"


def error_line(exc: Exception, client: openai.OpenAI, model: str) -> str:
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
        if _CONTEXT_OVERFLOW.search(detail(exc)):
            hint = "the conversation is longer than the model's context: start a new one or give the server more context"
        verb = "failed" if status >= 500 else "rejected the request"
        line = f"the LLM server at {url} {verb} with HTTP {status}: {_one_line(detail(exc))}"
        return f"{line}; {hint}" if hint else line
    return f"the LLM request to {url} failed: {_one_line(exc)}"


def _one_line(value: object, limit: int = 300) -> str:
    """`value` as text on one line, at most `limit` characters."""
    text = re.sub(r"\s+", " ", str(value)).strip() or type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
