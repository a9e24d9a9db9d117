"""Collectives: numpy runs of the algorithms, the analytic cost model, group layout, and the CLI."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from trainplan.tools.hardware import catalog
from trainplan.tools.perf import collective_sim as sim
from trainplan.tools.perf import collectives as col
from trainplan.tools.perf.collectives import Group, bus_bytes_per_rank, collective_time_s, group_layout
from trainplan.tools.core.errors import InputError
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.config.contract import ParallelConfig


@pytest.fixture(scope="module")
def h100():
    return catalog.load_gpu("h100-sxm-80gb")


@pytest.fixture(scope="module")
def cluster(h100):
    return ClusterSpec.build(h100, 1024)


# ---------------------------------------------------------------- simulations


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_ring_all_reduce_sums_and_sends_textbook_bytes(n):
    rng = np.random.default_rng(n)
    buffers = [rng.standard_normal(12 * n) for _ in range(n)]
    results, sent = sim.ring_all_reduce(buffers)
    expected = np.sum(buffers, axis=0)
    for r in results:
        np.testing.assert_allclose(r, expected, rtol=0, atol=1e-12)
    size_bytes = buffers[0].nbytes
    assert np.all(sent == bus_bytes_per_rank("all_reduce", size_bytes, n))  # exactly 2(N-1)/N x size
    assert np.all(sent == 2 * (n - 1) * size_bytes // n)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_reduce_scatter_and_all_gather_bytes(n):
    rng = np.random.default_rng(0)
    buffers = [rng.standard_normal(4 * n) for _ in range(n)]
    reduced, sent_rs = sim.ring_reduce_scatter(buffers)
    chunks = np.split(np.sum(buffers, axis=0), n)
    for r in range(n):  # rank r owns the summed chunk (r+1) mod n
        np.testing.assert_allclose(np.split(reduced[r], n)[(r + 1) % n], chunks[(r + 1) % n], atol=1e-12)
    assert np.all(sent_rs == bus_bytes_per_rank("reduce_scatter", buffers[0].nbytes, n))
    gathered, sent_ag = sim.ring_all_gather(reduced, owned=[(r + 1) % n for r in range(n)])
    assert np.all(sent_ag == bus_bytes_per_rank("all_gather", buffers[0].nbytes, n))


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_data_parallel_gradient_equals_single_device(n):
    result = sim.simulate_dp(n)
    assert result["max_abs_error"] < 1e-12
    assert result["all_reduces"] == 1


def test_mlp_grad_matches_finite_differences():
    w1, w2, x, t = sim._mlp_data(6, seed=3)
    grad = sim.mlp_grad(w1, w2, x, t)

    def loss(flat):
        a, b = flat[: w1.size].reshape(w1.shape), flat[w1.size:].reshape(w2.shape)
        return 0.5 * np.sum((np.maximum(x @ a, 0) @ b - t) ** 2) / len(x)

    flat = np.concatenate([w1.ravel(), w2.ravel()])
    eps = 1e-6
    numeric = np.array([(loss(flat + eps * e) - loss(flat - eps * e)) / (2 * eps) for e in np.eye(flat.size)])
    np.testing.assert_allclose(grad, numeric, atol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_tensor_parallel_mlp_equals_full_matmul(n):
    result = sim.simulate_tp(n)
    assert result["max_abs_error_forward"] < 1e-12
    assert result["max_abs_error_grad_input"] < 1e-12
    assert result["all_reduces_forward"] == 1 and result["all_reduces_backward"] == 1


@pytest.mark.parametrize("n,k", [(1, 4), (4, 1), (4, 4), (2, 8)])
def test_accumulation_equals_large_batch_with_k_times_fewer_all_reduces(n, k):
    result = sim.simulate_accumulate(n, micro_batches=k)
    assert result["max_abs_error"] < 1e-12
    assert result["max_abs_error_without_accumulation"] < 1e-12
    assert result["all_reduces"] == 1
    assert result["all_reduces_without_accumulation"] == k
    assert result["bytes_sent_per_rank_without_accumulation"] == k * result["bytes_sent_per_rank"]


# ---------------------------------------------------------------- analytic model


def test_bus_bytes_textbook_volumes():
    assert bus_bytes_per_rank("all_reduce", 800.0, 8) == pytest.approx(1400.0)
    for kind in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_bytes_per_rank(kind, 800.0, 8) == pytest.approx(700.0)
    assert bus_bytes_per_rank("p2p", 800.0, 2) == 800.0
    assert bus_bytes_per_rank("all_reduce", 800.0, 1) == 0.0


@pytest.mark.parametrize("kind", col.KINDS)
def test_group_of_one_costs_nothing(kind, cluster):
    assert collective_time_s(kind, 1e9, Group(1, 1), cluster) == 0.0


@pytest.mark.parametrize("kind", col.KINDS)
@pytest.mark.parametrize("group", [Group(8, 8), Group(64, 8), Group(128, 1), Group(1024, 8)])
def test_time_grows_with_size_and_accepts_arrays(kind, group, cluster):
    sizes = np.logspace(2, 10, 17)
    times = collective_time_s(kind, sizes, group, cluster)
    assert isinstance(times, np.ndarray) and times.shape == sizes.shape
    assert np.all(np.diff(times) > 0)
    assert times[5] == pytest.approx(collective_time_s(kind, float(sizes[5]), group, cluster))


@pytest.mark.parametrize("kind", col.KINDS)
def test_crossing_nodes_costs_more(kind, cluster):
    inside = collective_time_s(kind, 1e8, Group(8, 8), cluster)
    if kind != "p2p":  # a p2p message goes over the network only when no two ranks share a node
        assert collective_time_s(kind, 1e8, Group(8, 4), cluster) > inside
    assert collective_time_s(kind, 1e8, Group(8, 1), cluster) > inside


def test_intra_node_group_uses_nvlink_bandwidth(h100):
    cluster = ClusterSpec.build(h100, 8, intra_node_latency_us=0.0, collective_base_latency_us=0.0)
    size = 1e9
    busbw = h100.intra_node_bw * 1e9 * h100.intra_node_bw_efficiency
    assert collective_time_s("all_gather", size, Group(8, 8), cluster) == pytest.approx(7 / 8 * size / busbw)
    assert collective_time_s("all_reduce", size, Group(8, 8), cluster) == pytest.approx(2 * 7 / 8 * size / busbw)
    # The --intra-node-bw flag overrides the catalog figure.
    faster = ClusterSpec.build(h100, 8, intra_node_bw=900, intra_node_latency_us=0.0, collective_base_latency_us=0.0)
    assert collective_time_s("all_reduce", size, Group(8, 8), faster) == pytest.approx(7 / 8 * size / busbw)


def _nic_busbw(gpu) -> float:
    return gpu.inter_node_bw * 1e9 * gpu.inter_node_bw_efficiency


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n,k", [(16, 8), (64, 8), (1024, 8), (8, 1), (64, 1), (16, 4), (4, 2)])
def test_ring_across_nodes_is_bounded_by_the_node_nic_bandwidth(kind, n, k, h100):
    # NCCL runs one flat ring (no two-level variant for all-gather / reduce-scatter): each rank's bus
    # bytes cross the network 1/k through each of the node's k NICs, so its bus bandwidth never
    # exceeds k x the per-GPU NIC bandwidth, whatever the size; with NVLink made free and no latency
    # it reaches exactly that.
    cluster = ClusterSpec.build(h100, n)
    sizes = np.logspace(3, 10, 8)
    assert np.all(collective_time_s(kind, sizes, Group(n, k), cluster)
                  >= bus_bytes_per_rank(kind, sizes, n) / (k * _nic_busbw(h100)))
    ideal = ClusterSpec.build(h100, n, intra_node_bw=1e12, intra_node_latency_us=0.0, inter_node_latency_us=0.0,
                                collective_base_latency_us=0.0)
    assert collective_time_s(kind, 4e9, Group(n, k), ideal) == pytest.approx(
        bus_bytes_per_rank(kind, 4e9, n) / (k * _nic_busbw(h100)), rel=1e-3)


def test_two_nodes_pay_the_flat_ring_volume_not_a_two_level_one(h100):
    # 4 ranks, 2 per node: the ring sends (n-1)/n = 3/4 of the buffer per rank, 1/2 of it through each
    # NIC; a two-level scheme would send only the other node's half, (m-1)/m x S/k, but NCCL has none.
    cluster = ClusterSpec.build(h100, 4, intra_node_bw=1e12, intra_node_latency_us=0.0, inter_node_latency_us=0.0,
                                collective_base_latency_us=0.0)
    size = 1e9
    ring_network_s = 3 / 4 * size / 2 / _nic_busbw(h100)
    two_level_network_s = 1 / 2 * size / 2 / _nic_busbw(h100)
    time = collective_time_s("all_gather", size, Group(4, 2), cluster)
    assert time == pytest.approx(ring_network_s)
    assert time > two_level_network_s


@pytest.mark.parametrize("k", [1, 4, 8])
def test_ring_latency_grows_with_the_rank_count(k, h100):
    # An empty buffer costs only the ring's latency: n-1 steps, of which the m-1 that cross a node pay
    # the network hop and the others the NVLink hop (NCCL tuning.cc). Each node added to the ring
    # adds k-1 NVLink hops and one network hop.
    cluster = ClusterSpec.build(h100, 4096)
    alpha_nvlink, alpha_net = cluster.intra_node_latency_us * 1e-6, cluster.inter_node_latency_us * 1e-6
    latencies = [collective_time_s("all_gather", 0.0, Group(k * m, k), cluster) for m in (2, 3, 4, 64, 512)]
    assert np.all(np.diff(latencies) > 0)
    one_more_node = (collective_time_s("reduce_scatter", 0.0, Group(k * 65, k), cluster)
                     - collective_time_s("reduce_scatter", 0.0, Group(k * 64, k), cluster))
    assert one_more_node == pytest.approx((k - 1) * alpha_nvlink + alpha_net)
    inside = collective_time_s("all_gather", 0.0, Group(8, 8), cluster)
    # plus NCCL's fixed latency of one call (tuning.cc baseLat), paid once whatever the ring's length
    assert inside == pytest.approx(cluster.collective_base_latency_us * 1e-6 + 7 * alpha_nvlink)


@pytest.mark.parametrize("group", [Group(8, 8), Group(16, 8), Group(256, 8), Group(64, 1)])
def test_ring_all_reduce_is_a_reduce_scatter_then_an_all_gather(group, cluster):
    # One ring, one definition: the all-reduce ring is the two passes that reduce-scatter and
    # all-gather each run once (Thakur et al. 2005), latency and bandwidth alike, in one call: NCCL's
    # fixed per-call latency is paid once, not twice.
    base = cluster.collective_base_latency_us * 1e-6
    assert base > 0
    for size in (0.0, 1e6, 1e9):
        ring = col.all_reduce_algorithms(size, group, cluster)["ring"]
        assert ring == pytest.approx(collective_time_s("reduce_scatter", size, group, cluster)
                                     + collective_time_s("all_gather", size, group, cluster) - base)


def test_all_reduce_chooses_between_ring_and_tree_only(cluster):
    # NCCL builds flat rings and, across nodes, trees; no two-level ring (NVIDIA/nccl #471).
    assert set(col.all_reduce_algorithms(1e6, Group(8, 8), cluster)) == {"ring"}
    assert set(col.all_reduce_algorithms(1e6, Group(64, 8), cluster)) == {"ring", "tree"}


def test_tree_beats_ring_for_small_messages_at_scale(cluster):
    group = Group(512 * 8, 8)
    small = col.all_reduce_algorithms(1e4, group, cluster)
    assert small["tree"] < small["ring"]
    assert collective_time_s("all_reduce", 1e4, group, cluster) == small["tree"]
    # On two nodes with a large buffer the ring's 2(n-1)/n volume, NVLink and network pipelined,
    # beats the tree, whose node phases and network phase run in turn.
    big = col.all_reduce_algorithms(1e10, Group(16, 8), cluster)
    assert big["ring"] < big["tree"]
    assert collective_time_s("all_reduce", 1e10, Group(16, 8), cluster) == big["ring"]


def test_p2p_inside_versus_across_nodes(h100, cluster):
    size = 1e8
    inter = collective_time_s("p2p", size, Group(2, 1), cluster)
    assert inter == pytest.approx(4e-6 + size / (h100.inter_node_bw * 1e9 * 0.9))
    assert collective_time_s("p2p", size, Group(2, 2), cluster) < inter


@pytest.mark.parametrize("kind,size", [("all_reduce", -1.0), ("broadcast", 1.0), ("all_gather", float("nan"))])
def test_bad_input_raises_input_error(kind, size, cluster):
    with pytest.raises(InputError):
        collective_time_s(kind, size, Group(8, 8), cluster)
    with pytest.raises(InputError):
        bus_bytes_per_rank(kind, size, 8)


def test_negative_size_in_an_array_raises(cluster):
    with pytest.raises(InputError):
        collective_time_s("all_reduce", np.array([1.0, -2.0]), Group(8, 8), cluster)


# ---------------------------------------------------------------- group layout


def test_layout_tp8_pp16_dp128():
    groups = group_layout(ParallelConfig(tp=8, pp=16, dp=128, seq=8192), gpus_per_node=8)
    assert groups["tp"] == Group(8, 8)
    assert groups["dp"] == Group(128, 1)
    assert groups["pp"] == Group(16, 1)
    assert groups["cp"].size == 1 and groups["ep"].size == 1


def test_layout_ep8_inside_node():
    groups = group_layout(ParallelConfig(tp=1, ep=8, dp=64, seq=4096), gpus_per_node=8)
    assert groups["ep"] == Group(8, 8)
    assert groups["edp"] == Group(8, 1)
    assert groups["dp"] == Group(64, 8)


def test_layout_tp2_cp2_dp4():
    groups = group_layout(ParallelConfig(tp=2, cp=2, dp=4, ep=4, seq=4096), gpus_per_node=8)
    assert groups["tp"] == Group(2, 2)
    assert groups["cp"] == Group(2, 2)
    assert groups["dp"] == Group(4, 2)     # stride tp*cp = 4
    assert groups["dp_cp"] == Group(8, 4)  # stride tp = 2
    assert groups["ep"] == Group(4, 4)
    assert groups["edp"] == Group(2, 1)


def test_layout_rejects_ep_not_dividing_dp_cp():
    with pytest.raises(InputError):
        group_layout(ParallelConfig(ep=3, dp=4, seq=128), gpus_per_node=8)


# ---------------------------------------------------------------- CLI


def run_cli(monkeypatch, capsys, *args):
    from trainplan import cli

    monkeypatch.setattr(sys, "argv", ["trainplan", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    out = capsys.readouterr()
    return exit_info.value.code or 0, out.out, out.err


JSON_KEYS = {
    "allreduce": {"ranks", "size_bytes", "max_abs_error", "bytes_sent_per_rank", "formula_bytes_per_rank",
                  "matches_formula"},
    "dp": {"ranks", "batch", "max_abs_error", "all_reduces"},
    "tp": {"ranks", "max_abs_error_forward", "max_abs_error_grad_input", "all_reduces_forward",
           "all_reduces_backward"},
    "accumulate": {"ranks", "micro_batches", "max_abs_error", "all_reduces", "all_reduces_without_accumulation"},
}


@pytest.mark.parametrize("what", sorted(JSON_KEYS))
def test_cli_simulate_json(what, monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "simulate", what, "--ranks", "4", "--json")
    assert code == 0
    result = json.loads(out)
    assert JSON_KEYS[what] <= result.keys()
    assert result["simulation"] == what and result["ranks"] == 4


def test_cli_simulate_text(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "simulate", "allreduce", "--ranks", "8")
    assert code == 0
    assert "match" in out and "MISMATCH" not in out


@pytest.mark.parametrize("args", [("simulate", "broadcast"), ("simulate", "dp", "--ranks", "-2"),
                                  ("simulate", "accumulate", "--micro-batches", "0"),
                                  ("simulate", "dp", "--ranks", "100000")])
def test_cli_bad_input_is_one_error_line(args, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "Traceback" not in err
