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

from trainplan.tools.errors import InputError

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


def _number(name: str, default: float, *, integer: bool, minimum: float) -> float:
    raw = os.environ.get(name) or ""
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < minimum or (integer and value != int(value)):
        kind = "a whole number" if integer else "a number"
        raise InputError(f"{name}='{raw}' must be {kind} of at least {minimum:g}: unset it for the default "
                         f"({default:g})")
    return int(value) if integer else value


def load_settings() -> Settings:
    """Settings from the environment; empty variables count as unset. A malformed limit is an InputError."""
    return Settings(
        api_key=os.environ.get("OPENAI_API_KEY") or None,
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        model=os.environ.get("TRAINPLAN_MODEL") or DEFAULT_MODEL,
        deadline_s=_number("TRAINPLAN_LLM_DEADLINE_S", DEFAULT_DEADLINE_S, integer=False, minimum=0.001),
        max_tokens=int(_number("TRAINPLAN_LLM_MAX_TOKENS", DEFAULT_MAX_TOKENS, integer=True, minimum=1)),
        max_retries=int(_number("TRAINPLAN_LLM_MAX_RETRIES", DEFAULT_MAX_RETRIES, integer=True, minimum=0)),
    )


def llm_configured() -> bool:
    """True when OPENAI_API_KEY or OPENAI_BASE_URL is set (what `--backend auto` checks)."""
    return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
