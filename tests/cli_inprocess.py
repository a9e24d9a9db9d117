"""`trainplan ARGS` run in this process, answered as subprocess.run answers (returncode, stdout, stderr).

For the tests whose subject is what a command prints or exits with, not the process itself: starting
Python and importing the package for each call was most of their run time. It goes through
trainplan.cli.main, the console entry point, so input errors become one line and exit 2 as they do
from the shell. Standard input is what `stdin` says (empty otherwise, as off a terminal), and `env`
replaces the environment for the call. The tests of the real process (startup, packaging, the MCP
server's stdio) keep a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback

from trainplan.cli import main


@contextlib.contextmanager
def _environment(env: dict | None):
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _stream(data: bytes = b"") -> io.TextIOWrapper:
    """A text stream over bytes, with the `.buffer` a pipe has (`--args -` reads sys.stdin.buffer)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")


def run_cli(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python -m trainplan.cli ARGS` in-process; an uncaught exception exits 1 with its traceback on stderr."""
    out, err = _stream(), _stream()
    saved_argv, saved_stdin = sys.argv, sys.stdin
    sys.argv, sys.stdin = ["trainplan", *args], _stream((stdin or "").encode())
    code = 0
    try:
        with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - as the interpreter does: the traceback, exit 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, sys.stdin = saved_argv, saved_stdin
    return subprocess.CompletedProcess(["trainplan", *args], code, _text(out), _text(err))
