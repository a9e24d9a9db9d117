"""`trainplan --help` lists every command without importing any of them (the speed itself is a
benchmark, benchmarks/bench_startup.py, never a timed test)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from trainplan.cli import COMMANDS, app, load_command

HEAVY = ("numpy", "pydantic", "rich", "jinja2", "openai", "yaml", "trainplan.tools.config.contract")


def test_help_and_version_import_no_command_module():
    probe = ("import sys\nfrom trainplan.cli import main\nfor flag in ('--help', '--version'):\n"
             "    sys.argv = ['trainplan', flag]\n    try:\n        main()\n    except SystemExit:\n        pass\n"
             f"print('loaded:', *(m for m in {HEAVY!r} + tuple(sys.modules) if m in sys.modules "
             "and (m in " + repr(HEAVY) + " or m.startswith('trainplan.cli_'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "loaded:"


def test_every_command_loads_and_its_help_line_is_its_docstring():
    for name, (_, line) in COMMANDS.items():
        command = load_command(name)
        assert command is not None and command.name == name
        assert " ".join((command.help or "").split()).startswith(line), name
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and all(name in result.output for name in COMMANDS)


def test_unknown_command_is_a_usage_error():
    assert CliRunner().invoke(app, ["bogus"]).exit_code == 2
