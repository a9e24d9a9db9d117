"""No module of the package is over 500 lines (issue 22): a longer one does two jobs and is split."""

from __future__ import annotations

from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("tools", "agent", "trainplan", "evals", "prompts")
MAX_LINES = 500


def oversized_modules() -> dict[str, int]:
    """Every .py file under the package folders with more than MAX_LINES lines, with its line count."""
    found = {}
    for folder in PACKAGE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found[str(path.relative_to(ROOT))] = lines
    return found


def test_the_scan_sees_the_package() -> None:
    assert all((ROOT / folder).is_dir() for folder in PACKAGE_FOLDERS)
    assert sum(1 for folder in PACKAGE_FOLDERS for _ in (ROOT / folder).rglob("*.py")) > 50


def test_no_module_is_over_500_lines() -> None:
    assert oversized_modules() == {}, oversized_modules()
