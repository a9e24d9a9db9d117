"""Bad input: one `error:` line on stderr that says how to fix it, exit code 2, never a traceback."""

import json
import subprocess

from cli_inprocess import run_cli as in_process
import pytest

BASE = ["estimate", "--model", "llama3-70b", "--gpu", "h100-sxm-80gb"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args)


@pytest.mark.parametrize("args, fragment", [
    (["estimate", "--model", "llama-99b", "--gpu", "h100", "--gpus", "8"], "unknown model"),
    (["estimate", "--model", "llama3-70b", "--gpu", "h1000", "--gpus", "8"], "did you mean"),
    (["estimate", "--model", "/no/such/config.json", "--gpu", "h100", "--gpus", "8"], "does not exist"),
    ([*BASE, "--gpus", "0"], "positive"),
    ([*BASE, "--gpus", "-8"], "positive"),
    ([*BASE, "--gpus", "64", "--tp", "8", "--pp", "3"], "tp*pp*cp=8*3*1=24 does not divide gpus=64"),
    ([*BASE, "--gpus", "48", "--tp", "3"], "does not divide the 64 attention heads"),
    (["estimate", "--model", "deepseek-v3", "--gpu", "h800", "--gpus", "64", "--ep", "7"], "ep=7"),
    ([*BASE, "--gpus", "64", "--tp", "8", "--gbs", "100"], "gbs=100 is not divisible by dp*mbs"),
    ([*BASE, "--gpus", "128", "--pp", "128"], "pp=128 is larger than the 80 layers"),
    ([*BASE, "--gpus", "8", "--zero", "4"], "ZeRO stage"),
    ([*BASE, "--gpus", "8", "--gbs", "8", "--tokens", "lots"], "tokens='lots' is not a number"),
    ([*BASE, "--gpus", "8", "--recompute", "sometimes"], "recompute"),
    (["estimate", "--model", "llama3-70b", "--gpu", "a100-sxm-80gb", "--gpus", "8", "--precision", "fp8"], "fp8"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert fragment.lower() in result.stderr.lower(), result.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr


@pytest.mark.parametrize("args, fragment", [
    ([*BASE, "--gpus", "8", "--method", "bogus"], "'bogus' is not one of"),
    ([*BASE, "--gpus", "eight"], "'--gpus'"),
    ([*BASE, "--gpus", "8", "--bogus"], "no such option"),
    (["estimat"], "no such command 'estimat'"),
    (["tools", "call"], "missing argument"),
])
def test_usage_errors_are_one_line_naming_the_help(args, fragment):
    """click's own usage errors (bad option values, unknown options or commands) follow the same
    rule: one `error:` line, exit 2, and where to look, instead of a framed box."""
    result = run_cli(*args)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert fragment in lines[0].lower() and "--help'" in lines[0], lines[0]
    if "--bogus" in args:   # click 8.1 quotes the option, 8.2 and later do not
        assert "--bogus" in lines[0]


def test_help_and_version_still_exit_0():
    for args in (["--help"], ["estimate", "--help"], ["--version"]):
        result = run_cli(*args)
        assert result.returncode == 0 and result.stdout.strip(), (args, result.stderr)


def test_malformed_config_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    result = run_cli("estimate", "--model", str(bad), "--gpu", "h100", "--gpus", "8")
    assert result.returncode == 2
    assert result.stderr.startswith("error:") and "not valid JSON" in result.stderr


def test_estimate_json_has_design_keys():
    result = run_cli(*BASE, "--gpus", "64", "--tp", "8", "--pp", "2", "--gbs", "128", "--tokens", "1T", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"params", "memory_gib", "fits", "time", "training", "config"}
    assert set(data["memory_gib"]) == {"weights", "gradients", "optimizer", "activations", "other", "total", "capacity",
                                       "headroom", "headroom_share"}
    assert {"step_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "hardware_tflops_per_gpu",
            "mfu", "hfu", "bubble_fraction", "breakdown"} <= set(data["time"])
    assert {"tokens", "steps", "days", "gpu_hours", "cost_usd", "goodput"} <= set(data["training"])
    assert data["config"]["dp"] * 8 * 2 == 64


@pytest.mark.parametrize("command", [
    ["plan", "Llama 3 8B on 8 H100s for 1T tokens"],
    ["prompt"],
    ["eval", "--case", "megatron-gpt3-175b"],
    ["export", "--engine", "megatron", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--gbs", "8"],
])
def test_out_to_a_directory_is_one_error_line(tmp_path, command):
    result = run_cli(*command, "--out", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is a directory" in errors[0], result.stderr


def test_out_into_a_missing_folder_creates_it(tmp_path):
    target = tmp_path / "missing" / "deeper" / "eval.md"
    result = run_cli("eval", "--case", "megatron-gpt3-175b", "--out", str(target))
    assert result.returncode == 0, result.stderr
    assert "megatron-gpt3-175b" in target.read_text()


def test_out_where_a_file_blocks_the_folder_is_one_error_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_cli("prompt", "--out", str(blocker / "prompt.md"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: cannot write --out file"), result.stderr


@pytest.mark.parametrize("flag, value, fragment", [
    ("--price", "nan", "not a finite number"), ("--price", "inf", "not a finite number"),
    ("--headroom-gib", "nan", "not a finite number"), ("--headroom-gib", "1000", "below the GPU's"),
    ("--intra-node-bw", "inf", "not a finite number"), ("--goodput", "nan", "not a finite number"),
])
@pytest.mark.parametrize("command", ["estimate", "search"])
def test_non_finite_and_impossible_numbers_are_refused(command, flag, value, fragment):
    result = run_cli(command, "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--gbs", "16",
                     "--tokens", "1T", flag, value)
    assert result.returncode == 2, result.stdout[-300:]
    assert result.stderr.startswith("error:") and fragment in result.stderr, result.stderr


@pytest.mark.parametrize("tool, arguments, fragment", [
    ("estimate_step_time", '{"model": "llama3-8b", "gpu": "h100", "gpus": true}', "true/false"),
    ("estimate_cost", '{"step_s": NaN, "tokens": "1T", "gpus": 8, "gbs": 8, "seq": 8192, "gpu": "h100"}',
     "finite number"),
    ("estimate_cost", '{"step_s": Infinity, "tokens": "1T", "gpus": 8, "gbs": 8, "seq": 8192, "gpu": "h100"}',
     "finite number"),
])
def test_tools_call_refuses_bools_as_counts_and_non_finite_numbers(tool, arguments, fragment):
    result = run_cli("tools", "call", tool, "--args", arguments)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert fragment in result.stderr, result.stderr


def test_tp_across_nodes_is_warned_with_its_share_of_the_step():
    import trainplan

    result = trainplan.estimate(model="llama3-70b", gpu="h100", gpus=64, tp=16, gbs=64)
    warning = next(note for note in result.notes if note.startswith("warning: tp=16 spans 2 nodes"))
    share = result.time.breakdown["comm/tp"] / result.time.step_s
    assert f"{share:.0%} of the step" in warning
    inside = trainplan.estimate(model="llama3-70b", gpu="h100", gpus=64, tp=8, gbs=64)
    assert not any(note.startswith("warning: tp=") for note in inside.notes or [])


@pytest.mark.parametrize("model, kind", [("llama3-70b", "gqa"), ("gpt3-175b", "mha"), ("falcon-7b", "mqa"),
                                         ("deepseek-v3", "mla")])
def test_describe_model_names_the_attention_kind(model, kind):
    from trainplan.agent.registry import dispatch

    assert dispatch("describe_model", {"model": model})["architecture"]["attention_type"] == kind


def test_search_output_fits_120_columns():
    import os

    env = dict(os.environ, COLUMNS="120")
    result = in_process("search", "--model", "llama3-70b", "--gpu", "h100",
                             "--gpus", "64", "--gbs", "128", env=env)
    assert result.returncode == 0, result.stderr
    table = [line for line in result.stdout.splitlines() if line.strip().startswith("TP")]
    assert table and all(len(line) <= 120 for line in result.stdout.splitlines())
    assert all(" zero" in line and "mbs" in line for line in table)  # one layout, one line


def test_search_table_keeps_every_figure_whole_at_80_columns():
    """At 80 columns the top-layouts table once cut every figure to '…' (step_s 's…'); the layout label
    now wraps instead, and each candidate's step time, MFU and cost print whole."""
    import json as json_module
    import os

    args = ["search", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "512",
            "--seq", "8192", "--tokens", "15e12"]
    shown = in_process(*args, env=dict(os.environ, COLUMNS="80"))
    data = in_process(*args, "--json")
    assert shown.returncode == 0 and data.returncode == 0, shown.stderr + data.stderr
    assert all(len(line) <= 80 for line in shown.stdout.splitlines())
    rows = [line for line in shown.stdout.splitlines() if line.strip().startswith("TP")]
    candidates = json_module.loads(data.stdout)["candidates"]
    assert len(rows) == len(candidates) > 1
    for row, candidate in zip(rows, candidates):
        assert f"{candidate['time']['step_s']:.3f}" in row and f"{candidate['time']['mfu']:.1%}" in row
        assert "$" in row and "…" not in row.split("$")[1]


@pytest.mark.parametrize("command, flags, fragment", [
    ("estimate", ["--gpus", "99999999999999999999"], "more GPUs than any cluster"),
    ("search", ["--gpus", "99999999999999999999"], "more GPUs than any cluster"),
    ("estimate", ["--gpus", "8", "--tp", "99999999999999999999"], "larger than the 8 GPUs"),
    ("search", ["--gpus", "8", "--seq", "99999999999999999999"], "past any published run"),
])
def test_absurd_counts_are_one_error_line(command, flags, fragment):
    result = run_cli(command, "--model", "llama3-8b", "--gpu", "h100", *flags)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") and fragment in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["estimate", "export", "search"])
def test_help_never_shows_pydantic_internals(command):
    """estimate and export take every option as an override of --from, so a required field (model, gpu,
    gpus) has no default to show: its help once ended 'default: PydanticUndefined'."""
    from typer.testing import CliRunner

    from trainplan.cli import app

    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "--gpus" in result.output
    assert "Undefined" not in result.output


@pytest.mark.parametrize("knobs, fragment", [
    # each once gave a number no run has (1.6e302 days), an empty cost (days: null) or an error naming no fix
    ({"goodput": 1e-300}, "below 1%"),
    ({"goodput": 1e-320}, "below 1%"),
    ({"intra_node_bw": 1e-300, "tp": 8}, "slower than any training link"),
    ({"inter_node_bw": 1e-310}, "slower than any training link"),
    ({"tokens": 1e300}, "the largest published runs train on tens of T"),
    ({"tokens": "1e20"}, "check the number and its unit"),
    ({"ramp_start_gbs": 8, "ramp_tokens": "2T"}, "give fewer ramp tokens"),
])
def test_implausible_job_numbers_are_refused_with_the_fix(knobs, fragment):
    import trainplan
    from trainplan.tools.core.errors import InputError

    job = {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "gbs": 64, "tokens": "1T", **knobs}
    with pytest.raises(InputError, match=fragment):
        trainplan.estimate(**job)


def test_plausible_extremes_still_estimate():
    import trainplan

    training = trainplan.estimate(model="llama3-8b", gpu="h100", gpus=16, gbs=64, tokens="100T", goodput=0.01,
                                  inter_node_bw=0.125).training
    assert training.days > 0 and training.cost_usd > 0


def test_a_stage_time_past_any_run_is_refused_not_an_infinite_makespan():
    from trainplan.tools.core.errors import InputError
    from trainplan.tools.perf.pipeline import simulate
    from trainplan.tools.perf.pipeline_closed_form import StageTimes

    with pytest.raises(InputError, match="seconds per micro-batch"):
        simulate("1f1b", 4, 8, stages=StageTimes(forward_s=1e308, backward_s=2.0))
    assert simulate("1f1b", 4, 8, stages=StageTimes(forward_s=1e5, backward_s=2e5)).makespan_s < float("inf")


@pytest.mark.parametrize("knobs, says, not_says", [
    ({"ep": 16}, "ep=16 needs a mixture-of-experts model", "etp"),
    ({"tp": 2, "etp": 4}, "etp=4 (expert tensor parallelism) needs", "--ep 1"),
])
def test_expert_knobs_on_a_dense_model_name_the_one_given(knobs, says, not_says):
    """The error once read 'ep=16 or etp=1 needs a mixture-of-experts model' for --ep 16 alone."""
    import trainplan
    from trainplan.tools.core.errors import InputError

    with pytest.raises(InputError) as error:
        trainplan.estimate(model="llama3-70b", gpu="h100", gpus=64, **knobs)
    assert says in str(error.value) and not_says not in str(error.value)


@pytest.mark.parametrize("flag", [["--capacity-factor", "1.25"], ["--dispatcher", "allgather"], ["--force-balance"],
                                  ["--grouped-gemm", "fused"]])
def test_moe_knobs_on_a_dense_model_are_refused(flag):
    """An MoE routing/expert knob on a dense model used to pass without a word (--ep was refused)."""
    result = run_cli("estimate", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8", *flag)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "llama3-8b is dense" in lines[0] and f"drop {flag[0]}" in lines[0], lines[0]
