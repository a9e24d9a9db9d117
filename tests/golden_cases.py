"""Golden outputs: what the CLI prints for a fixed set of commands, kept so a refactor can show it changed nothing.

`python tests/golden_cases.py --write` records every command's stdout and exit code in
the GOLDEN file; the golden test runs them again and compares byte for byte.
Record again only for a change that is meant to move a number, and say so in the commit.
Run times are the one thing dropped, since they differ run to run: the JSON keys in TIMING_KEYS and
the search's "in 0.34 s (28,657/s, 200x Calculon's 143/s)" line.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "data" / "golden" / "outputs.json"

_DENSE = ["--model", "llama3-70b", "--gpu", "h100", "--gpus", "512", "--tp", "8", "--pp", "4"]
_MOE = ["--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64", "--tp", "2", "--ep", "8", "--pp", "2",
        "--gbs", "512"]
_DSV3 = ["--model", "deepseek-v3", "--gpu", "h800", "--gpus", "2048", "--pp", "16", "--ep", "64",
         "--schedule", "dualpipe", "--precision", "fp8"]
_LORA = ["--model", "llama3-8b", "--gpu", "rtx-4090", "--gpus", "1", "--method", "qlora", "--seq", "2048",
         "--gbs", "16"]

COMMANDS: dict[str, list[str]] = {
    "eval-prediction": ["eval", "--json", "--kind", "prediction"],
    "eval-claims": ["eval", "--json", "--kind", "claims"],
    "estimate-dense": ["estimate", *_DENSE, "--tokens", "15T", "--json"],
    "estimate-dense-cp": ["estimate", "--model", "llama3-405b", "--gpu", "h100", "--gpus", "2048", "--tp", "8",
                          "--pp", "16", "--cp", "2", "--vpp", "2", "--seq", "16384", "--tokens", "15T", "--json"],
    "estimate-dense-zero2": ["estimate", "--model", "llama3-8b", "--gpu", "a100-80gb", "--gpus", "16",
                                "--pp", "2", "--zero", "2", "--json"],
    "estimate-moe": ["estimate", *_MOE, "--json"],
    "estimate-dsv3": ["estimate", *_DSV3, "--json"],
    "estimate-qlora": ["estimate", *_LORA, "--json"],
    "estimate-lora": ["estimate", "--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--gpus", "2", "--method", "lora",
                      "--zero", "3", "--seq", "4096", "--json"],
    "estimate-offload": ["estimate", "--model", "llama3-70b", "--gpu", "h100", "--gpus", "8", "--zero", "3",
                         "--optimizer-offload", "--recompute", "full", "--seq", "4096", "--gbs", "8", "--json"],
    "estimate-text": ["estimate", *_DENSE],
    "search-dense": ["search", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "64", "--tokens", "1T",
                     "--top-k", "5", "--json"],
    "search-moe": ["search", "--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "64", "--tokens", "1T",
                   "--top-k", "3", "--json"],
    "search-text": ["search", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "32", "--tokens", "100B",
                    "--top-k", "3"],
    "plan-pretrain": ["plan", "Llama 3 70B on 512 H100s for 15T tokens", "--json"],
    "plan-finetune": ["plan", "QLoRA fine-tune Llama 3 8B on one RTX 4090", "--json"],
    "plan-summary": ["plan", "llama3-8b on 8 H100 for 1T tokens"],
    "bubble": ["bubble", "--pp", "4", "--microbatches", "8", "--vpp", "2", "--json"],
    "tools-list": ["tools", "list"],
}
for _engine in ("megatron", "deepspeed", "torchtitan"):
    COMMANDS[f"export-{_engine}"] = ["export", "--engine", _engine, *_DENSE]
COMMANDS["export-accelerate"] = ["export", "--engine", "accelerate", "--model", "llama3-8b", "--gpu", "h100",
                                 "--gpus", "16", "--zero", "3"]
COMMANDS["export-accelerate-refused"] = ["export", "--engine", "accelerate", *_DENSE]
COMMANDS["export-megatron-moe"] = ["export", "--engine", "megatron", *_DSV3[:-4], "--precision", "fp8"]
COMMANDS["export-torchtitan-dualpipe"] = ["export", "--engine", "torchtitan", *_DSV3]
for _engine in ("axolotl", "llamafactory", "trl"):
    COMMANDS[f"export-{_engine}"] = ["export", "--engine", _engine, *_LORA]


TIMING_KEYS = {"seconds", "wall_s", "layouts_per_s"}
_RATE = re.compile(r"\s+in\s+[0-9.]+\s+s\s+\([0-9,]+/s,\s+[0-9]+x\s+Calculon's\s+[0-9,]+/s\)")


def _drop_seconds(text: str) -> str:
    """The output without its run times (TIMING_KEYS when it is JSON, the search's rate line otherwise)."""
    try:
        data = json.loads(text)
    except ValueError:
        return _RATE.sub(" in (time)", text)

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return json.dumps(strip(data), indent=1, sort_keys=True)


def comparable(outcome: dict) -> dict:
    """An outcome with the stdout's whitespace runs made one space: the search's text wraps at 80 columns,
    and its rate line (dropped above) is longer or shorter run to run, which moves the line breaks after it."""
    return {**outcome, "stdout": " ".join(outcome["stdout"].split())}


def run(argv: list[str]) -> dict:
    """One command run in-process: {exit, stdout} (stderr is not compared: progress lines)."""
    from typer.testing import CliRunner

    from trainplan.cli import app
    result = CliRunner().invoke(app, argv)
    error = result.exception if not isinstance(result.exception, SystemExit) else None
    return {"exit": result.exit_code, "stdout": _drop_seconds(result.stdout),
            "error": f"{type(error).__name__}: {error}" if error else None}


def record() -> dict[str, dict]:
    return {name: run(argv) for name, argv in COMMANDS.items()}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/golden_cases.py --write")
    GOLDEN.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
