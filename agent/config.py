"""LLM settings, read from the environment.

- ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``: read as the openai SDK reads them. A local
  OpenAI-compatible server (vLLM, Ollama, llama.cpp) needs only ``OPENAI_BASE_URL``, e.g.
  ``http://localhost:8000/v1``; the key then defaults to a placeholder.
- ``TRAINPLAN_MODEL``: the model name sent to the server; default ``gpt-4o-mini``
  (set it to the served model's name for a local server).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's default
PLACEHOLDER_API_KEY = "not-needed"  # sent when only OPENAI_BASE_URL is set; local servers ignore it


@dataclass(frozen=True)
class Settings:
    """The LLM endpoint and model."""

    api_key: str | None  # OPENAI_API_KEY
    base_url: str | None  # OPENAI_BASE_URL; None means the SDK's default (api.openai.com)
    model: str  # TRAINPLAN_MODEL, else DEFAULT_MODEL


def load_settings() -> Settings:
    """Settings from the environment; empty variables count as unset."""
    return Settings(
        api_key=os.environ.get("OPENAI_API_KEY") or None,
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        model=os.environ.get("TRAINPLAN_MODEL") or DEFAULT_MODEL,
    )


def llm_configured() -> bool:
    """True when OPENAI_API_KEY or OPENAI_BASE_URL is set (what `--backend auto` checks)."""
    settings = load_settings()
    return bool(settings.api_key or settings.base_url)
