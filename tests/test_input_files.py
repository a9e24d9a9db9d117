"""Files a user hands over: non-finite numbers, other encodings, checkpoint folders, configs written
by a current transformers (v5 attribute names). Each problem is one `error:` line and exit 2."""

import json
import subprocess
from pathlib import Path

from cli_inprocess import run_cli as in_process
import pytest

from trainplan.tools.hardware.catalog import load_model
from trainplan.tools.hardware.counting import count_params
from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.hf import ATTRIBUTE_MAPS, spec_from_config

TRANSFORMERS5 = Path(__file__).parent / "data" / "transformers5"
LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 2048}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args)


def assert_one_error_line(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("field, literal", [
    ("hidden_size", "NaN"), ("num_hidden_layers", "Infinity"), ("vocab_size", "-Infinity"),
    ("num_attention_heads", "1e400"),  # parses as float('inf')
])
def test_non_finite_config_numbers_are_one_error_line(tmp_path, field, literal):
    text = json.dumps(LLAMA).replace(f'"{field}": {LLAMA[field]}', f'"{field}": {literal}')
    assert literal in text
    path = tmp_path / "config.json"
    path.write_text(text)
    result = run_cli("estimate", "--model", str(path), "--gpu", "h100", "--gpus", "8")
    assert_one_error_line(result, field if literal == "1e400" else literal)


def test_non_finite_numbers_in_a_config_dict_are_input_errors():
    for value in (float("nan"), float("inf")):
        with pytest.raises(InputError, match="hidden_size"):
            spec_from_config(dict(LLAMA, hidden_size=value), name="x")


@pytest.mark.parametrize("flag", ["--model", "--gpu"])
def test_files_that_are_not_utf8_are_one_error_line(tmp_path, flag):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9"}')  # Latin-1
    args = {"--model": str(path), "--gpu": "h100"}
    args[flag] = str(path)
    result = run_cli("estimate", "--model", args["--model"], "--gpu", args["--gpu"], "--gpus", "8")
    assert_one_error_line(result, "not UTF-8")


def test_gpu_file_with_nan_is_refused(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text('{"bf16_tflops": NaN, "memory_gib": 80, "hbm_bandwidth_gb_s": 3350, "intra_node_bw": 450, '
                    '"inter_node_bw": 50, "gpus_per_node": 8, "price": 2}')
    result = run_cli("estimate", "--model", "llama3-8b", "--gpu", str(path), "--gpus", "8")
    assert_one_error_line(result, "NaN")


def test_a_checkpoint_folder_is_read_through_its_config_json(tmp_path):
    folder = tmp_path / "Tiny-Llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    spec = load_model(str(folder))
    assert spec.name == "Tiny-Llama" and spec.num_layers == 4
    result = run_cli("estimate", "--model", str(folder), "--gpu", "h100", "--gpus", "8", "--seq", "2048")
    assert result.returncode == 0, result.stderr


def test_a_folder_without_config_json_says_so(tmp_path):
    result = run_cli("estimate", "--model", str(tmp_path), "--gpu", "h100", "--gpus", "8")
    assert_one_error_line(result, "is a directory")


@pytest.mark.parametrize("path", sorted(TRANSFORMERS5.glob("*.json")), ids=lambda p: p.stem)
def test_configs_written_by_transformers5_read_like_their_v4_spelling(path):
    """The v5 file and the same config with every alias spelled the other way give the same model."""
    config = json.loads(path.read_text())
    v5 = spec_from_config(config, name=path.stem)
    respelled = dict(config)
    for alias, stored in ATTRIBUTE_MAPS.get(config["model_type"], {}).items():
        if stored in respelled:
            respelled[alias] = respelled.pop(stored)
    other = spec_from_config(respelled, name=path.stem)
    assert v5 == other
    assert count_params(v5).total == count_params(other).total > 0
    experts = next((config[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in config), 0)
    assert v5.num_experts == experts


def test_qwen3_moe_v5_file_is_accepted_with_its_expert_count():
    spec = spec_from_config(json.loads((TRANSFORMERS5 / "qwen3_moe.json").read_text()), name="q")
    assert spec.num_experts == 16 and spec.experts_per_token == 4


@pytest.mark.parametrize("argv", [
    ["export", "--engine", "megatron", "--from", "{path}"],
    ["estimate", "--from", "{path}"],
    ["tools", "call", "list_catalog", "--args", "@{path}"],
])
def test_saved_files_that_are_not_utf8_are_one_error_line(tmp_path, argv):
    path = tmp_path / "saved.json"
    path.write_bytes(b"\xff\xfe{}")
    result = run_cli(*(arg.format(path=path) for arg in argv))
    assert_one_error_line(result, "not UTF-8")


def test_a_saved_estimate_with_nan_is_refused(tmp_path):
    path = tmp_path / "est.json"
    path.write_text('{"config": {"model": "llama3-8b", "gpu": "h100", "gpus": 8, "tp": NaN}}')
    result = run_cli("export", "--engine", "megatron", "--from", str(path))
    assert_one_error_line(result, "NaN")
