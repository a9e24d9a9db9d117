"""What one simulated pipeline schedule returns (tools/perf/pipeline.py simulates it; pipeline_render.py draws it)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from trainplan.tools.perf.pipeline_closed_form import bubble_closed_form


@dataclass(slots=True)
class PipelineEvent:
    """One op on one rank. For 'FB' (dualpipe), microbatch/chunk are the forward's and
    backward_microbatch/backward_chunk the overlapped backward's."""

    stage: int  # pipeline rank
    kind: str  # 'F', 'B', 'W' or 'FB'
    microbatch: int
    chunk: int  # interleaved: model chunk on the rank; dualpipe: 0 = stage r, 1 = stage p-1-r
    start_s: float
    end_s: float
    backward_microbatch: int | None = None
    backward_chunk: int | None = None

    def to_dict(self) -> dict:
        """The event as a plain dict, its fields in order (dataclasses.asdict's result, without its deep
        copy of each value: the fields are numbers and strings, and a timeline has thousands of events)."""
        return {name: getattr(self, name) for name in _EVENT_FIELDS}


_EVENT_FIELDS = tuple(f.name for f in fields(PipelineEvent))


@dataclass
class PipelineResult:
    """Outcome of one simulated schedule. Times in seconds."""

    schedule: str
    pp: int
    num_microbatches: int
    vpp: int
    makespan_s: float  # first op start (0) to last op end, over all ranks
    bubble_fraction: float  # 1 - mean(stage_busy_s) / makespan_s
    stage_busy_s: list[float]  # compute time per rank
    peak_inflight_microbatches: list[float]  # per rank, in full-stage micro-batches (see module doc)
    timeline: list[PipelineEvent] = field(default_factory=list)  # empty when record_timeline=False

    @property
    def closed_form_bubble_fraction(self) -> float | None:
        """The closed form for equal stages and no p2p, where one exists."""
        return bubble_closed_form(self.schedule, self.pp, self.num_microbatches, self.vpp)

    def to_dict(self, include_timeline: bool = True) -> dict:
        """Plain JSON-able data; the timeline as a list of event dicts (omitted when asked)."""
        out = {
            "schedule": self.schedule, "pp": self.pp, "num_microbatches": self.num_microbatches,
            "vpp": self.vpp, "makespan_s": self.makespan_s, "bubble_fraction": self.bubble_fraction,
            "closed_form_bubble_fraction": self.closed_form_bubble_fraction,
            "stage_busy_s": list(self.stage_busy_s),
            "peak_inflight_microbatches": list(self.peak_inflight_microbatches),
        }
        if include_timeline:
            out["timeline"] = [e.to_dict() for e in self.timeline]
        return out
