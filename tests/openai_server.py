"""A local OpenAI-compatible server that replays scripted turns, for tests of the agent loop.

    server.script(tool_calls(("calculate_memory", {"model": "llama3-8b"})), reply("It fits."))

Each POST /v1/chat/completions takes the next scripted turn and answers it as JSON, or as SSE
chunks (``data: {...}`` ... ``data: [DONE]``, tool calls split into deltas) when the request
says ``"stream": true``. A turn can also be an HTTP error (with a Retry-After), a dropped
connection, a reply cut at max_tokens (``finish="length"``), a server that accepts the request
and never answers (`hang`), a stream that stops after its first pieces (`stall`), or any body or
stream events as written (`raw`, `raw_stream`: HOSTILE_BODIES and HOSTILE_STREAMS list a hostile
server's replies).

Like llama.cpp's server, and before taking a turn, it refuses:

- a history holding tool-call arguments that are not valid JSON: HTTP 500 "Failed to parse tool
  call arguments as JSON" (llama.cpp re-parses every earlier call for its chat template);
- a request longer than `context_tokens` (counted as characters / 4, messages and tools): HTTP 400
  "the request exceeds the available context size, try increasing it".

The server records every request body (`requests`) and every refusal (`refused`);
`assert_consumed` checks that every turn was used and that no request came after the script ran
out. The `openai_server` fixture does that at teardown.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def reply(content: str, finish: str = "stop") -> dict:
    """A final assistant answer; finish="length" says it was cut at max_tokens."""
    return {"content": content, "finish": finish}


def tool_calls(*calls: tuple[str, dict | str], content: str | None = None, finish: str = "tool_calls") -> dict:
    """An assistant message with one or more tool calls: (name, arguments as a dict or raw text)."""
    return {"content": content, "finish": finish, "tool_calls": [
        (name, arguments if isinstance(arguments, str) else json.dumps(arguments))
        for name, arguments in calls]}


def http_error(status: int, message: str = "scripted error", retry_after_s: float | None = None) -> dict:
    """An HTTP error response with an OpenAI-style error body, and a Retry-After header when given."""
    return {"status": status, "message": message, "retry_after_s": retry_after_s}


def disconnect() -> dict:
    """Close the connection without answering."""
    return {"disconnect": True}


def hang() -> dict:
    """Accept the request and never answer (until the server stops)."""
    return {"hang": True}


def stall(content: str) -> dict:
    """Stream the first word of `content`, then never send more (non-streaming: like hang)."""
    return {"stall": True, "content": content}


def raw(body: str | bytes, status: int = 200, content_type: str = "application/json") -> dict:
    """Answer with exactly this body, whatever it is (a hostile or broken server: not JSON, `choices` as a
    string, a choice with no message, tool arguments as a list, ...)."""
    return {"raw": body.encode() if isinstance(body, str) else body, "raw_status": status,
            "content_type": content_type}


def raw_stream(*events: str) -> dict:
    """Answer a streamed request with these SSE data lines as written (``data: EVENT``), then [DONE]."""
    return {"raw_stream": list(events)}


HOSTILE_BODIES = {
    "not json": "this is not JSON",
    "empty": "",
    "a list": "[1, 2, 3]",
    "choices a string": json.dumps({"id": "x", "object": "chat.completion", "choices": "abc"}),
    "choices empty": json.dumps({"id": "x", "object": "chat.completion", "choices": []}),
    "choice a number": json.dumps({"id": "x", "object": "chat.completion", "choices": [7]}),
    "no message": json.dumps({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop"}]}),
    "message a string": json.dumps({"choices": [{"index": 0, "message": "hi", "finish_reason": "stop"}]}),
    "content a list": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": [1]},
                                               "finish_reason": "stop"}]}),
    "tool_calls a string": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                                            "tool_calls": "x"}, "finish_reason": "tool_calls"}]}),
    "arguments a list": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                    "tool_calls": [{"id": "c1", "type": "function", "function": {
                                        "name": "list_catalog", "arguments": [1, 2]}}]}, "finish_reason": "tool_calls"}]}),
    "function missing": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                    "tool_calls": [{"id": "c1", "type": "function"}]}, "finish_reason": "tool_calls"}]}),
    "name a number": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                 "tool_calls": [{"id": 5, "type": "function", "function": {"name": 5, "arguments": "{}"}}]},
                                 "finish_reason": "tool_calls"}]}),
    "deep arguments": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                  "tool_calls": [{"id": "c1", "type": "function", "function": {
                                      "name": "list_catalog", "arguments": "[" * 50000 + "]" * 50000}}]},
                                  "finish_reason": "tool_calls"}]}),
    "finish a list": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                              "finish_reason": [1]}]}),
}
"""Replies a hostile OpenAI-compatible server may send (bodies of `raw`)."""
HOSTILE_STREAMS = {
    "not json": ["this is not JSON"],
    "choices a string": [json.dumps({"choices": "abc"})],
    "choice a number": [json.dumps({"choices": [7]})],
    "no delta": [json.dumps({"choices": [{"index": 0, "finish_reason": "stop"}]})],
    "delta a string": [json.dumps({"choices": [{"index": 0, "delta": "x"}]})],
    "content a list": [json.dumps({"choices": [{"index": 0, "delta": {"content": [1]}}]})],
    "tool_calls a string": [json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": "x"}}]})],
    "arguments a list": [json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"name": "list_catalog", "arguments": [1]}}]}}]})],
    "index a string": [json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": "a", "id": "c1", "function": {"name": "list_catalog", "arguments": "{}"}}]}}]})],
    "a list": ["[1, 2]"],
}
"""Streamed replies a hostile server may send (events of `raw_stream`)."""


PARSE_ERROR = "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] unexpected end of input"
CONTEXT_ERROR = "the request exceeds the available context size, try increasing it"


class ScriptedServer:
    """The server; start() binds 127.0.0.1 on a free port."""

    def __init__(self, context_tokens: int | None = None) -> None:
        self.turns: deque[dict] = deque()
        self.requests: list[dict] = []  # request bodies, in order
        self.headers: list[dict] = []  # request headers (lower-case names), in order
        self.unexpected: list[str] = []  # requests the script could not answer
        self.refused: list[str] = []  # llama.cpp-style refusals: "parse" or "context", in order
        self.context_tokens = context_tokens  # None: unlimited
        self.stopping = threading.Event()
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
        self.stopping.set()
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
        refusal = self.refusal(body)
        if refusal:
            return refusal
        if not self.turns:
            self.unexpected.append(f"request {len(self.requests)}")
            return http_error(400, "no scripted turn left")
        self._count += 1
        return self.turns.popleft()

    @staticmethod
    def tokens(body: dict) -> int:
        """A rough token count of a request: characters of its messages and tools / 4."""
        return len(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", []))) // 4

    def refusal(self, body: dict) -> dict | None:
        """What llama.cpp's server refuses before generating (module docstring), or None."""
        for message in body.get("messages", []):
            for call in message.get("tool_calls") or []:
                try:
                    json.loads(call["function"]["arguments"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.refused.append("parse")
                    return http_error(500, PARSE_ERROR)
        if self.context_tokens is not None and self.tokens(body) > self.context_tokens:
            self.refused.append("context")
            return http_error(400, CONTEXT_ERROR)
        return None

    def completion(self, turn: dict, model: str) -> dict:
        """The chat.completion object for a message turn."""
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
        calls = self._calls(turn)
        if calls:
            message["tool_calls"] = calls
        return {"id": f"chatcmpl-{self._count}", "object": "chat.completion", "created": 0,
                "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                             "finish_reason": turn.get("finish", "stop")}],
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
        yield chunk({}, turn.get("finish", "stop"))

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
            if "raw" in turn:
                self._send(turn["raw_status"], turn["content_type"], turn["raw"])
                return
            if "raw_stream" in turn:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event in turn["raw_stream"]:
                    self.wfile.write(f"data: {event}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                return
            if "status" in turn:
                error = {"error": {"message": turn["message"], "type": "scripted",
                                   "code": str(turn["status"])}}
                headers = {} if turn.get("retry_after_s") is None else {"Retry-After": str(turn["retry_after_s"])}
                self._send(turn["status"], "application/json", json.dumps(error).encode(), headers)
                return
            if turn.get("hang") or (turn.get("stall") and not body.get("stream")):
                server.stopping.wait(60)  # bounded: the fixture stops the server at teardown
                self.close_connection = True
                return
            model = body.get("model", "scripted")
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i, chunk in enumerate(server.chunks(turn, model)):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    if turn.get("stall") and i == 1:
                        server.stopping.wait(60)
                        self.close_connection = True
                        return
                self.wfile.write(b"data: [DONE]\n\n")
                return
            self._send(200, "application/json", json.dumps(server.completion(turn, model)).encode())

        def _send(self, status: int, content_type: str, payload: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
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
