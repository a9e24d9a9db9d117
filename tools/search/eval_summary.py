"""The evals' verdict as a plan reads it: evals/summary.json (written by `python -m trainplan.evals.summary`),
its regimes and the error that makes a case a known gap.

It sits below search and agent, which read it; the evals package that writes it sits above them. The file is
package data of trainplan.evals, read through importlib.resources, so no module of evals is imported.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from trainplan.tools.core import assumptions

SUMMARY_PATH = Path(str(resources.files("trainplan.evals") / "summary.json"))
"""evals/summary.json, in a source checkout and an installed wheel alike."""
GAP_ERROR = assumptions.GAP_ERROR.value
"""A case whose headline error is larger than this (the throughput tolerance of evals/cases.py) is a
known gap even when its own tolerance is wider (GPU-hours: 25%)."""
SMALL_JOB_GPUS = assumptions.SMALL_JOB_GPUS.value
"""A job on at most this many GPUs is a small job (the FSDP, MPT and single-node rows)."""
REGIMES = {
    "dense at scale": "dense models on more than 64 GPUs",
    "dense small jobs": "dense models on up to 64 GPUs",
    "MoE": "mixture-of-experts models",
    "fine-tuning": "LoRA and QLoRA fine-tunes",
}


ALL = "all"
"""The pooled band: what a regime without cases of a kind (GPU-hours of small jobs) falls back to."""


def regime_of(is_moe: bool, gpus: int, adapters: bool = False) -> str:
    """The regime of a job: adapters (method lora or qlora) first, whatever the model; then MoE; then by GPUs."""
    if adapters:
        return "fine-tuning"
    if is_moe:
        return "MoE"
    return "dense small jobs" if gpus <= SMALL_JOB_GPUS else "dense at scale"


@cache
def load_summary() -> dict:
    """evals/summary.json as written by trainplan.evals.summary.build()."""
    return json.loads(SUMMARY_PATH.read_text())
