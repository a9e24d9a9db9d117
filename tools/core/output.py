"""Writing the files a command makes (`--out`, `prompt`, chat `/save` and `/report`): one rule for every
command, and one `error:` line when it cannot.

Every write is atomic: the text goes to a temporary file in the same folder, is flushed and fsynced, and
only then renamed over the target (os.replace, atomic on POSIX and Windows within one file system). A
full disk, a killed process or an encoding failure therefore leaves the previous file as it was, never a
partial one. A target that is a symbolic link is refused: writing would replace whatever file the link
points to, which the user may not know (a link planted in a shared folder is a classic overwrite attack).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from trainplan.tools.core.errors import InputError

TEMP_PREFIX_CHARS = 40
"""How much of the target's name the temporary file's name keeps, so that a long (but legal) name does
not become an illegal one: most file systems allow 255 bytes per name."""


def _target_mode(path: Path) -> int:
    """The permission bits the written file gets: the previous file's, or what open() would give."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_output(path: Path | str, text: str, flag: str = "--out") -> Path:
    """Write `text` (UTF-8) to `path` atomically, creating missing parent folders (as `plan --out
    reports/x.md` expects); return the path written.

    A symbolic link, a folder, an unwritable place, a full disk or a name the file system refuses is an
    InputError that names the fix; the previous file, if any, is left intact.
    """
    path = Path(path).expanduser()
    if path.is_symlink():
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise InputError(f"{flag} '{path}' is a symbolic link (to '{target}'): refusing to write through it; "
                         f"give the real file's path or a new file name")
    if path.is_dir():
        raise InputError(f"{flag} '{path}' is a directory: give a file name, e.g. {path / 'report.md'}")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"cannot write {flag} file '{path}': the text is not valid Unicode ({exc.reason}); "
                         f"nothing was written") from None
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = _target_mode(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:TEMP_PREFIX_CHARS]}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        kept = " (the previous file is unchanged)" if path.exists() else ""
        raise InputError(f"cannot write {flag} file '{path}': {reason}{kept}: choose a writable file path "
                         f"with free space") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return path

