"""`trainplan mcp`: the tool registry served over MCP (stdio) with the official MCP Python SDK.

MCP clients and agents list the same tools as `trainplan tools list`, with the same argument schemas
(agent/registry.py generates them from the pydantic models), and a call returns the same JSON text
as `trainplan tools call NAME --args ...`: both go through registry.dispatch. An invalid call is a
tool result with isError set and the `error: ...` line, as the CLI prints it.

Bounded (issue 21): every request gets a response or a JSON-RPC error. Standard input is read line by
line within safe_json.MCP_MESSAGE (1 MiB, depth 40, 100-digit numbers): a line past a limit, not
JSON or not a JSON-RPC message is answered with a JSON-RPC error (parse error -32700 or invalid
request -32600, with the request's id when it can be read, else null) and never reaches the SDK,
and a line too long is skipped without being held in memory. Tools run in a worker thread, so that
cancellation (notifications/cancelled), ping and end of input are served while one runs.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, BinaryIO

import typer

from trainplan.cli_common import DataDirOpt, allow_data_dirs

SERVER_NAME = "trainplan"


def result_text(name: str, arguments: dict | None) -> tuple[str, bool]:
    """(the text `trainplan tools call` prints, whether it is an error) for one call."""
    from trainplan.agent.registry import dispatch

    result = dispatch(name, arguments or {})
    if set(result) == {"error"}:
        return f"error: {result['error']}", True
    return json.dumps(result, indent=2), False


def build_server():
    """The MCP server: list_tools from the registry's schemas, call_tool through dispatch."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from trainplan import __version__
    from trainplan.agent.registry import TOOLS

    async def list_tools(ctx, params) -> types.ListToolsResult:
        tools = []
        for tool in TOOLS:
            function = tool.schema(strict=False)["function"]
            tools.append(types.Tool(name=tool.name, description=tool.description,
                                    input_schema=function["parameters"]))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params) -> types.CallToolResult:
        import anyio

        # a worker thread: cancel, ping and EOF are served while the tool runs; a cancelled call is abandoned
        text, is_error = await anyio.to_thread.run_sync(result_text, params.name, params.arguments,
                                                        abandon_on_cancel=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)

    return Server(SERVER_NAME, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


_ID = re.compile(rb'"id"\s*:\s*(-?[0-9]{1,18}(?![0-9.eE])|"(?:[^"\\]|\\.){0,200}")')
_KEEP = 4096
"""Bytes kept of each end of a line too long, to find its id."""


class BoundedStdin:
    """Standard input for the SDK's stdio_server, one line at a time within safe_json.MCP_MESSAGE; a line
    that is refused is answered with a JSON-RPC error on the server's own write stream (module docstring)."""

    def __init__(self, raw: BinaryIO) -> None:
        import anyio

        from trainplan.tools.core import safe_json

        self.limits = safe_json.MCP_MESSAGE
        self._raw = raw
        self._ready = anyio.Event()
        self._write_stream: Any = None

    def attach(self, write_stream: Any) -> None:
        self._write_stream = write_stream
        self._ready.set()

    def __aiter__(self) -> BoundedStdin:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._line()
            if line is None:
                raise StopAsyncIteration
            raw, too_long = line
            if not raw.strip():
                continue
            refusal = self.refusal(raw, too_long)
            if refusal is None:
                return raw.decode("utf-8", "replace")
            await self._send_error(*refusal)

    async def _line(self) -> tuple[bytes, bool] | None:
        """(the line, whether it was too long: then only its two ends), or None at the end of input."""
        limit = self.limits.max_bytes
        chunk = await self._readline(limit + 1)
        if not chunk:
            return None
        if chunk.endswith(b"\n") or len(chunk) <= limit:
            return chunk, False
        head, tail = chunk[:_KEEP], chunk[-_KEEP:]
        while not chunk.endswith(b"\n"):
            chunk = await self._readline(limit + 1)
            if not chunk:
                break
            tail = (tail + chunk)[-_KEEP:]
        return head + b" " + tail, True

    async def _readline(self, size: int) -> bytes:
        import anyio

        return await anyio.to_thread.run_sync(self._raw.readline, size, abandon_on_cancel=True)

    def refusal(self, raw: bytes, too_long: bool) -> tuple[Any, int, str] | None:
        """(id, JSON-RPC error code, message) for a line the server must not pass on, or None."""
        import mcp_types as types

        from trainplan.tools.core import safe_json
        from trainplan.tools.core.errors import InputError

        found = _ID.search(raw[:_KEEP]) or _ID.search(raw[-_KEEP:])
        try:
            request_id = json.loads(found.group(1)) if found else None
        except ValueError:  # a bad escape or byte in the id
            request_id = None
        if too_long:
            return request_id, types.INVALID_REQUEST, (f"the request is over {self.limits.max_bytes:,} bytes, more "
                                                       "than trainplan mcp reads: send smaller arguments")
        try:
            message = safe_json.loads(raw, "the request", self.limits)
        except InputError as exc:
            code = types.PARSE_ERROR if " not valid JSON" in str(exc) or "not UTF-8" in str(exc) else types.INVALID_REQUEST
            return request_id, code, str(exc)
        if isinstance(message, dict) and isinstance(message.get("id"), (int, str)) \
                and not isinstance(message.get("id"), bool):
            request_id = message["id"]
        try:
            types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        except Exception as exc:  # pydantic's ValidationError: not a JSON-RPC message
            first = exc.errors()[0] if hasattr(exc, "errors") else {"msg": type(exc).__name__, "loc": ()}
            where = ".".join(str(p) for p in first.get("loc", ()))[:80]
            return request_id, types.INVALID_REQUEST, f"not a JSON-RPC 2.0 message ({where}: {first['msg'][:120]})"
        return None

    async def _send_error(self, request_id: Any, code: int, message: str) -> None:
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        await self._ready.wait()
        error = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))
        await self._write_stream.send(SessionMessage(error))


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = build_server()
    stdin = BoundedStdin(sys.stdin.buffer)
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        stdin.attach(write_stream)
        await server.run(read_stream, write_stream, server.create_initialization_options())


def register(app: typer.Typer) -> None:
    @app.command("mcp")
    def mcp_command(data_dir: DataDirOpt = None) -> None:
        """Serve the agent's tools over MCP on stdio (the official MCP Python SDK)."""
        allow_data_dirs(data_dir)
        try:
            import anyio
            import mcp  # noqa: F401
        except ImportError:
            print("error: trainplan mcp needs the MCP Python SDK: pip install mcp", file=sys.stderr)
            raise typer.Exit(2) from None
        anyio.run(serve_stdio)
        # End of input: exit now. A cancelled call's worker thread may still be running (Python cannot stop
        # a thread), and it must not hold the process.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
