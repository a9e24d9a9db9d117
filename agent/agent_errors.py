"""The agent's errors (agent/llm_client.py raises them; the planner, the chat and the CLI catch them), in a
module of their own so that the offline path catches them without importing the openai SDK."""

from __future__ import annotations

__all__ = ["AgentError", "DeadlineExceeded", "MaxTurnsExceeded"]


class AgentError(Exception):
    """The agent cannot go on. str() is one line; `kind` is config, server, context, deadline, stream
    or turns (agent/llm_client.py's module docstring). Every kind but config is a failure of this request,
    after which the offline planner can still answer."""

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
