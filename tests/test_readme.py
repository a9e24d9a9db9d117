"""Every documented example is also a test: the README's Python block runs as written."""

import re
from pathlib import Path

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
