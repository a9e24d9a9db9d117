"""The CLI prints what it printed when tests/data/golden/outputs.json was recorded (tests/golden_cases.py)."""

from __future__ import annotations

import json

import pytest

from golden_cases import COMMANDS, GOLDEN, comparable, run

RECORDED = json.loads(GOLDEN.read_text())


def test_every_command_is_recorded():
    assert set(RECORDED) == set(COMMANDS), "record again: python tests/golden_cases.py --write"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_is_unchanged(name):
    assert comparable(run(COMMANDS[name])) == comparable(RECORDED[name]), f"{name} changed; if meant, record again and say why"
