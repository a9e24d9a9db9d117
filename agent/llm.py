"""The function-calling loop over the openai SDK's chat completions.

Works with any OpenAI-compatible server. One call of run_agent:

1. sends the system prompt, the history and the request, with the tool schemas;
2. runs every tool call of an assistant message (parallel calls included) through `dispatch`
   and answers each with a tool message carrying its `tool_call_id`; a tool error is just a
   result (``{"error": ...}``) that goes back to the model, and the loop continues;
3. on a final answer, checks its numbers against this conversation's tool results and user
   requests (agent/grounding.py). If some are ungrounded it re-asks once, naming them; any that
   remain after that are marked in the returned text with `` [ungrounded]`` after each.

Each request to the server is one turn; more than `max_turns` raises MaxTurnsExceeded. Transient
errors (connection, timeout, 429, 5xx) are retried with exponential backoff; the rest, and
transient errors that outlast the retries, raise AgentError with one line for the CLI.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai

from .config import PLACEHOLDER_API_KEY, Settings, llm_configured, load_settings
from .grounding import GroundingReport, check_grounding, mark_ungrounded

__all__ = ["AgentError", "MaxTurnsExceeded", "AgentResult", "RetryPolicy", "run_agent", "make_client",
           "REASK_PREFIX"]

REASK_PREFIX = "These numbers are not in any tool result:"
REQUEST_TIMEOUT_S = 300.0  # per request; local models can be slow to write a long plan
_TRANSIENT = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)


class AgentError(Exception):
    """The agent cannot go on (server down, authentication failure, ...). str() is one line."""


class MaxTurnsExceeded(AgentError):
    """The model was still calling tools when the turn cap was reached."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient errors: delay = base_delay_s * 2**attempt, at most max_delay_s."""

    max_retries: int = 3  # retries after the first try
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0  # also caps a server's Retry-After


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


Event = Callable[[str, dict], None]


def make_client(settings: Settings | None = None) -> openai.OpenAI:
    """An OpenAI client from the settings; the SDK's own retries are off (run_agent retries)."""
    settings = settings or load_settings()
    return openai.OpenAI(
        api_key=settings.api_key or PLACEHOLDER_API_KEY,
        base_url=settings.base_url,
        max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
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
    retry: RetryPolicy = RetryPolicy(),
) -> AgentResult:
    """Answer `user_request` with the model, calling tools through `dispatch` (module docstring).

    `dispatch(name, arguments_json)` returns a JSON-able result and never raises. `history` is a
    previous AgentResult.messages (its system message is replaced by `system_prompt`). Events sent
    to `on_event(kind, data)`: "token" {text} (streaming only), "tool_call" {id, name, arguments},
    "tool_result" {id, name, result}, "reask" {numbers}, "retry" {attempt, delay_s, error}.
    """
    if client is None:
        if not llm_configured():
            raise AgentError("no LLM configured: set OPENAI_API_KEY or OPENAI_BASE_URL, "
                             "or use --backend offline")
        client = make_client()
    model = model or load_settings().model
    emit: Event = on_event or (lambda kind, data: None)
    messages = [{"role": "system", "content": system_prompt}]
    messages += [m for m in history or [] if m.get("role") != "system"]
    messages.append({"role": "user", "content": user_request})
    sources = _sources(messages)
    calls: list[dict] = []
    reasked = False
    for turn in range(1, max_turns + 1):
        reply = _with_retries(lambda: _complete(client, model, messages, tools, stream, emit),
                              client, model, retry, emit)
        messages.append(reply)
        if reply.get("tool_calls"):
            for call in reply["tool_calls"]:
                name, arguments = call["function"]["name"], call["function"]["arguments"]
                emit("tool_call", {"id": call["id"], "name": name, "arguments": arguments})
                result = dispatch(name, arguments)
                emit("tool_result", {"id": call["id"], "name": name, "result": result})
                calls.append({"id": call["id"], "name": name, "arguments": arguments, "result": result})
                sources.append(result)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
            continue
        text = reply.get("content") or ""
        report = check_grounding(text, sources)
        if report.ok or reasked or turn == max_turns:
            return AgentResult(mark_ungrounded(text, report.ungrounded), messages, calls, report,
                               reasked, model, turn)
        reasked = True
        numbers = list(dict.fromkeys(m.text for m in report.ungrounded))
        emit("reask", {"numbers": numbers})
        messages.append({"role": "user", "content": f"{REASK_PREFIX} {', '.join(numbers)}. "
                         "Call a tool for them or remove them."})
    raise MaxTurnsExceeded(f"the model was still calling tools after {max_turns} turns "
                           "(the turn cap); simplify the request or raise max_turns")


def _sources(messages: list[dict]) -> list[Any]:
    """Grounding sources already in the conversation: user requests (not re-asks) and tool results."""
    out: list[Any] = []
    for m in messages:
        content = m.get("content")
        if m["role"] == "tool" or (m["role"] == "user" and isinstance(content, str)
                                   and not content.startswith(REASK_PREFIX)):
            out.append(content)
    return out


def _complete(client: openai.OpenAI, model: str, messages: list[dict], tools: list[dict],
              stream: bool, emit: Event) -> dict:
    """One chat completion, as the assistant message to append."""
    kwargs: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        kwargs["tools"] = tools
    if stream:
        return _complete_streaming(client.chat.completions.create(**kwargs, stream=True), emit)
    response = client.chat.completions.create(**kwargs)
    if not response.choices:
        raise AgentError(f"the LLM server at {client.base_url} returned no choices for model '{model}'")
    message = response.choices[0].message
    return _assistant(message.content, [
        (c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []])


def _complete_streaming(chunks: openai.Stream, emit: Event) -> dict:
    """Assemble a streamed reply: content pieces, and tool calls accumulated by their index."""
    text: list[str] = []
    slots: dict[int, list] = {}  # index -> [id, name, arguments]
    with chunks:
        for chunk in chunks:
            if not chunk.choices:
                continue  # e.g. a usage-only chunk
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
                emit("token", {"text": delta.content})
            for piece in delta.tool_calls or []:
                slot = slots.setdefault(len(slots) if piece.index is None else piece.index, [None, "", ""])
                slot[0] = piece.id or slot[0]
                if piece.function:
                    slot[1] += piece.function.name or ""
                    slot[2] += piece.function.arguments or ""
    return _assistant("".join(text) or None, [tuple(slots[i]) for i in sorted(slots)])


def _assistant(content: str | None, calls: list[tuple]) -> dict:
    """An assistant message dict; missing call ids are filled in, empty arguments become "{}"."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": call_id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": arguments or "{}"}}
            for i, (call_id, name, arguments) in enumerate(calls)
        ]
    return message


def _with_retries(request: Callable[[], dict], client: openai.OpenAI, model: str,
                  retry: RetryPolicy, emit: Event) -> dict:
    """Run `request`, retrying transient errors; every failure left becomes one AgentError line."""
    attempt = 0
    while True:
        try:
            return request()
        except _TRANSIENT as exc:
            if attempt == retry.max_retries:
                raise AgentError(_error_line(exc, client, model, attempt + 1)) from exc
            delay = min(retry.max_delay_s, max([retry.base_delay_s * 2**attempt, *_retry_after(exc)]))
            attempt += 1
            emit("retry", {"attempt": attempt, "delay_s": delay, "error": _one_line(exc)})
            time.sleep(delay)
        except openai.OpenAIError as exc:
            raise AgentError(_error_line(exc, client, model, attempt + 1)) from exc


def _retry_after(exc: Exception) -> list[float]:
    """A server's Retry-After in seconds, as a one-item list, when it sent one."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return [max(float(value), 0.0)] if value else []
    except ValueError:
        return []


def _error_line(exc: Exception, client: openai.OpenAI, model: str, tries: int) -> str:
    """One line that says what failed and what to check."""
    url = str(client.base_url).rstrip("/")
    after = f" after {tries} tries" if tries > 1 else ""
    if isinstance(exc, openai.APITimeoutError):
        return f"the LLM server at {url} timed out{after}; check OPENAI_BASE_URL or use --backend offline"
    if isinstance(exc, openai.APIConnectionError):
        tried = f" ({tries} tries)" if tries > 1 else ""
        return (f"cannot reach the LLM server at {url}: {_one_line(exc.__cause__ or exc)}{tried}; "
                "check OPENAI_BASE_URL or use --backend offline")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        body = exc.body
        detail = body.get("message") if isinstance(body, dict) and body.get("message") else exc.message
        hint = {401: "check OPENAI_API_KEY", 403: "check OPENAI_API_KEY",
                404: f"check TRAINPLAN_MODEL (now '{model}') and OPENAI_BASE_URL",
                429: "wait, or check the account's quota"}.get(status, "")
        verb = "failed" if status >= 500 else "rejected the request"
        line = f"the LLM server at {url} {verb} with HTTP {status}{after}: {_one_line(detail)}"
        return f"{line}; {hint}" if hint else line
    return f"the LLM request to {url} failed: {_one_line(exc)}"


def _one_line(value: object, limit: int = 300) -> str:
    """`value` as text on one line, at most `limit` characters."""
    text = re.sub(r"\s+", " ", str(value)).strip() or type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
