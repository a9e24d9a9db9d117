"""Collectives: analytic cost on a two-level topology (numpy runs of the algorithms: collective_sim.py).

Cost model (alpha-beta, as Calculon's ``Network.time = latency + size / (bw * eff)``): a collective
takes the latency of its steps (each on the link it crosses) plus its bytes per rank over the
bandwidth of the slowest link they share.

- Levels. Inside a node the GPUs talk over NVLink (``intra_node_bw`` GB/s per GPU per direction);
  across nodes each GPU has its own NIC (``inter_node_bw`` GB/s per GPU per direction), so the k
  ranks of a group that share a node drive k NICs in parallel: a node's aggregate is k x the
  per-GPU figure.
- Volumes per rank (NCCL's bus-bandwidth conventions, nccl-tests doc/PERFORMANCE.md): all-reduce
  2(n-1)/n x S, all-gather and reduce-scatter (n-1)/n x S, all-to-all (n-1)/n x S, where S is the
  full buffer (the gathered output of an all-gather, the input of a reduce-scatter, one rank's send
  buffer of an all-to-all). Ring costs follow Thakur, Rabenseifner and Gropp, "Optimization of
  Collective Communication Operations in MPICH", IJHPCA 2005: ring all-reduce = reduce-scatter +
  all-gather, 2(n-1) steps; all-to-all by pairwise exchange, n-1 steps.
- Efficiency. ``bw * eff`` is the bus bandwidth nccl-tests reports. Defaults (GPUSpec, overridable
  per cluster): NVLink 0.80, the low end of the usual 80-90 % (ring busbw ~230 of 300 GB/s on A100,
  ~360 of 450 on H100 without NVLS); network 0.90, the middle of the usual 85-95 % of IB/RoCE line
  rate. Latencies: 1.9 us per NVLink hop and 4.0 us per network hop, NCCL's own ring/LL128 figures
  (src/graph/tuning.cc, hwLat), LL128 being the protocol NCCL uses in the mid-size range, plus NCCL's fixed
  per-call base latency once per ring or tree collective (all-reduce, all-gather, reduce-scatter), as
  ncclTopoTuneModel adds baseLat to nsteps x hwLat (ClusterSpec.collective_base_latency_us: 14.0 us, tuning.cc's
  baseLat for LL128, Ring and Tree alike). It is what sets the time of the small per-layer tensor-parallel
  collectives.
- What NCCL runs on a group of n ranks, k per node, over m nodes (n = k m). NCCL builds flat rings
  only, no two-level (2D) ring (NVIDIA/nccl issues #471 and #530, S. Jeaugey: "we only build flat
  rings, no 2D ring"; "rings are flat and span across intra- and inter-node connections"). For
  all-gather and reduce-scatter the ring is the only algorithm on plain IB/RoCE clusters: the tree
  implements reduce/broadcast and "doesn't apply to allgather/reducescatter" (#1473; tuning.cc
  admits only Ring, PAT, NVLS and CollNet for them). One definition each:
    all-gather, reduce-scatter  one ring pass over all n ranks (_ring_s).
    all-reduce                  the faster of the ring (two passes) and the tree, as NCCL's tuner
                                picks per size (#457: a model per algorithm, the lowest time wins).
    all-to-all                  pairwise exchange (_all_to_all_s).
- The ring (_ring_s). NCCL runs one channel per NIC, each leaving the node through a different NIC
  (#530: "Ring and Tree both use all NICs in parallel"), so a rank sends (k-1)/k of its bus bytes
  over NVLink and 1/k over its NIC, the two pipelined: the slower share sets the time. Across nodes a
  rank's bus bandwidth is therefore at most k x the per-GPU NIC bandwidth, the node's aggregate (one
  NIC's when k = 1); NCCL's own model puts it at nChannels x the per-channel network bandwidth
  (src/graph/tuning.cc, ncclTopoTuneModel), and two 8-NIC nodes measure about that (nccl-tests
  busbw ~75 GB/s on 8 x 100 Gb/s, #495). Latency (tuning.cc): a pass of n-1 steps, of which the
  m-1 that cross a node boundary pay the network hop and the n-m others an NVLink hop,
      latency = (n - m) x alpha_nvlink + (m - 1) x alpha_net    per pass (all-reduce: two passes),
  tuning.cc's (nsteps - nInterSteps) x intraLat + nInterSteps x interLat with nsteps = n-1 and
  nInterSteps = m-1 for all-gather/reduce-scatter, 2(n-1) and 2(m-1) for all-reduce.
- The tree (all-reduce only, NCCL >= 2.4; Sanders, Speck and Traeff 2009): a chain inside each
  node and a pipelined double binary tree across the m nodes, one per NIC (#530: "reduce intra-node,
  allreduce internode and broadcast intra-node"): latency 2((k-1) alpha_nvlink + ceil(log2 m)
  alpha_net), tuning.cc's tree latency; bandwidth as reduce-scatter and all-gather inside the node
  around the nodes' exchange of S/k per NIC, each node sending ~2 x S/k (#457: "for tree each GPU
  would send and receive 2*S"). For large node counts and small messages the tree wins (log versus
  linear latency), for large messages the ring.
- Not modelled: NVLink SHARP / IB SHARP (NVLS, CollNet: they need that hardware and its plugin),
  PAT (NCCL >= 2.23, all-gather/reduce-scatter with one GPU per node only; tuning.cc prices it at
  0.75 of the ring's bandwidth with a log-plus-linear latency, so it matters only for small messages,
  not the data-parallel buffers), congestion, protocol
  switching (LL, LL128, Simple) beyond the fixed alpha, and overlap with compute (the step model
  decides that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.config.validity import Knobs, RULES, R_EP_DP

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")


# --------------------------------------------------------------------------------------------
# Group layout
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One communication group, as the cost model sees it."""

    size: int
    """Ranks in the group."""
    ranks_per_node: int
    """How many of them share one node (size when the group fits in a node)."""

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.size / self.ranks_per_node)


def _group(size: int, stride: int, gpus_per_node: int) -> Group:
    """A group of `size` ranks spaced `stride` apart in the global rank order.

    Ranks fill nodes in order, so gpus_per_node // stride of them share a node (assumes the strides
    divide the node size, as the powers of two used in practice do).
    """
    per_node = 1 if stride >= gpus_per_node else max(1, min(size, gpus_per_node // stride))
    return Group(size=size, ranks_per_node=per_node)


def group_layout(cfg: ParallelConfig, gpus_per_node: int) -> dict[str, Group]:
    """Every parallel group of a layout, in Megatron's rank order.

    Order (innermost first): tp, cp, dp, pp. The expert grid lays etp, ep, edp over the same
    tp*cp*dp ranks of each stage (MoE Parallel Folding, moe.py; Megatron-Core's expert
    RankGenerator, order tp-ep-dp-pp with tp = etp). With etp = tp this carves ep out of dp*cp.
    'dp_cp' is the group that averages the dense gradients when cp > 1 (Megatron reduces over dp x cp);
    'ep_etp' is the allgather dispatcher's group.
    Hybrid sharding (Layout.dp_shard) splits dp into dp_shard (inner) x replicas (outer), as torchtitan's
    mesh orders dp_replicate outside dp_shard and Megatron's partial distributed optimizer builds its
    intra-instance group from consecutive dp-cp ranks (parallel_state.py, intra_partial_data_parallel_size
    = dp*cp / num_distributed_optimizer_instances): 'dp_shard' (dp_shard*cp ranks, stride tp) is where
    ZeRO shards the dense states and gathers and reduce-scatters them, 'dp_replicate' (one rank of each
    replica, stride tp*cp*dp_shard) all-reduces each shard's gradients. 'edp_shard' and 'edp_replicate'
    split the expert-data-parallel group the same way. With full sharding dp_shard is dp: 'dp_shard' is
    'dp_cp' and the replicate groups have one rank.
    """
    if gpus_per_node < 1:
        raise InputError(f"gpus_per_node={gpus_per_node} must be a positive number")
    tp, cp, dp, ep, etp = cfg.tp, cfg.cp, cfg.dp, cfg.ep, cfg.expert_tp
    knobs = Knobs(gpus=cfg.num_gpus, tp=tp, pp=cfg.pp, cp=cp, ep=ep, vpp=cfg.vpp, mbs=cfg.mbs, seq=cfg.seq,
                  schedule=0, etp=etp)
    grid = next(rule for rule in RULES if rule.reason == R_EP_DP)
    if grid.broken(None, knobs, None):
        raise InputError(grid.message(None, knobs, None))
    shard, replicas = cfg.dp_shard_size, cfg.dp_replicas
    return {
        "tp": _group(tp, 1, gpus_per_node),
        "cp": _group(cp, tp, gpus_per_node),
        "dp": _group(dp, tp * cp, gpus_per_node),
        "dp_cp": _group(dp * cp, tp, gpus_per_node),
        "etp": _group(etp, 1, gpus_per_node),
        "ep": _group(ep, etp, gpus_per_node),
        "ep_etp": _group(ep * etp, 1, gpus_per_node),
        "edp": _group(cfg.expert_dp, etp * ep, gpus_per_node),
        "dp_shard": _group(shard * cp, tp, gpus_per_node),
        "dp_replicate": _group(replicas, tp * cp * shard, gpus_per_node),
        "edp_shard": _group(max(1, cfg.expert_dp // replicas), etp * ep, gpus_per_node),
        "edp_replicate": _group(replicas, tp * cp * shard, gpus_per_node),
        "pp": _group(cfg.pp, tp * cp * dp, gpus_per_node),
    }


# --------------------------------------------------------------------------------------------
# Analytic cost
# --------------------------------------------------------------------------------------------


def _check(kind: str, size_bytes, n: int) -> np.ndarray:
    if kind not in KINDS:
        raise InputError(f"unknown collective '{kind}': use one of {', '.join(KINDS)}")
    if n < 1:
        raise InputError(f"group size {n} must be a positive number of ranks")
    if isinstance(size_bytes, (int, float)) and math.isfinite(size_bytes) and size_bytes >= 0:
        return np.float64(size_bytes)   # the common scalar call, without building a 0-d array (same values)
    sizes = np.asarray(size_bytes, dtype=float)
    if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise InputError("size_bytes must be finite and non-negative")
    return sizes


def _result(value, size_bytes):
    """A float for scalar input, an array (broadcast to the sizes' shape) for array input."""
    if np.ndim(size_bytes) == 0:
        return float(value)
    return np.broadcast_to(value, np.shape(size_bytes)).astype(float)


def bus_bytes_per_rank(kind: str, size_bytes, n: int):
    """Bytes each rank sends for a collective over n ranks (nccl-tests PERFORMANCE.md).

    all_reduce 2(n-1)/n x S; all_gather, reduce_scatter, all_to_all (n-1)/n x S; p2p S (one message).
    """
    sizes = _check(kind, size_bytes, n)
    if n == 1:
        factor = 0.0
    elif kind == "all_reduce":
        factor = 2 * (n - 1) / n
    elif kind == "p2p":
        factor = 1.0
    else:
        factor = (n - 1) / n
    return _result(factor * sizes, size_bytes)


@dataclass(frozen=True)
class _Links:
    """Latency (s) and achieved bus bandwidth (bytes/s per GPU per direction) of each level."""

    alpha_intra_s: float
    alpha_inter_s: float
    base_s: float
    bw_intra_bytes_s: float
    bw_inter_bytes_s: float

    @classmethod
    def of(cls, cluster: ClusterSpec) -> _Links:
        return cls(
            alpha_intra_s=cluster.intra_node_latency_us * 1e-6,
            alpha_inter_s=cluster.inter_node_latency_us * 1e-6,
            base_s=cluster.collective_base_latency_us * 1e-6,
            bw_intra_bytes_s=cluster.intra_node_bw * 1e9 * cluster.intra_node_bw_efficiency,
            bw_inter_bytes_s=cluster.inter_node_bw * 1e9 * cluster.inter_node_bw_efficiency,
        )


def _ring_latency_s(n: int, m: int, links: _Links) -> float:
    """One ring pass over n ranks on m nodes: n-1 steps, the m-1 that cross a node boundary at the
    network hop latency and the n-m others at the NVLink hop latency (NCCL src/graph/tuning.cc:
    (nsteps - nInterSteps) x intraLat + nInterSteps x interLat, nsteps = n-1, nInterSteps = m-1)."""
    return (n - m) * links.alpha_intra_s + (m - 1) * links.alpha_inter_s


def _ring_bw_s(bytes_per_rank, k: int, m: int, links: _Links):
    """Bandwidth time of a ring over ranks spread k per node on m nodes. On one node, NVLink. Across
    nodes, k channels each leave the node through a different NIC: a rank sends (k-1)/k of its bytes
    over NVLink and 1/k over its NIC, concurrently, so the slower share sets the time (the bus
    bandwidth is at most k x the per-GPU NIC bandwidth, the node's aggregate)."""
    if m == 1:
        return bytes_per_rank / links.bw_intra_bytes_s
    nvlink_s = bytes_per_rank * (k - 1) / k / links.bw_intra_bytes_s
    network_s = bytes_per_rank / k / links.bw_inter_bytes_s
    return np.maximum(nvlink_s, network_s)


def _ring_s(passes: int, sizes, n: int, k: int, m: int, links: _Links):
    """NCCL's flat ring over all n ranks: `passes` passes (reduce-scatter or all-gather 1, all-reduce
    2), each sending (n-1)/n of the buffer per rank."""
    return links.base_s + passes * (_ring_latency_s(n, m, links) + _ring_bw_s((n - 1) / n * sizes, k, m, links))


def _tree_s(sizes, k: int, m: int, links: _Links):
    """NCCL's tree all-reduce across m > 1 nodes: reduce-scatter and all-gather over the k ranks of a
    node (NVLink) around a double binary tree across the nodes on S/k per NIC (all k NICs in
    parallel, each node sending ~2 x S/k). The node phases and the network phase are added in turn,
    an upper bound (NCCL pipelines its chain and tree). Latency 2((k-1) alpha_nvlink + ceil(log2 m)
    alpha_net), tuning.cc's tree latency."""
    intra = 2 * ((k - 1) * links.alpha_intra_s + (k - 1) / k * sizes / links.bw_intra_bytes_s)
    across = 2 * math.ceil(math.log2(m)) * links.alpha_inter_s + 2 * sizes / k / links.bw_inter_bytes_s
    return links.base_s + intra + across


def all_reduce_algorithms(size_bytes, group: Group, cluster: ClusterSpec) -> dict[str, object]:
    """Time in seconds of each all-reduce algorithm NCCL considers for this group: the ring, and
    across nodes the tree (see module doc)."""
    sizes = _check("all_reduce", size_bytes, group.size)
    n, k, m = group.size, min(group.ranks_per_node, group.size), group.num_nodes
    links = _Links.of(cluster)
    if n == 1:
        return {"ring": _result(0.0, size_bytes)}
    algorithms = {"ring": _result(_ring_s(2, sizes, n, k, m, links), size_bytes)}
    if m > 1:
        algorithms["tree"] = _result(_tree_s(sizes, k, m, links), size_bytes)
    return algorithms


def _all_to_all_s(sizes, n: int, k: int, links: _Links):
    """Pairwise exchange (Thakur et al. 2005): n-1 steps, S/n to each peer; the k-1 peers in the node
    over NVLink and the n-k others over this rank's NIC, the two running concurrently."""
    latency = (k - 1) * links.alpha_intra_s + (n - k) * links.alpha_inter_s
    nvlink_s = (k - 1) / n * sizes / links.bw_intra_bytes_s
    network_s = (n - k) / n * sizes / links.bw_inter_bytes_s
    return latency + np.maximum(nvlink_s, network_s)


def collective_time_s(kind: str, size_bytes, group: Group, cluster: ClusterSpec):
    """Seconds for one collective of `kind` over `group` on `cluster`.

    size_bytes is the full buffer (a float or a numpy array; arrays broadcast). For p2p it is one
    message between two ranks, over the network when group.ranks_per_node == 1, else over NVLink.
    A group of one rank costs 0.
    """
    sizes = _check(kind, size_bytes, group.size)
    if group.ranks_per_node < 1:
        raise InputError(f"ranks_per_node={group.ranks_per_node} must be a positive number")
    n, k, m = group.size, min(group.ranks_per_node, group.size), group.num_nodes
    links = _Links.of(cluster)
    if n == 1:
        return _result(0.0, size_bytes)
    if kind == "all_reduce":
        times = all_reduce_algorithms(sizes, group, cluster).values()
        return _result(np.minimum.reduce([np.asarray(t) for t in times]), size_bytes)
    if kind in ("all_gather", "reduce_scatter"):
        return _result(_ring_s(1, sizes, n, k, m, links), size_bytes)
    if kind == "all_to_all":
        return _result(_all_to_all_s(sizes, n, k, links), size_bytes)
    if k == 1:  # p2p across nodes
        return _result(links.alpha_inter_s + sizes / links.bw_inter_bytes_s, size_bytes)
    return _result(links.alpha_intra_s + sizes / links.bw_intra_bytes_s, size_bytes)
