"""A local OpenAI-compatible server that replays scripted turns, for tests of the agent loop.

    server.script(tool_calls(("calculate_memory", {"model": "llama3-8b"})), reply("It fits."))

Each POST /v1/chat/completions takes the next scripted turn and answers it as JSON, or as SSE
chunks (``data: {...}`` ... ``data: [DONE]``, tool calls split into deltas) when the request
says ``"stream": true``. A turn can also be an HTTP error or a dropped connection. The server
records every request body; `assert_consumed` checks that every turn was used and that no
request came after the script ran out. The `openai_server` fixture does that at teardown.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def reply(content: str) -> dict:
    """A final assistant answer."""
    return {"content": content}


def tool_calls(*calls: tuple[str, dict | str], content: str | None = None) -> dict:
    """An assistant message with one or more tool calls: (name, arguments as a dict or raw text)."""
    return {"content": content, "tool_calls": [
        (name, arguments if isinstance(arguments, str) else json.dumps(arguments))
        for name, arguments in calls]}


def http_error(status: int, message: str = "scripted error") -> dict:
    """An HTTP error response with an OpenAI-style error body."""
    return {"status": status, "message": message}


def disconnect() -> dict:
    """Close the connection without answering."""
    return {"disconnect": True}


class ScriptedServer:
    """The server; start() binds 127.0.0.1 on a free port."""

    def __init__(self) -> None:
        self.turns: deque[dict] = deque()
        self.requests: list[dict] = []  # request bodies, in order
        self.headers: list[dict] = []  # request headers (lower-case names), in order
        self.unexpected: list[str] = []  # requests the script could not answer
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._count = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def script(self, *turns: dict) -> None:
        """Queue turns, answered in order."""
        self.turns.extend(turns)

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def assert_consumed(self) -> None:
        assert not self.unexpected, f"requests with no scripted turn left: {self.unexpected}"
        assert not self.turns, f"{len(self.turns)} scripted turn(s) never requested: {list(self.turns)}"

    def next_turn(self, path: str, body: dict, headers: dict) -> dict | None:
        self.requests.append(body)
        self.headers.append(headers)
        if path.rstrip("/") != "/v1/chat/completions":
            self.unexpected.append(f"POST {path}")
            return http_error(404, f"unknown path {path}")
        if not self.turns:
            self.unexpected.append(f"request {len(self.requests)}")
            return http_error(400, "no scripted turn left")
        self._count += 1
        return self.turns.popleft()

    def completion(self, turn: dict, model: str) -> dict:
        """The chat.completion object for a message turn."""
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
        calls = self._calls(turn)
        if calls:
            message["tool_calls"] = calls
        return {"id": f"chatcmpl-{self._count}", "object": "chat.completion", "created": 0,
                "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def chunks(self, turn: dict, model: str) -> Iterator[dict]:
        """The chat.completion.chunk objects for a message turn: text by word, arguments in thirds."""

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {"id": f"chatcmpl-{self._count}", "object": "chat.completion.chunk", "created": 0,
                    "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        content = turn.get("content") or ""
        words = content.split(" ")
        for i, word in enumerate(words):
            if word or i < len(words) - 1:
                yield chunk({"content": word + (" " if i < len(words) - 1 else "")})
        calls = self._calls(turn)
        for index, call in enumerate(calls):
            yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]})
            arguments = call["function"]["arguments"]
            step = max(1, -(-len(arguments) // 3))
            for start in range(0, len(arguments), step):
                yield chunk({"tool_calls": [{"index": index,
                                             "function": {"arguments": arguments[start:start + step]}}]})
        yield chunk({}, "tool_calls" if calls else "stop")

    def _calls(self, turn: dict) -> list[dict]:
        return [{"id": f"call_{self._count}_{i}", "type": "function",
                 "function": {"name": name, "arguments": arguments}}
                for i, (name, arguments) in enumerate(turn.get("tool_calls") or [])]


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            turn = server.next_turn(self.path, body, {k.lower(): v for k, v in self.headers.items()})
            if turn.get("disconnect"):
                self.close_connection = True
                return
            if "status" in turn:
                error = {"error": {"message": turn["message"], "type": "scripted",
                                   "code": str(turn["status"])}}
                self._send(turn["status"], "application/json", json.dumps(error).encode())
                return
            model = body.get("model", "scripted")
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in server.chunks(turn, model):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                return
            self._send(200, "application/json", json.dumps(server.completion(turn, model)).encode())

        def _send(self, status: int, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@pytest.fixture
def openai_server() -> Iterator[ScriptedServer]:
    """A running ScriptedServer (use .base_url and .script); asserts the script was used up."""
    server = ScriptedServer().start()
    try:
        yield server
    finally:
        server.stop()
    server.assert_consumed()
