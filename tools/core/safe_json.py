"""The one bounded JSON reader of every JSON input: model and GPU files, `estimate --from` /
`export --from`, `tools call --args` (a file, standard input or the text itself), chat `/load`
transcripts, the LLM's tool-call arguments and MCP requests.

Untrusted JSON costs at most what its limits allow (`JsonLimits`):

- bytes: a file, FIFO or device is read for at most ``max_bytes + 1`` bytes; a path that is not a
  regular file (a FIFO, /dev/zero) is refused before it is read, and opened non-blocking so that
  opening it cannot hang either;
- nesting depth: counted on the brackets outside strings *before* ``json.loads`` (which recurses),
  with C-speed string operations, so 100,000 brackets cost microseconds and no Python recursion;
- digits: a number written with more than ``max_number_digits`` digits is refused before ``int()``
  meets Python's 4,300-digit limit;
- string length: a string longer than ``max_string_chars`` (as written, escapes included);
- NaN, Infinity and numbers that overflow a float (``1e999``): not JSON, refused.

Every refusal is an InputError of one line that names the input and the limit, and never echoes
the input's content. `check_value` applies the same limits to an already parsed value (MCP and
LLM arguments that arrive as objects), and `non_finite_path` finds a NaN or infinity in a result.
`tree_copy` copies a parsed tree (a memo's result) for a caller that may edit it.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

from trainplan.tools.core.errors import InputError

__all__ = ["JsonLimits", "DEFAULT", "CONFIG", "ARGUMENTS", "TRANSCRIPT", "MCP_MESSAGE", "loads", "read_bytes",
           "read_stream", "read_file", "check_value", "non_finite_path", "tree_copy"]


@dataclass(frozen=True)
class JsonLimits:
    """What one JSON input may hold (module docstring)."""

    max_bytes: int = 4 * 2**20
    max_depth: int = 64
    max_number_digits: int = 100
    max_string_chars: int = 2**20


DEFAULT = JsonLimits()
CONFIG = JsonLimits(max_bytes=2**20, max_string_chars=2**16)
"""Model and GPU files and saved results (--from): a config.json is a few KB."""
ARGUMENTS = JsonLimits(max_bytes=2**20, max_depth=32, max_string_chars=2**16)
"""Tool arguments (tools call --args, the LLM's calls, MCP calls): a few hundred bytes in use."""
TRANSCRIPT = JsonLimits(max_bytes=32 * 2**20, max_depth=32, max_string_chars=4 * 2**20)
"""A chat transcript file (JSON lines): a long session's tool results fit many times."""
MCP_MESSAGE = JsonLimits(max_bytes=2**20, max_depth=40, max_string_chars=2**16)
"""One JSON-RPC message of `trainplan mcp`: the envelope (a few levels) around tool arguments."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BIG_EXPONENT = re.compile(r"[eE]\+?0*[1-9][0-9]{2,}")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class _Refused(ValueError):
    """Raised from json's hooks; turned into an InputError that names the input."""


def _v(where: str, verb: str) -> str:
    """`verb` ('is', 'holds', or a phrase starting with one) agreeing with `where` ('the arguments' are)."""
    if not where.endswith("arguments"):
        return verb
    head, _, rest = verb.partition(" ")
    return " ".join(filter(None, ({"is": "are", "holds": "hold"}.get(head, head), rest)))


def _constant(name: str) -> Any:
    raise _Refused(f"holds {name}, which JSON does not allow: write a finite number")


def _check_text(text: str, where: str, limits: JsonLimits) -> str:
    """The limits that must hold before json.loads sees the text (depth, digits, string length); returns
    the text with its strings emptied."""
    strings = _STRING.findall(text)
    if strings and max(map(len, strings)) - 2 > limits.max_string_chars:
        raise InputError(f"{where} {_v(where, 'holds')} a string over {limits.max_string_chars:,} characters, more than trainplan "
                         "reads: shorten it")
    outside = _STRING.sub('""', text) if strings else text
    if re.search(rf"[0-9]{{{limits.max_number_digits + 1},}}", outside):
        raise InputError(f"{where} {_v(where, 'holds')} a number with more than {limits.max_number_digits} digits: write it with "
                         "an exponent (e.g. 1.5e12) or fewer digits")
    opens = outside.count("[") + outside.count("{")
    if opens > limits.max_depth:
        brackets = _NOT_BRACKET.sub("", outside)
        depth = max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)
        if depth > limits.max_depth:
            raise InputError(f"{where} {_v(where, 'is')} nested more than {limits.max_depth} levels deep, more than trainplan "
                             "reads: flatten it (is it the right file?)")
    return outside


def loads(text: str | bytes, where: str, limits: JsonLimits = DEFAULT) -> Any:
    """JSON text -> a value, within `limits`; `where` names the input in the one-line InputError."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > limits.max_bytes:
            raise _too_large(where, limits)
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{where} {_v(where, 'is')} not UTF-8 text: save it as UTF-8 JSON") from None
    elif len(text) > limits.max_bytes:  # a character is at least one byte
        raise _too_large(where, limits)
    outside = _check_text(text, where, limits)
    try:
        value = json.loads(text, parse_constant=_constant)
    except _Refused as exc:
        raise InputError(f"{where} {_v(where, str(exc))}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} {_v(where, 'is')} not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
                         "fix it") from None
    except (RecursionError, ValueError):  # the checks above make these unreachable; still one line
        raise InputError(f"{where} cannot be read as JSON within trainplan's limits: fix it") from None
    path = non_finite_path(value) if _BIG_EXPONENT.search(outside) else None  # 1e400 parses as an infinity
    if path is not None:
        raise InputError(f"{where} {_v(where, 'holds')} a number too large for a float at {path}: write a finite "
                         "number")
    return value


def _too_large(where: str, limits: JsonLimits) -> InputError:
    return InputError(f"{where} {_v(where, 'is')} over {limits.max_bytes:,} bytes, more than trainplan reads: is it the right "
                      "file?")


def read_stream(stream: BinaryIO, where: str, max_bytes: int) -> bytes:
    """At most max_bytes from a binary stream (standard input): one more byte read means too large."""
    data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"{where} is over {max_bytes:,} bytes, more than trainplan reads: is it the right input?")
    return data


def read_bytes(path: str | Path, where: str, max_bytes: int) -> bytes:
    """The bytes of a regular file, at most max_bytes; a FIFO, device or directory is refused unread."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read {where}: {_reason(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"
            raise InputError(f"{where} is {what}: pass a JSON file")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(2**20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputError(f"cannot read {where}: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise InputError(f"{where} is over {max_bytes:,} bytes, more than trainplan reads: is it the right file?")
    return b"".join(chunks)


def _reason(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower() if exc.errno is not None else type(exc).__name__


def read_file(path: str | Path, where: str, limits: JsonLimits = DEFAULT) -> Any:
    """A JSON file -> a value, within `limits` (read_bytes, then loads)."""
    return loads(read_bytes(path, where, limits.max_bytes), where, limits)


def check_value(value: Any, where: str, limits: JsonLimits = ARGUMENTS) -> Any:
    """An already parsed value within `limits` (depth, string length, digits, finite numbers), walked
    without recursion; returns it unchanged."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > limits.max_bytes:
            raise _too_large(where, limits)
        if isinstance(item, (dict, list, tuple)):
            if depth > limits.max_depth:
                raise InputError(f"{where} {_v(where, 'is')} nested more than {limits.max_depth} levels deep, more than trainplan "
                                 "reads: flatten it")
            children = list(item.items()) if isinstance(item, dict) else item
            for child in children:
                if isinstance(item, dict):
                    stack.append((child[0], depth))
                    stack.append((child[1], depth + 1))
                else:
                    stack.append((child, depth + 1))
        elif isinstance(item, str):
            if len(item) > limits.max_string_chars:
                raise InputError(f"{where} {_v(where, 'holds')} a string over {limits.max_string_chars:,} characters, more than "
                                 "trainplan reads: shorten it")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) >= 10**limits.max_number_digits:
                raise InputError(f"{where} {_v(where, 'holds')} a number with more than {limits.max_number_digits} digits: write "
                                 "it with an exponent (e.g. 1.5e12) or fewer digits")
        elif isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{where} {_v(where, 'holds')} NaN or Infinity, which JSON does not allow: write a finite number")
    return value


def non_finite_path(value: Any) -> str | None:
    """The path ('time.step_s', 'candidates[0].mfu') of the first NaN or infinity in a JSON-like value, or
    None when every number is finite; walked without recursion."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path or "the result"
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return None


def tree_copy(value: Any) -> Any:
    """A deep copy of a parsed JSON or YAML tree: new dicts and lists all the way down, the immutable leaves
    (str, int, float, bool, None) shared, as copy.deepcopy shares them; anything else goes to copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {k: tree_copy(v) for k, v in value.items()}
    if kind is list:
        return [tree_copy(v) for v in value]
    if kind is str or kind is float or kind is int or kind is bool or value is None:
        return value
    return copy.deepcopy(value)
