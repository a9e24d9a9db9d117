"""Every file the CLI writes is written atomically: a failed write (a full disk, a crash midway) leaves the
previous file intact and no partial or temporary file, and a symbolic link is never written through."""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

import pytest

from trainplan.tools.core import output
from trainplan.agent.chat import ChatSession, Transcript
from trainplan.cli import main
from trainplan.tools.core.errors import InputError

PREVIOUS = "the previous report\n"
EXPORT = ["export", "--engine", "megatron", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--tp", "2"]


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["trainplan", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def fail_fsync_with_enospc(monkeypatch) -> None:
    """The disk fills up after part of the file was written: fsync reports ENOSPC."""
    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(output.os, "fsync", full_disk)


def only_error_line(err: str) -> str:
    """The one `error:` line; `plan`'s progress lines off a terminal ('trainplan: searched ...') aside."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("trainplan: ")]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "report.md"
    target.write_text(PREVIOUS)
    target.chmod(0o640)
    output.write_output(target, "new\n")
    assert target.read_text() == "new\n"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640), "the previous file's permissions are kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_full_disk_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    target.write_text(PREVIOUS)
    fail_fsync_with_enospc(monkeypatch)
    with pytest.raises(InputError, match="No space left on device.*previous file is unchanged"):
        output.write_output(target, "x" * 100_000)
    assert target.read_text() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"], "the temporary file is removed"


def test_a_write_failing_midway_keeps_the_previous_file(tmp_path, monkeypatch):
    """The process writes part of the text, then the write fails: the target never sees the part."""
    target = tmp_path / "args.txt"
    target.write_text(PREVIOUS)
    real_fdopen = os.fdopen

    class HalfWriter(io.RawIOBase):
        def __init__(self, fd):
            self.file = real_fdopen(fd, "wb")

        def write(self, data):
            self.file.write(bytes(data[: len(data) // 2]))
            self.file.flush()
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        def close(self):
            self.file.close()

    monkeypatch.setattr(output.os, "fdopen", lambda fd, mode: HalfWriter(fd))
    with pytest.raises(InputError, match="Input/output error"):
        output.write_output(target, "new text " * 1000)
    assert target.read_text() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.txt"]


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PREVIOUS)
    link = tmp_path / "report.md"
    link.symlink_to(victim)
    with pytest.raises(InputError, match="is a symbolic link"):
        output.write_output(link, "new\n")
    assert victim.read_text() == PREVIOUS and link.is_symlink()


def test_a_dangling_symlink_is_refused_too(tmp_path):
    link = tmp_path / "report.md"
    link.symlink_to(tmp_path / "not-yet.txt")
    with pytest.raises(InputError, match="is a symbolic link"):
        output.write_output(link, "new\n")
    assert not (tmp_path / "not-yet.txt").exists()


def test_a_long_file_name_still_gets_a_legal_temporary_name(tmp_path):
    target = tmp_path / ("r" * 250 + ".md")
    output.write_output(target, "new\n")
    assert target.read_text() == "new\n"


@pytest.mark.parametrize("command, flag", [
    (["prompt"], "--out"),
    (EXPORT, "--out"),
    (["eval", "--case", "megatron-gpt3-175b"], "--out"),
    (["plan", "--backend", "offline", "Llama 3 8B on 8 H100s for 10B tokens"], "--out"),
    (["plan", "--backend", "offline", "Llama 3 8B on 8 H100s for 10B tokens"], "--html"),
])
def test_cli_out_on_a_full_disk_is_one_error_line_and_keeps_the_file(tmp_path, monkeypatch, capsys, command, flag):
    target = tmp_path / "out.txt"
    target.write_text(PREVIOUS)
    fail_fsync_with_enospc(monkeypatch)
    code, _, err = run_main(monkeypatch, capsys, *command, flag, str(target))
    assert code == 2
    assert f"cannot write {flag} file" in only_error_line(err)
    assert target.read_text() == PREVIOUS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_cli_out_through_a_symlink_is_one_error_line(tmp_path, monkeypatch, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text(PREVIOUS)
    (tmp_path / "link.txt").symlink_to(victim)
    code, _, err = run_main(monkeypatch, capsys, *EXPORT, "--out", str(tmp_path / "link.txt"))
    assert code == 2
    assert "symbolic link" in only_error_line(err)
    assert victim.read_text() == PREVIOUS


def test_chat_save_and_report_are_atomic(tmp_path, monkeypatch):
    saved = tmp_path / "session.jsonl"
    saved.write_text(PREVIOUS)
    transcript = Transcript()
    transcript.add({"kind": "user", "text": "Llama 3 8B on 8 H100s"})
    fail_fsync_with_enospc(monkeypatch)
    with pytest.raises(InputError, match="cannot write /save file"):
        transcript.save(saved)
    assert saved.read_text() == PREVIOUS and transcript.path is None
    monkeypatch.undo()
    assert transcript.save(saved) == saved and saved.read_text().count("\n") == 1

    link = tmp_path / "report.md"
    link.symlink_to(saved)
    from rich.console import Console
    session = ChatSession(Console(file=io.StringIO()), backend="offline")
    session.handle("Llama 3 8B on 8 H100s for 10B tokens")
    with pytest.raises(InputError, match="/report .* is a symbolic link"):
        session.cmd_report(str(link))
    assert saved.read_text().count("\n") >= 1 and Path(saved).read_text().startswith('{"kind": "user"')
