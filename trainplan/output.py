"""Writing a command's `--out` file: one rule for every command, and one `error:` line when it cannot."""

from __future__ import annotations

from pathlib import Path

from trainplan.tools.errors import InputError


def write_output(path: Path, text: str, flag: str = "--out") -> None:
    """Write `text` to `path`, creating missing parent folders (as `plan --out reports/x.md` expects).

    A folder, an unwritable place or a name the file system refuses is an InputError that names the fix.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(f"{flag} '{path}' is a directory: give a file name, e.g. {path / 'report.md'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"cannot write {flag} file '{path}': {reason}: choose a writable file path") from None
