"""The result models: what one layout costs (`Estimate` and its parts), read as attributes
(`estimate.time.step_s`); `trainplan estimate --json` is `Estimate.model_dump(mode="json")`.
The knobs they echo are defined once in tools/config/contract.py (`Config` is a ParallelConfig with its job).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_serializer

from trainplan.tools.config.contract import Job, ParallelConfig
from trainplan.tools.config.fields import described

class Result(BaseModel):
    """Base of the result models. Fields are read as attributes (`estimate.time.step_s`)."""


class Params(Result):
    total: int = Field(description="parameters of the main model (MTP modules apart)")
    active: int = Field(description="parameters active per token (MoE: shared + top-k experts)")
    mtp: int = Field(default=0, description="multi-token-prediction parameters, counted apart")
    trainable: int = Field(default=0, description="parameters the run updates: total + mtp, or the adapters with "
                                                  "method lora/qlora")


class MemoryGiB(Result):
    """Memory per GPU on the most loaded rank, GiB (2^30 B)."""

    weights: float = Field(description="model weights held by this rank")
    gradients: float = Field(description="gradient buffer")
    optimizer: float = Field(description="fp32 master weights and Adam moments held on the GPU")
    activations: float = Field(description="activations kept for the backward pass, all in-flight micro-batches")
    other: float = Field(description="workspace, logits, communication buffers, allocator reserve")
    total: float = Field(description="sum of the parts")
    capacity: float = Field(description="the GPU's usable memory")

    @computed_field(description="capacity - total, GiB (negative when it does not fit)")
    @property
    def headroom(self) -> float:
        return self.capacity - self.total

    @computed_field(description="headroom / capacity")
    @property
    def headroom_share(self) -> float:
        return self.headroom / self.capacity


class StepTime(Result):
    """One training step on the critical pipeline stage; breakdown sums to step_s.

    Built from tools/perf/step.py's StepResult.to_dict(); a key step.py adds before it is typed here passes
    through (extra="allow") rather than being dropped."""

    model_config = ConfigDict(extra="allow")

    step_s: float = Field(description="seconds per training step")
    tokens_per_s: float = Field(description="training tokens per second, whole job")
    tokens_per_s_per_gpu: float = Field(description="tokens_per_s / gpus")
    tflops_per_gpu: float = Field(description="model TFLOP/s per GPU (3 x forward, no recompute, attention scores "
                                              "counted causally, as Megatron-Core counts them)")
    hardware_tflops_per_gpu: float = Field(description="model + recompute TFLOP/s per GPU")
    mfu: float = Field(description="model FLOPs utilisation: tflops_per_gpu / peak_tflops")
    hfu: float = Field(description="hardware FLOPs utilisation: the FLOPs the kernels run (causal under flash, "
                                   "full under eager), recompute included")
    tflops_per_gpu_full_attention: float = Field(description="model TFLOP/s per GPU with attention counted without "
                                                             "the causal discount (the PaLM convention)")
    mfu_full_attention: float = Field(description="tflops_per_gpu_full_attention / peak_tflops; can pass hfu at "
                                                  "long sequence, as it counts masked work no kernel runs")
    bubble_fraction: float = Field(description="idle share of the pipeline (simulator)")
    peak_tflops: float = Field(description="dense peak of the precision used, the MFU denominator")
    mfu_denominator: str = Field(description="which peak and which FLOPs convention MFU uses")
    breakdown: dict[str, float] = Field(description="seconds per part: compute, comm/tp, comm/cp, comm/ep, bubble, "
                                                    "comm/dp, optimizer; with blocking_p2p also comm/pp")

    @computed_field(description="each breakdown part / step_s")
    @property
    def shares(self) -> dict[str, float]:
        return {part: _share(seconds, self.step_s) for part, seconds in self.breakdown.items()}

    @computed_field(description="exposed communication (the comm/* parts) / step_s")
    @property
    def comm_share(self) -> float:
        return _share(sum(s for part, s in self.breakdown.items() if part.startswith("comm/")), self.step_s)

    @computed_field(description="the pipeline bubble part / step_s")
    @property
    def bubble_share(self) -> float:
        return _share(self.breakdown.get("bubble", 0.0), self.step_s)


def _share(part_s: float, step_s: float) -> float:
    """part / step; float dust from summing the simulator's times (|share| < 1e-12) reads as 0."""
    share = part_s / step_s
    return 0.0 if abs(share) < 1e-12 else share


class Training(Result):
    """The whole run: steps, days, GPU-hours and dollars (tools/perf/cost.py's CostResult)."""

    model_config = ConfigDict(extra="allow")

    tokens: float = Field(description="training tokens")
    steps: int = Field(description="optimizer steps")
    days: float = Field(description="wall-clock days, goodput included")
    gpu_hours: float = Field(description="GPU-hours, goodput included")
    cost_usd: float = Field(description="dollars: gpu_hours x price")
    goodput: float = Field(description="share of wall-clock time that trains")
    price_per_gpu_hour: float = Field(description="dollars per GPU-hour used")


class Config(ParallelConfig, Result):
    """The full layout actually used, every knob resolved, with the job it ran on."""

    model: str = described(Job, "model")
    gpu: str = described(Job, "gpu")
    gpus: int = described(Job, "gpus")
    gpus_per_node: int = described(Job, "gpus_per_node")
    intra_node_bw: float = described(Job, "intra_node_bw")
    inter_node_bw: float = described(Job, "inter_node_bw")
    gpus_per_host: int = Field(description="GPUs per server (never more than gpus_per_node)")
    interconnect: str = Field(description="the fast domain's fabric: nvlink, xgmi or pcie")

    @computed_field(description="micro-batches per step, gbs / (dp*mbs); null without gbs")
    @property
    def num_microbatches(self) -> int | None:
        return None if self.gbs is None else self.gbs // (self.dp * self.mbs)

    @model_serializer(mode="wrap")
    def _job_first(self, handler):
        data = handler(self)
        return {key: data[key] for key in _CONFIG_ORDER if key in data} | data


_CONFIG_ORDER = ("model", "gpu", "gpus", "tp", "pp", "cp", "ep", "dp")


_OPTIONAL_SECTIONS = ("reason", "time", "pipeline", "training", "notes")


class Estimate(Result):
    """Memory, time and cost of one layout: `trainplan estimate --json` and `trainplan.estimate(...)`.

    A section that was not computed (time without gbs, training without tokens, reason when it fits)
    is None here and left out of the dump."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    params: Params = Field(description="parameter counts")
    memory_gib: MemoryGiB = Field(description="memory per GPU on the most loaded rank")
    fits: bool = Field(description="whether the layout fits in the GPU's memory (minus headroom_gib)")
    reason: str | None = Field(default=None, description="why it does not fit; null when it fits")
    time: StepTime | None = Field(default=None, description="step time; null without gbs")
    pipeline: dict[str, Any] | None = Field(default=None, description="the simulated pipeline (timeline=True)")
    training: Training | None = Field(default=None, description="run cost; null without tokens and gbs")
    config: Config = Field(description="the full layout actually used")
    notes: list[str] | None = Field(default=None, description="what was assumed or could not be computed")

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler):
        data = handler(self)
        for key in _OPTIONAL_SECTIONS:
            if data.get(key) is None:
                data.pop(key, None)
        return data


