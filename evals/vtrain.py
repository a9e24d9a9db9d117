"""vTrain's measured A100 iteration times (evals/data/vtrain/, MIT licence in LICENSE, attribution in SOURCE.md)
against the planner's step time.

Rows: ground_truth_single.csv, 1,440 Megatron-DeepSpeed runs of GPT models (hidden 1024 and 2048, 16 heads,
12-24 layers, sequence 1024) on 2-8 A100s in one node; ground_truth_multi.csv, 109 runs of 3.6B-175B GPT models
on 64-512 A100s. Each row gives gpus, global and micro batch, hidden, heads, layers, sequence, tp, dp, pp and the
measured iteration time in ms.

How a row maps to an estimate (vTrain's validation configs, config/validation/ of its repository: activation
checkpointing on, 1F1B, 150 GB/s NVLink and 800 Gb/s per node of 8 GPUs):
- model: GPT-2 architecture (learned positions, tied embeddings, d_ff = 4h, GELU) of the row's hidden, heads,
  layers and sequence; vocabulary 51,200 (assumed: Megatron's GPT-2 BPE padded as in Megatron-LM's published
  runs; the csv gives none);
- a100-sxm-80gb (assumed: the csv names only "A100"), gpus_per_node 8, intra_node_bw 150, inter_node_bw 12.5
  (800 Gb/s per node / 8 GPUs);
- the row's tp, pp, mbs, gbs and seq; recompute full, zero 0 (Megatron-DeepSpeed without ZeRO), attention eager
  (Megatron-DeepSpeed's unfused softmax attention); every other knob at its default.

Calibration (tools/core/calibration.py): fitted on the single-node rows with hidden 2048 only; the hidden-1024 rows
are held out, and the multi-node rows are held out. `fitted_rows` / `held_out_rows` say which is which.

Figures: MAPE of step time, median signed error, and the in-group Spearman rank correlation (a group is the
rows sharing a model, GPU count and global batch: the layouts a planner ranks for one job), averaged over the
groups of at least 3 rows.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data" / "vtrain"
SINGLE_CSV = "ground_truth_single.csv"
MULTI_CSV = "ground_truth_multi.csv"
GPU = "a100-sxm-80gb"
GPUS_PER_NODE = 8
INTRA_NODE_BW = 150.0    # GB/s, vTrain config/validation "intra_node_bandwidth": 150
INTER_NODE_BW = 12.5     # GB/s per GPU, "inter_node_bandwidth": 800 (Gb/s per node of 8)
VOCAB = 51200
KNOBS: dict[str, Any] = {"recompute": "full", "zero": 0, "attention": "eager"}
FIT_HIDDEN = 2048        # the single-node rows the floors were fitted on
MIN_GROUP = 3
CASE_GROUPS = {
    "vtrain-single-h2048": "ground_truth_single.csv rows with hidden 2048 (720)",
    "vtrain-single-h1024": "ground_truth_single.csv rows with hidden 1024 (720)",
    "vtrain-multi": "ground_truth_multi.csv (109 rows)",
}
"""The row groups tools/core/calibration.py names in fitted_on / held_out."""


@dataclass(frozen=True)
class Row:
    gpus: int
    gbs: int
    mbs: int
    hidden: int
    heads: int
    layers: int
    seq: int
    tp: int
    dp: int
    pp: int
    measured_s: float
    multi: bool

    @property
    def group(self) -> tuple:
        return (self.multi, self.hidden, self.layers, self.gpus, self.gbs)

    @property
    def fitted(self) -> bool:
        """Whether the row is one the calibration was fitted on (single node, hidden 2048)."""
        return not self.multi and self.hidden == FIT_HIDDEN


def _int(value: str) -> int:
    return int(float(value))


@lru_cache(maxsize=2)
def rows(multi: bool = False) -> tuple[Row, ...]:
    path = DATA_DIR / (MULTI_CSV if multi else SINGLE_CSV)
    with path.open(encoding="utf-8-sig") as handle:
        out = []
        for r in csv.DictReader(handle):
            out.append(Row(gpus=_int(r["# GPUs"]), gbs=_int(r["global batch"]), mbs=_int(r["micro batch"]),
                           hidden=_int(r["hidden size"]), heads=_int(r["attention heads"]), layers=_int(r["# layers"]),
                           seq=_int(r["sequence length"]), tp=_int(r["tensor parallelism"]),
                           dp=_int(r["data parallelism"]), pp=_int(r["pipeline parallelism"]),
                           measured_s=float(r["iteration time (ms)"]) / 1e3, multi=multi))
    return tuple(out)


def sample(all_rows: tuple[Row, ...], every: int) -> tuple[Row, ...]:
    """Every `every`-th row in file order (a deterministic, documented sample for the quick eval path)."""
    return all_rows[::every]


@lru_cache(maxsize=64)
def _model(hidden: int, heads: int, layers: int, seq: int):
    from trainplan.tools.hardware.hf import spec_from_config

    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": layers, "n_embd": hidden,
              "n_head": heads, "n_inner": 4 * hidden, "n_positions": seq, "vocab_size": VOCAB,
              "activation_function": "gelu_new", "tie_word_embeddings": True}
    return spec_from_config(config, name=f"vtrain-gpt-h{hidden}-l{layers}")


def predict_s(row: Row, floors: bool = True, **knobs: Any) -> float:
    """Predicted seconds per step of one row (knobs override KNOBS). floors=False: without the floors of small
    work (host.py's host floor and NCCL's per-call base latency), the model before issue 23, for comparison."""
    from trainplan.tools.perf import host
    from trainplan.tools.hardware.catalog import load_gpu
    from trainplan.tools.config.layout import resolve_config
    from trainplan.tools.hardware.specs import ClusterSpec
    from trainplan.tools.perf.step import step_time

    if not floors:
        saved, host.HOST_S_PER_OP = host.HOST_S_PER_OP, 0.0
        try:
            return predict_s(row, collective_base_latency_us=0.0, **knobs)
        finally:
            host.HOST_S_PER_OP = saved
    base = knobs.pop("collective_base_latency_us", None)
    gpu = load_gpu(GPU)
    cluster = ClusterSpec.build(gpu, row.gpus, gpus_per_node=GPUS_PER_NODE, intra_node_bw=INTRA_NODE_BW,
                                inter_node_bw=INTER_NODE_BW, collective_base_latency_us=base)
    cfg = resolve_config(_model(row.hidden, row.heads, row.layers, row.seq), row.gpus, fp8_supported=False,
                         tp=row.tp, pp=row.pp, mbs=row.mbs, gbs=row.gbs, seq=row.seq, **{**KNOBS, **knobs})
    return step_time(_model(row.hidden, row.heads, row.layers, row.seq), cfg, cluster).step_s


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); nan for fewer than two distinct values."""
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def summarise(pairs: list[tuple[Row, float]]) -> dict[str, Any]:
    """MAPE, median signed error and mean in-group Spearman of (row, predicted seconds) pairs."""
    if not pairs:
        return {"n": 0}
    errors = sorted(p / r.measured_s - 1 for r, p in pairs)
    groups: dict[tuple, list[tuple[Row, float]]] = {}
    for r, p in pairs:
        groups.setdefault(r.group, []).append((r, p))
    rhos = [spearman([p for _, p in g], [r.measured_s for r, _ in g]) for g in groups.values() if len(g) >= MIN_GROUP]
    rhos = [x for x in rhos if not math.isnan(x)]
    n = len(errors)
    return {"n": n, "mape": sum(abs(e) for e in errors) / n, "median_error": errors[n // 2],
            "spearman": sum(rhos) / len(rhos) if rhos else float("nan"), "groups": len(rhos)}


def evaluate(every: int = 1, floors: bool = True, **knobs: Any) -> dict[str, Any]:
    """The vTrain figures: single-node (all, fitted on, held out) and multi-node, over every `every`-th row."""
    single = [(r, predict_s(r, floors, **knobs)) for r in sample(rows(False), every)]
    multi = [(r, predict_s(r, floors, **knobs)) for r in sample(rows(True), every)]
    return {
        "single": summarise(single),
        "single_fitted": summarise([(r, p) for r, p in single if r.fitted]),
        "single_held_out": summarise([(r, p) for r, p in single if not r.fitted]),
        "multi": summarise(multi),
        "sample_every": every,
        "pairs": single + multi,
    }


def slices(pairs: list[tuple[Row, float]]) -> dict[str, dict[str, Any]]:
    """The single-node figures by the slices of issue 23 (hidden, micro-batch, tp, pp)."""
    single = [(r, p) for r, p in pairs if not r.multi]
    out = {}
    for name, key in (("hidden", lambda r: r.hidden), ("mbs", lambda r: r.mbs), ("tp", lambda r: r.tp),
                      ("pp", lambda r: r.pp)):
        for value in sorted({key(r) for r, _ in single}):
            out[f"{name}={value}"] = summarise([(r, p) for r, p in single if key(r) == value])
    return out


def summary_figures() -> dict[str, dict[str, Any]]:
    """The figures `trainplan eval` reports: single-node (all, fitted on, held out) and multi-node, every row
    (about two seconds)."""
    result = evaluate()
    return {name: dict(result[name]) for name in ("single", "single_fitted", "single_held_out", "multi")}
