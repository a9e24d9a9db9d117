"""Fuzz the CLI and `tools call` with random flags, values and files (hypothesis).

Whatever comes in: no traceback, an exit code in {0, 1, 2}, strict JSON whenever JSON is printed,
and only finite numbers in it. The default profile is quick; `pytest -m slow` runs a longer one
(`HYPOTHESIS_PROFILE=fuzz-long` or the `slow` marker's own settings below).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainplan.cli import main

QUICK = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
LONG = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MODELS = ["llama3-8b", "llama3-8b", "llama3-70b", "qwen3-30b-a3b", "deepseek-v2-lite", "gpt3-175b", "no-such-model", ""]
GPUS = ["h100", "h100", "a100-sxm-40gb", "b200", "h800", "rtx-9090", ""]
NUMBERS = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "3", "4", "8", "16", "64", "512", "1e3", "nan", "inf", "-inf", "-0",
                     "0.5", "1e308", "99999999999999999999", "abc", "", "true", "1T", "15T", "2.5"]),
    st.integers(min_value=-10, max_value=4096).map(str),
)
# Mostly sizes that divide, so that the fuzz reaches the calculators and not only the validation.
PLAUSIBLE = st.one_of(st.sampled_from(["1", "2", "4", "8", "16", "64", "512", "2048", "8192"]),
                      st.sampled_from(["nan", "inf", "-inf", "-1", "0", "-0", "1e308", "abc", "2.5", "1e-300"]),
                      NUMBERS)
KNOBS = ["--tp", "--pp", "--cp", "--ep", "--vpp", "--zero", "--mbs", "--gbs", "--seq", "--tokens", "--price",
         "--gpus-per-node", "--intra-node-bw", "--inter-node-bw", "--headroom-gib", "--goodput"]
CHOICES = {"--recompute": ["none", "selective", "full", "sometimes"], "--schedule": ["1f1b", "gpipe", "zb-h1",
           "dualpipe", "interleaved", "x"], "--precision": ["bf16", "fp8", "fp4"]}


def run(argv: list[str]) -> tuple[int, str, str]:
    """`trainplan ARGV` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = ["trainplan", *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
    return code, out.getvalue(), err.getvalue()


def _reject_constant(name: str):
    raise ValueError(f"non-strict JSON constant {name}")


def assert_finite(value, where: str = "$") -> None:
    if isinstance(value, float):
        assert math.isfinite(value), f"non-finite number at {where}"
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_finite(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_finite(item, f"{where}[{i}]")


def check(argv: list[str], json_expected: bool) -> None:
    code, out, err = run(argv)
    assert "Traceback" not in err + out, (argv, err)
    assert code in (0, 1, 2), (argv, code, err)
    if code == 2:
        assert err.strip(), (argv, "exit 2 with no message")
    if json_expected and code == 0:
        data = json.loads(out, parse_constant=_reject_constant)
        assert_finite(data)


@st.composite
def estimate_argv(draw) -> list[str]:
    """A valid estimate with cost, then one to four of its flags replaced or added with random values."""
    flags = {"--model": "llama3-8b", "--gpu": "h100", "--gpus": "8", "--gbs": "16", "--tokens": "1T"}
    for flag in draw(st.lists(st.sampled_from(["--model", "--gpu", "--gpus", *KNOBS, *CHOICES]), min_size=1,
                              max_size=4, unique=True)):
        if flag == "--model":
            flags[flag] = draw(st.sampled_from(MODELS))
        elif flag == "--gpu":
            flags[flag] = draw(st.sampled_from(GPUS))
        elif flag in CHOICES:
            flags[flag] = draw(st.sampled_from(CHOICES[flag]))
        else:
            flags[flag] = draw(PLAUSIBLE)
    return ["estimate", *(item for pair in flags.items() for item in pair), "--json"]


@st.composite
def tool_call(draw) -> tuple[str, str]:
    name = draw(st.sampled_from(["calculate_memory", "estimate_step_time", "estimate_cost", "simulate_pipeline",
                                 "describe_model", "list_catalog", "no_such_tool"]))
    values = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True, allow_infinity=True),
                       st.sampled_from(["llama3-8b", "h100", "1f1b", "15T", "x"]))
    keys = ["model", "gpu", "gpus", "tp", "pp", "cp", "ep", "zero", "mbs", "gbs", "seq", "schedule", "step_s",
            "tokens", "price", "microbatches", "recompute", "unknown_key"]
    base = {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "gbs": 16, "seq": 4096, "tokens": "1T", "step_s": 2.0,
            "pp": 2, "microbatches": 8, "schedule": "1f1b"}
    args = {key: value for key, value in base.items() if draw(st.booleans())}
    args.update(draw(st.dictionaries(st.sampled_from(keys), values, max_size=4)))
    text = json.dumps(args)  # Python writes NaN/Infinity here: the tool must refuse them
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut off, as a model out of tokens sends
    return name, text


@QUICK
@given(estimate_argv())
def test_fuzz_estimate(argv):
    check(argv, json_expected=True)


@QUICK
@given(tool_call())
def test_fuzz_tools_call(call):
    name, text = call
    check(["tools", "call", name, "--args", text], json_expected=True)


@QUICK
@given(st.lists(st.sampled_from(["--pp", "--microbatches", "--vpp", "--schedule"]), min_size=1, max_size=4,
                unique=True), st.data())
def test_fuzz_bubble(flags, data):
    argv = ["bubble"]
    for flag in flags:
        value = data.draw(st.sampled_from(CHOICES["--schedule"])) if flag == "--schedule" else data.draw(
            st.sampled_from(["0", "-1", "1", "2", "4", "8", "16", "nan", "x", "100000000"]))
        argv += [flag, value]
    check(argv + ["--json"], json_expected=True)


@pytest.mark.slow
@LONG
@given(estimate_argv())
def test_fuzz_estimate_long(argv):
    check(argv, json_expected=True)


@pytest.mark.slow
@LONG
@given(tool_call())
def test_fuzz_tools_call_long(call):
    name, text = call
    check(["tools", "call", name, "--args", text], json_expected=True)
