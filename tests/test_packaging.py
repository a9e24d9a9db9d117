"""Packaging: the shipped prompt is package data, so `trainplan prompt` works from an installed wheel;
one version number. The wheel build itself is slow (pytest -m slow)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

import trainplan
from trainplan import prompts
from trainplan.agent import prompt_text

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_prompt_is_package_data():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    assert setuptools["package-dir"]["trainplan.outputs"] == "outputs"
    assert "trainplan.outputs" in setuptools["packages"]
    assert "*.md" in setuptools["package-data"]["trainplan.outputs"]
    assert prompts.SHIPPED_PATH.name == prompts.SHIPPED_NAME and prompts.SHIPPED_PATH.is_file()
    assert project["project"]["dynamic"] == ["version"]
    assert setuptools_version_attr(project) == "trainplan.__version__" and trainplan.__version__


def setuptools_version_attr(project: dict) -> str:
    return project["tool"]["setuptools"]["dynamic"]["version"]["attr"]


@pytest.mark.slow
def test_prompt_works_from_an_installed_wheel(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(wheels)], check=True, timeout=300)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *map(str, wheels.glob("*.whl"))],
                   check=True, timeout=300)
    run = [str(env_dir / "bin" / "trainplan")]
    checked = subprocess.run([*run, "prompt", "--check"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert checked.returncode == 0 and "site-packages" in checked.stdout, checked.stderr
    printed = subprocess.run([*run, "prompt"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert printed.returncode == 0 and printed.stdout == prompt_text.shipped_prompt()
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == f"trainplan {trainplan.__version__}"
