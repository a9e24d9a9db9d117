"""`trainplan mcp`: the tool registry over MCP stdio, checked with the MCP SDK's own client; results
are the text `trainplan tools call` prints."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from trainplan.tools.registry import tool_names  # noqa: E402

SERVER = StdioServerParameters(command=sys.executable, args=["-m", "trainplan.cli", "mcp"])
CALLS = [
    ("calculate_memory", {"model": "llama3-8b", "gpu": "mi300x", "gpus": 8, "method": "qlora"}),
    ("list_catalog", {"kind": "gpus"}),
]


def _cli_call(name: str, arguments: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainplan.cli", "tools", "call", name, "--args",
                           json.dumps(arguments)], capture_output=True, text=True, timeout=120)


async def _session_run():
    async with stdio_client(SERVER) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            results = [await session.call_tool(name, arguments) for name, arguments in CALLS]
            bad = await session.call_tool("calculate_memory", {"model": "llama3-8b", "gpu": "tpu-v9", "gpus": 8})
            return listed, results, bad


def test_mcp_serves_the_registry_and_answers_as_tools_call():
    listed, results, bad = anyio.run(_session_run)
    assert sorted(tool.name for tool in listed.tools) == sorted(tool_names())
    memory = next(tool for tool in listed.tools if tool.name == "calculate_memory")
    assert "method" in memory.input_schema["properties"]
    for (name, arguments), result in zip(CALLS, results):
        assert not result.is_error
        assert result.content[0].text == _cli_call(name, arguments).stdout.rstrip("\n")
    assert bad.is_error
    cli = _cli_call("calculate_memory", {"model": "llama3-8b", "gpu": "tpu-v9", "gpus": 8})
    assert cli.returncode == 2 and bad.content[0].text == cli.stderr.strip()
    assert "not in the catalog" in bad.content[0].text


def test_without_the_sdk_the_command_prints_one_error_line():
    code = ("import sys; sys.modules['mcp'] = None; sys.argv = ['trainplan', 'mcp']; "
            "from trainplan.cli import main; main()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: trainplan mcp needs the MCP Python SDK: pip install mcp"
