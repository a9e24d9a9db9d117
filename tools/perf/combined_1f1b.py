"""Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm, trainplan's moe_a2a_overlap):
where one micro-batch's expert all-to-all hides, replayed node by node as Megatron issues them.

Sources (NVIDIA/Megatron-LM, megatron/core):
- pipeline_parallel/schedules.py get_pp_rank_microbatches: with the overlap, the interleaved
  schedule runs one more warm-up forward, "to ensure the forward and backward computations are
  independent in all 1f1b steps"; forward_backward_pipelining_with_interleaving then runs its
  steady state as forward_backward_helper_wrapper(f_virtual_microbatch_id=k + warm-up,
  b_virtual_microbatch_id=k), one combined step per pair, and its warm-up forwards and cool-down
  backwards alone (the same helper with one side None). Without pipelining,
  pipeline_parallel/combined_1f1b.py combined_1f1b_schedule_for_no_pipelining runs the first
  forward alone, then (forward i+1, backward i) pairs, then the last backward alone. pipeline.py
  builds these orders.
- models/common/model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan.run: a combined step
  pairs forward layer i with backward layer L-1-i of the other chunk; the layers left over run
  alone, and the first layer's attention weight gradient is delayed to the end of the chunk.
- TransformerLayerSchedulePlan.run issues one layer pair as
      combine_b (comm) | attn_f | mlp_b | dispatch_f (comm) | mlp_dw | dispatch_b (comm) |
      mlp_f | combine_f (comm) | attn_b | attn_dw
  on two CUDA streams; its docstring draws
      comm_stream: combine_bwd | dispatch_fwd->dispatch_bwd  | combine_fwd
      comp_stream: attn_fwd    | mlp_bwd->mlp_bwd_dw->mlp_fwd| attn_bwd
- pipeline_parallel/utils.py ScheduleNode: every node waits on its chunk's CUDA event and records
  it when done (stream_acquire_context), so a micro-batch's nodes run in order, each on its own
  stream; the forward and the backward plan have their own events, which is what lets one's
  all-to-all run beside the other's compute. The weight-gradient nodes (backward_dw, run with
  --delay-wgrad-compute, which trainplan's Megatron export writes with the overlap) touch no event:
  they run on the compute stream in issue order.
- models/gpt/fine_grained_callables.py build_transformer_layer_callables: what each node runs.
  attn: attention, pre-MLP norm, shared experts, router, dispatch preprocess (token permutation);
  dispatch: the all-to-all (and expert-TP gather); mlp: post-dispatch sort, experts, combine
  preprocess; combine: the all-to-all back, unpermutation and the residual add, on the
  communication stream. The attention's weight gradient includes the shared experts'.

What follows: a combined step that pairs a forward with a backward hides the all-to-all only where
the other micro-batch has compute to run beside it; a forward alone hides nothing (its four nodes
wait on each other); a backward alone still hides its dispatch backward behind its own expert
weight gradients, and the next layer's combine backward behind the attention weight gradients.
Hidden communication costs overlap.COMM_COMPUTE_CONTENTION of its length, the rule of overlap.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.tools.perf.compute import OpTimes
from trainplan.tools.perf.overlap import COMM_COMPUTE_CONTENTION

_COMP, _COMM = 0, 1
_FORWARD, _BACKWARD, _NO_EVENT = 0, 1, None

# OpTimes keys of the nodes other than attn (module doc): the mlp node's, and the token permutation,
# whose forward half (permute) the attn node runs and whose other half (unpermute, with the residual
# add) the combine node runs on the communication stream. Here that half is charged to the mlp node,
# on the compute stream: two computations beside each other run no faster than one after the other,
# so the communication-stream nodes carry communication only and what runs beside compute is it alone.
MLP_NODE_KEYS = ("mlp", "moe/experts", "moe/host", "moe/sort")
PERMUTE_KEY = "moe/permute"


@dataclass(frozen=True)
class LayerNodes:
    """Seconds of one layer's nodes for one micro-batch (module doc). A dense layer has no
    dispatch or combine. *_comm: the communication-stream nodes."""

    attn_f: float
    mlp_f: float
    dispatch_f_comm: float
    combine_f_comm: float
    attn_b: float        # input gradients (and the exposed collectives that run with them)
    attn_dw: float       # weight gradients of attention and shared experts (delayed)
    mlp_b: float
    mlp_dw: float        # expert weight gradients (delayed)
    dispatch_b_comm: float
    combine_b_comm: float

    @property
    def forward_s(self) -> float:
        return self.attn_f + self.dispatch_f_comm + self.mlp_f + self.combine_f_comm

    @property
    def backward_s(self) -> float:
        return (self.combine_b_comm + self.mlp_b + self.mlp_dw + self.dispatch_b_comm + self.attn_b
                + self.attn_dw)


def layer_nodes(layer: OpTimes, dispatch_s: float, combine_s: float, attention_comm_s: float = 0.0) -> LayerNodes:
    """One layer's nodes from its compute (layer_compute.layer_times) and its communication.

    dispatch_s, combine_s: one direction's token dispatch and combine (moe.dispatch_comm_parts); the
    backward runs the combine's backward first, which carries the output gradients to the experts as
    the forward dispatch carries the tokens, and then the dispatch's backward, shaped like the
    combine. attention_comm_s: the layer's other exposed communication forward + backward (TP,
    CP, shared-expert TP collectives), which runs on the compute stream with the attention node;
    it lands on the forward and the backward 1:2, as stage_work lands exposed communication. The
    token permutation's halves go to attn and mlp (PERMUTE_KEY)."""
    def side(part: dict[str, float], mlp: bool) -> float:
        return sum(v for k, v in part.items() if (k in MLP_NODE_KEYS) == mlp and k != PERMUTE_KEY)

    permute_f = layer.forward_s.get(PERMUTE_KEY, 0.0) / 2
    permute_b = layer.backward_input_s.get(PERMUTE_KEY, 0.0) / 2
    return LayerNodes(
        attn_f=side(layer.forward_s, False) + permute_f + attention_comm_s / 3,
        mlp_f=side(layer.forward_s, True) + permute_f,
        dispatch_f_comm=dispatch_s,
        combine_f_comm=combine_s,
        attn_b=side(layer.backward_input_s, False) + permute_b + 2 * attention_comm_s / 3,
        attn_dw=side(layer.backward_weight_s, False),
        mlp_b=side(layer.backward_input_s, True) + permute_b,
        mlp_dw=side(layer.backward_weight_s, True),
        dispatch_b_comm=combine_s,
        combine_b_comm=dispatch_s,
    )


def _issue_order(forward: list[LayerNodes], backward: list[LayerNodes]) -> list[tuple[int, int | None, float]]:
    """(stream, event, seconds) of every node of one combined step, in Megatron's issue order:
    TransformerModelChunkSchedulePlan.run over the layers, TransformerLayerSchedulePlan.run within one
    (module doc). forward: the forward chunk's layers in order; backward: the backward chunk's."""
    nodes: list[tuple[int, int | None, float]] = []
    n_b = len(backward)

    def run(f: LayerNodes | None, b: LayerNodes | None, last_in_backward: bool) -> None:
        if b is not None:
            nodes.append((_COMM, _BACKWARD, b.combine_b_comm))
        if f is not None:
            nodes.append((_COMP, _FORWARD, f.attn_f))
        if b is not None:
            nodes.append((_COMP, _BACKWARD, b.mlp_b))
        if f is not None:
            nodes.append((_COMM, _FORWARD, f.dispatch_f_comm))
        if b is not None:
            nodes.append((_COMP, _NO_EVENT, b.mlp_dw))
            nodes.append((_COMM, _BACKWARD, b.dispatch_b_comm))
        if f is not None:
            nodes.append((_COMP, _FORWARD, f.mlp_f))
            nodes.append((_COMM, _FORWARD, f.combine_f_comm))
        if b is not None:
            nodes.append((_COMP, _BACKWARD, b.attn_b))
            if not last_in_backward:
                nodes.append((_COMP, _NO_EVENT, b.attn_dw))

    paired = min(len(forward), n_b)
    for i in range(paired):
        run(forward[i], backward[n_b - 1 - i], i == n_b - 1)
    for i in range(paired, n_b):
        run(None, backward[n_b - 1 - i], i == n_b - 1)
    for i in range(paired, len(forward)):
        run(forward[i], None, False)
    if n_b:
        nodes.append((_COMP, _NO_EVENT, backward[0].attn_dw))   # the delayed first-layer attention wgrad
    return nodes


def replay_s(forward: list[LayerNodes], backward: list[LayerNodes]) -> tuple[float, float]:
    """(seconds, hidden communication seconds) of one combined step of a forward chunk and a backward
    chunk (either may be empty), replayed on a compute and a communication stream: each node starts
    when its stream is free and, unless it is a weight-gradient node, when the last node of its own
    micro-batch has finished (ScheduleNode's event). Hidden communication is the time both streams
    are busy; the seconds include what it costs the compute (COMM_COMPUTE_CONTENTION)."""
    stream_free = [0.0, 0.0]
    event_done = [0.0, 0.0]
    busy = 0.0
    for stream, event, seconds in _issue_order(forward, backward):
        start = stream_free[stream] if event is None else max(stream_free[stream], event_done[event])
        end = start + seconds
        stream_free[stream] = end
        if event is not None:
            event_done[event] = end
        busy += seconds
    makespan = max(stream_free)
    hidden = max(0.0, busy - makespan)
    return makespan + COMM_COMPUTE_CONTENTION * hidden, hidden


def chunk_layers(layers: list, vpp: int) -> list[list]:
    """A rank's layers split into its vpp chunks (virtual stages), in order, as evenly as they go."""
    size, extra = divmod(len(layers), vpp)
    chunks, start = [], 0
    for c in range(vpp):
        end = start + size + (1 if c < extra else 0)
        chunks.append(layers[start:end])
        start = end
    return [chunk for chunk in chunks if chunk]


def hidden_per_microbatch_s(chunks: list[list[LayerNodes]]) -> tuple[float, float]:
    """(paired, alone): seconds a stage's micro-batch saves against running its nodes one after
    another (what trainplan charges without the overlap), summed over its chunks (a rank's virtual
    stages; one chunk without interleaving).

    paired: its forward and its backward each ran in a combined step with another micro-batch's
    backward or forward (the steady state); by symmetry one step of chunk c's forward with chunk
    c's backward stands for it. alone: its backward ran alone (a cool-down backward); a forward
    alone saves nothing (module doc)."""
    paired = alone = 0.0
    for layers in chunks:
        serial_f = sum(n.forward_s for n in layers)
        serial_b = sum(n.backward_s for n in layers)
        paired += serial_f + serial_b - replay_s(layers, layers)[0]
        alone += serial_b - replay_s([], layers)[0]
    return paired, alone
