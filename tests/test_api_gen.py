"""trainplan/_api.py (the public estimate, search and plan signatures) is what trainplan/api_gen.py renders from
the models now: a knob added to the contract reaches the public API by `python -m trainplan.api_gen --write`,
and a stale file fails here."""

from __future__ import annotations

import inspect
import subprocess
import sys

import trainplan
from trainplan import api_gen


def test_the_generated_module_is_current():
    assert api_gen.TARGET.read_text() == api_gen.render(), f"stale: run {api_gen.COMMAND}"


def test_the_check_command_passes_on_the_committed_file():
    done = subprocess.run([sys.executable, "-m", "trainplan.api_gen", "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_section_comments_come_from_the_models_docstrings():
    source = api_gen.render()
    assert "    # Job: what to train and on what (contract.Job)." in source
    assert "    # Layout: every parallelism, memory and kernel knob, as given (contract.Layout)." in source


def test_check_fails_on_a_stale_file_and_says_the_fix(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "_api.py"
    stale.write_text(api_gen.render().replace("tp: int = 1,", ""))
    monkeypatch.setattr(api_gen, "TARGET", stale)
    assert api_gen.main(["--check"]) == 1
    assert api_gen.COMMAND in capsys.readouterr().err
    assert api_gen.main(["--write"]) == 0 and api_gen.main(["--check"]) == 0
    assert api_gen.main([]) == 2


def test_the_public_functions_are_the_generated_ones():
    for name in ("estimate", "search", "plan"):
        assert getattr(trainplan, name).__module__ == "trainplan._api"
    assert "tp" in inspect.signature(trainplan.estimate).parameters


def test_importing_trainplan_loads_no_model_module():
    code = ("import sys, trainplan; heavy = [m for m in sys.modules if m.startswith(('pydantic', "
            "'trainplan.tools.config', 'trainplan.agent'))]; print(heavy)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
