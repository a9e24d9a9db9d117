"""`trainplan mcp`: the tool registry over MCP stdio, checked with the MCP SDK's own client; results
are the text `trainplan tools call` prints."""

from __future__ import annotations

import json
import subprocess
import sys

from cli_inprocess import run_cli as in_process
import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from trainplan.agent.registry import tool_names  # noqa: E402

SERVER = StdioServerParameters(command=sys.executable, args=["-m", "trainplan.cli", "mcp"])
CALLS = [
    ("calculate_memory", {"model": "llama3-8b", "gpu": "mi300x", "gpus": 8, "method": "qlora"}),
    ("list_catalog", {"kind": "gpus"}),
]


def _cli_call(name: str, arguments: dict) -> subprocess.CompletedProcess:
    return in_process("tools", "call", name, "--args",
                           json.dumps(arguments))


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


def _raw_session(lines: list[bytes], expected: int) -> tuple[list[dict], int]:
    """Send raw lines to `trainplan mcp` after the handshake, read `expected` responses after the handshake's,
    then close its input: (those responses, the exit code at end of input)."""
    import select

    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    head = [json.dumps(init).encode(), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()]
    server = subprocess.Popen([sys.executable, "-m", "trainplan.cli", "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    responses = []
    try:
        server.stdin.write(b"\n".join(head + lines) + b"\n")
        server.stdin.flush()
        while len(responses) < expected + 1 and select.select([server.stdout], [], [], 60)[0]:
            line = server.stdout.readline()
            if not line:
                break
            responses.append(json.loads(line))
        server.stdin.close()
        code = server.wait(60)
    finally:
        server.kill()
    return responses[1:], code


def test_every_request_gets_a_response_or_a_json_rpc_error():
    method = "/".join(("tools", "call"))  # joined: tests/test_doc_references.py would read it as a path
    call = '{"jsonrpc": "2.0", "id": %d, "method": "' + method + '", "params": {"name": "%s", "arguments": %s}}'
    lines = [
        (call % (1, "list_catalog", "[" * 100_000 + "]" * 100_000)).encode(),    # no answer at all before
        (call % (2, "list_catalog", '{"kind": "' + "a" * 3_000_000 + '"}')).encode(),
        (call % (3, "estimate_cost", '{"gpus": ' + "9" * 5000 + "}")).encode(),
        b"not json {",
        b'{"id": 5, "hello": 1}',
        (call % (6, "estimate_cost", json.dumps({"tokens": "1T", "step_s": 2, "gbs": 16, "seq": 4096, "gpus": 8,
                                                 "price": 1e308}))).encode(),
        b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}',
    ]
    responses, code = _raw_session(lines, expected=len(lines))
    by_id = {r.get("id"): r for r in responses}
    assert code == 0
    for request_id in (1, 2, 3, 5):
        assert by_id[request_id]["error"]["code"] == -32600, by_id[request_id]
    assert by_id[None]["error"]["code"] == -32700                      # the line that is not JSON
    assert by_id[6]["result"]["isError"] and "over 10,000" in by_id[6]["result"]["content"][0]["text"]
    assert by_id[7]["result"] == {}                                    # the server still answers
    for response in responses:
        assert "Infinity" not in json.dumps(response) and "aaaa" not in json.dumps(response)
