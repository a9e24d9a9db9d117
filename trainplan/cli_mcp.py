"""`trainplan mcp`: the tool registry served over MCP (stdio) with the official MCP Python SDK.

MCP clients and agents list the same tools as `trainplan tools list`, with the same argument schemas
(tools/registry.py generates them from the pydantic models), and a call returns the same JSON text
as `trainplan tools call NAME --args ...`: both go through registry.dispatch. An invalid call is a
tool result with isError set and the `error: ...` line, as the CLI prints it.
"""

from __future__ import annotations

import json
import sys

import typer

from trainplan.cli_common import DataDirOpt, allow_data_dirs

SERVER_NAME = "trainplan"


def result_text(name: str, arguments: dict | None) -> tuple[str, bool]:
    """(the text `trainplan tools call` prints, whether it is an error) for one call."""
    from trainplan.tools.registry import dispatch

    result = dispatch(name, arguments or {})
    if set(result) == {"error"}:
        return f"error: {result['error']}", True
    return json.dumps(result, indent=2), False


def build_server():
    """The MCP server: list_tools from the registry's schemas, call_tool through dispatch."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from trainplan import __version__
    from trainplan.tools.registry import TOOLS

    async def list_tools(ctx, params) -> types.ListToolsResult:
        tools = []
        for tool in TOOLS:
            function = tool.schema(strict=False)["function"]
            tools.append(types.Tool(name=tool.name, description=tool.description,
                                    input_schema=function["parameters"]))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params) -> types.CallToolResult:
        text, is_error = result_text(params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)

    return Server(SERVER_NAME, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
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
