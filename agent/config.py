"""LLM settings, read from the environment.

- ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``: read as the openai SDK reads them. A local
  OpenAI-compatible server (vLLM, Ollama, llama.cpp) needs only ``OPENAI_BASE_URL``, e.g.
  ``http://localhost:8000/v1``; the key then defaults to a placeholder.
- ``TRAINPLAN_MODEL``: the model name sent to the server; default ``gpt-4o-mini``
  (set it to the served model's name for a local server).
- ``TRAINPLAN_LLM_DEADLINE_S``: the most seconds one plan (or one chat turn) may spend on the
  LLM, retries and tool calls included; default DEFAULT_DEADLINE_S. When it passes, `plan`
  falls back to the offline planner and says so.
- ``TRAINPLAN_LLM_MAX_TOKENS``: the most tokens the model may write in one reply (the request's
  max_tokens); default DEFAULT_MAX_TOKENS. A reply cut at this limit carries a truncation notice.
- ``TRAINPLAN_LLM_MAX_RETRIES``: retries of one request on transient errors (connection, 408,
  429, 5xx), made by the openai SDK itself with its backoff and the server's Retry-After;
  default DEFAULT_MAX_RETRIES.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from trainplan.tools.core.errors import InputError

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's default
PLACEHOLDER_API_KEY = "not-needed"  # sent when only OPENAI_BASE_URL is set; local servers ignore it
DEFAULT_DEADLINE_S = 300.0
"""Five minutes for one plan: a hosted model answers in well under a minute; a small local model
on CPU writes a long plan in a few minutes. Past it, the offline planner answers at once."""
DEFAULT_MAX_TOKENS = 2048
"""A plan's Markdown (seven sections) takes about 600-1,500 tokens; 2,048 leaves room while keeping
prompt + reply inside the 8K context of a small local server."""
DEFAULT_MAX_RETRIES = 2
"""The openai SDK's own default."""


@dataclass(frozen=True)
class Settings:
    """The LLM endpoint, model and limits."""

    api_key: str | None  # OPENAI_API_KEY
    base_url: str | None  # OPENAI_BASE_URL; None means the SDK's default (api.openai.com)
    model: str  # TRAINPLAN_MODEL, else DEFAULT_MODEL
    deadline_s: float = DEFAULT_DEADLINE_S  # TRAINPLAN_LLM_DEADLINE_S
    max_tokens: int = DEFAULT_MAX_TOKENS  # TRAINPLAN_LLM_MAX_TOKENS
    max_retries: int = DEFAULT_MAX_RETRIES  # TRAINPLAN_LLM_MAX_RETRIES


@dataclass(frozen=True)
class LlmEndpoint:
    """Which LLM one run talks to (agent/llm.py run_agent, `plan`): an openai client (None: one made from the
    settings), the chat model's name (None: settings.model) and the settings (None: load_settings(), read from
    the environment)."""

    client: Any = None
    model: str | None = None
    settings: Settings | None = None


MAX_DEADLINE_S = 86400.0
"""The longest TRAINPLAN_LLM_DEADLINE_S: a day (a thread's join takes no timeout much past 1e9 s)."""
MAX_TOKENS_LIMIT = 2**20
MAX_RETRIES_LIMIT = 100


def _number(name: str, default: float, *, integer: bool, minimum: float, maximum: float) -> float:
    raw = os.environ.get(name) or ""
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not minimum <= value <= maximum or (integer and value != int(value)):
        kind = "a whole number" if integer else "a number"
        shown = raw if len(raw) <= 40 and raw.isprintable() else "(a long or unprintable value)"
        raise InputError(f"{name}='{shown}' must be {kind} from {minimum:g} to {maximum:g}: unset it for the "
                         f"default ({default:g})")
    return int(value) if integer else value


def load_settings() -> Settings:
    """Settings from the environment; empty variables count as unset. A malformed limit is an InputError."""
    return Settings(
        api_key=_header_value("OPENAI_API_KEY"),
        base_url=_base_url(),
        model=_header_value("TRAINPLAN_MODEL", text=True) or DEFAULT_MODEL,
        deadline_s=_number("TRAINPLAN_LLM_DEADLINE_S", DEFAULT_DEADLINE_S, integer=False, minimum=0.001,
                           maximum=MAX_DEADLINE_S),
        max_tokens=int(_number("TRAINPLAN_LLM_MAX_TOKENS", DEFAULT_MAX_TOKENS, integer=True, minimum=1,
                               maximum=MAX_TOKENS_LIMIT)),
        max_retries=int(_number("TRAINPLAN_LLM_MAX_RETRIES", DEFAULT_MAX_RETRIES, integer=True, minimum=0,
                                maximum=MAX_RETRIES_LIMIT)),
    )


def _header_value(name: str, text: bool = False) -> str | None:
    """An environment value sent in an HTTP header (the key) or body (the model name): printable, and
    ASCII for a header (httpx cannot encode anything else). Never echoed: it may be a secret."""
    value = os.environ.get(name) or None
    if value is None:
        return None
    if not value.isprintable() or len(value) > 4096 or (not text and not value.isascii()):
        need = "printable text" if text else "printable ASCII, as API keys are"
        raise InputError(f"{name} must be {need} (of at most 4,096 characters): check the variable")
    return value


def _base_url() -> str | None:
    """OPENAI_BASE_URL, checked: an http(s) URL with a host (e.g. http://localhost:8000/v1)."""
    from urllib.parse import urlsplit

    value = os.environ.get("OPENAI_BASE_URL") or None
    if value is None:
        return None
    hint = "set it to an http(s) URL such as http://localhost:8000/v1"
    if not value.isascii() or not value.isprintable() or len(value) > 2048:
        raise InputError(f"OPENAI_BASE_URL is not a URL: {hint}")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a bad port
        host = parts.hostname
    except ValueError:
        raise InputError(f"OPENAI_BASE_URL='{value[:200]}' is not a valid URL: {hint}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InputError(f"OPENAI_BASE_URL='{value[:200]}' has no http(s) scheme and host: {hint}")
    del port
    return value


def llm_configured() -> bool:
    """True when OPENAI_API_KEY or OPENAI_BASE_URL is set (what `--backend auto` checks)."""
    return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
