"""Every documented example is also a test: the README's Python block runs as written, and its accuracy table
is what evals/summary.json gives (evals/readme_table.py)."""

import copy
import re
from pathlib import Path

import pytest

from trainplan.evals import readme_table
from trainplan.tools.search.eval_summary import load_summary

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_readme_quick_start_has_exactly_two_commands():
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in quick.splitlines() if line.strip()]
    assert len(commands) == 2
    assert "trainplan plan" in commands[0] and "pytest" in commands[1]


def test_readme_links_stay_inside_the_repository():
    root = README.parent
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()) + re.findall(r"`(\.\./[^`]+)`", README.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path = (root / target).resolve()
        assert path.is_relative_to(root) and path.exists(), target


def test_accuracy_table_is_what_the_summary_gives():
    """What CI runs: `python -m trainplan.evals.readme_table --check` fails when README.md's table is stale."""
    assert readme_table.main(["--check"]) == 0
    assert readme_table.splice(README.read_text(), readme_table.render()) == README.read_text()
    assert "| Llama 3.1 405B, 15.6T tokens | GPU-hours |" in readme_table.render()


def test_check_fails_on_a_stale_table_and_write_mends_it(tmp_path, capsys):
    table = readme_table.render()
    stale = tmp_path / "README.md"
    first_mape = re.search(r"MAPE [0-9.]+%", table).group(0)   # any figure of the table, made stale
    assert first_mape != "MAPE 99.9%"
    stale.write_text(README.read_text().replace(table, table.replace(first_mape, "MAPE 99.9%", 1)))
    assert readme_table.main(["--check", "--readme", str(stale)]) == 1
    assert "out of step with evals/summary.json" in capsys.readouterr().err
    assert readme_table.main(["--write", "--readme", str(stale)]) == 0
    assert stale.read_text() == README.read_text()
    assert readme_table.main(["--check", "--readme", str(stale)]) == 0


def test_the_table_follows_the_summary_and_its_prose_checks_its_premises():
    summary = copy.deepcopy(load_summary())
    case = next(c for c in summary["cases"] if c["id"] == "bloom-176b")
    case["figures"]["step_s"].update(predicted=99.0, error=-0.0544)
    assert "| 99.0 s | 104.7 s | -5% |" in readme_table.render(summary)
    next(c for c in summary["cases"] if c["id"] == "titan-llama2-13b-a100-noac")["fits"] = True
    with pytest.raises(ValueError, match="13B row does not fit"):
        readme_table.render(summary)


def test_a_readme_without_the_markers_is_refused(tmp_path, capsys):
    bare = tmp_path / "README.md"
    bare.write_text("# no table\n")
    assert readme_table.main(["--check", "--readme", str(bare)]) == 2
    assert "accuracy-table:start" in capsys.readouterr().err
