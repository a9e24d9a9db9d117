"""Every file of this repository that a docstring, comment or doc names exists: a path that starts at
one of the repository's own folders (tools/, agent/, ...) or names one of its top-level files, and a
module reference such as tools/config/layout.resolve_config. A path in another repository is written after
its repository and a colon (pytorch/pytorch:tools/autograd/derivatives.yaml) or after the
repository's name (NVIDIA/Megatron-LM megatron/training/arguments.py) and is not checked here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("tools", "agent", "trainplan", "prompts", "outputs", "evals", "tests", "benchmarks", ".ci")
TOP_FILES = ("README.md", "ARCHITECTURE.md", "DESIGN" + ".md", "pyproject.toml")
GENERATED = ("evals/runs/measured",)
"""Folders a script writes and the repository does not hold yet (benchmarks/measure_gpu.py's output)."""
SCANNED = ("*.py", "*.md", "*.j2", "*.yaml", "*.toml")
PATH = re.compile(r"(?<![\w./:-])((?:%s)/[\w./*-]*[\w*]|(?:%s))(?![\w/])" % (
    "|".join(re.escape(f) for f in FOLDERS), "|".join(re.escape(f) for f in TOP_FILES)))


def _files():
    for pattern in SCANNED:
        for path in ROOT.rglob(pattern):
            if not {".git", "node_modules", ".venv", "build"} & set(path.parts):
                yield path


def _exists(reference: str) -> bool:
    reference = reference.rstrip(".")
    if any(ch in reference for ch in "*{<") or reference.startswith(GENERATED):   # a glob or a template
        return True
    target = ROOT / reference
    if target.exists():
        return True
    module = reference.split("/")
    module[-1] = module[-1].split(".")[0] + ".py"          # tools/config/layout.resolve_config -> tools/config/layout.py
    return (ROOT.joinpath(*module)).exists()


def test_every_named_repository_file_exists():
    missing = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in PATH.finditer(text):
            reference = match.group(1)
            if not _exists(reference):
                line = text.count("\n", 0, match.start()) + 1
                missing.append(f"{path.relative_to(ROOT)}:{line}: {reference}")
    assert not missing, "files named but not in the repository:\n" + "\n".join(sorted(set(missing)))
