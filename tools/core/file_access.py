"""Which model and GPU files a caller may open: the user may name any file; a tool call may not.

A tool call comes from an LLM or an MCP client (or `trainplan tools call`), and its arguments are
untrusted: a model or GPU argument that names a file could otherwise make the tool open any file on
the machine and describe it back. So `registry.dispatch` runs every tool inside `untrusted_caller()`,
and there:

- catalog names and aliases always resolve (no file outside the package is opened for them);
- a path is opened only when its real path (symlinks followed) lies under an allowed root: the
  working directory, a folder named in TRAINPLAN_DATA_DIRS (os.pathsep-separated), a folder given with
  `--data-dir`, or a file the user's own request named (`user_named_files`, used by the LLM planner);
- the refusal reads the same whether the file exists or not, and a file that is missing, unreadable
  or malformed gets one message that quotes none of its content (`unreadable`).

Commands the user runs directly (`estimate`, `search`, `plan` without an LLM) are not tool calls:
their arguments are the user's own, and open any file the user can.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

from trainplan.tools.core.errors import InputError

DATA_DIRS_ENV = "TRAINPLAN_DATA_DIRS"
MAX_DATA_DIRS = 64
"""At most this many folders are read from TRAINPLAN_DATA_DIRS and --data-dir together."""
MAX_SHOWN_NAME = 120
"""A refused name is quoted up to this many characters (it is the caller's own text)."""


@dataclass(frozen=True)
class _Policy:
    untrusted: bool = False
    user_files: frozenset[str] = frozenset()


_POLICY: ContextVar[_Policy] = ContextVar("trainplan_file_policy", default=_Policy())
_FLAG_DIRS: list[str] = []


def add_data_dirs(folders: list[str] | tuple[str, ...]) -> None:
    """Folders given with --data-dir: tool calls may open files under them."""
    for folder in folders:
        if folder and "\x00" not in folder and len(_FLAG_DIRS) < MAX_DATA_DIRS:
            _FLAG_DIRS.append(folder)


def _real(path: str) -> str | None:
    """The real absolute path, or None for a string no file system could hold."""
    try:
        return os.path.realpath(os.path.expanduser(path))
    except (ValueError, OSError):     # NUL bytes, a name too long for the platform
        return None


def allowed_roots() -> list[str]:
    """Real paths of the folders a tool call may open files under: the working directory first."""
    entries = [os.getcwd()]
    entries += [e for e in os.environ.get(DATA_DIRS_ENV, "").split(os.pathsep) if e][:MAX_DATA_DIRS]
    entries += _FLAG_DIRS
    roots = []
    for entry in entries:
        real = _real(entry)
        if real and real not in roots:
            roots.append(real)
    return roots


def is_untrusted() -> bool:
    return _POLICY.get().untrusted


@contextmanager
def untrusted_caller():
    """Run a tool call: paths are limited to the allowed roots (files the user named stay allowed)."""
    token = _POLICY.set(replace(_POLICY.get(), untrusted=True))
    try:
        yield
    finally:
        _POLICY.reset(token)


@contextmanager
def user_named_files(names):
    """Files the user's own request named (a model or GPU path): a tool call may open these too."""
    real = {r for r in (_real(n) for n in names if isinstance(n, str) and n) if r}
    policy = _POLICY.get()
    token = _POLICY.set(replace(policy, user_files=policy.user_files | frozenset(real)))
    try:
        yield
    finally:
        _POLICY.reset(token)


def shown(name: str) -> str:
    """The caller's name, quoted safely: printable characters only, bounded."""
    text = "".join(ch if ch.isprintable() else "?" for ch in name[:MAX_SHOWN_NAME])
    return text + ("..." if len(name) > MAX_SHOWN_NAME else "")


def _under(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def require_allowed(name: str, kind: str) -> None:
    """Refuse, for a tool call, a path outside the allowed roots; the answer does not depend on
    whether the file exists."""
    if not is_untrusted():
        return
    real = _real(name)
    policy = _POLICY.get()
    if real is not None and (real in policy.user_files or any(_under(real, root) for root in allowed_roots())):
        return
    raise InputError(
        f"{kind} '{shown(name)}' is not a catalog name, and a tool call may open only files under the working "
        f"directory or a data folder: pass a catalog name (list_catalog), or put the file under the working "
        f"directory or a folder named in {DATA_DIRS_ENV} or with --data-dir")


def unreadable(kind: str, name: str, what: str) -> InputError:
    """One message for a file a tool call named that is missing, unreadable or malformed: it quotes
    none of the file's content and does not say which of the three it is."""
    return InputError(
        f"{kind} file '{shown(name)}' cannot be used: it is missing, unreadable or not {what}; check it with "
        f"`trainplan estimate --{kind} PATH ...` in a shell, which says why")
