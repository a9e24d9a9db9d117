"""Hybrid sharding (Layout.dp_shard, HSDP): memory, communication groups, timing terms, validity, exports, search."""

from __future__ import annotations

import json
import tomllib

import numpy as np
from cli_inprocess import run_cli as in_process
import pytest
import yaml

from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.perf.collectives import collective_time_s, group_layout
from trainplan.tools.perf.data_parallel import ComputeWindow, dp_exchange_s
from trainplan.tools.core.errors import InputError
from trainplan.tools.engines import ExportError, export, parse_args_text
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.perf.memory import memory_breakdown
from trainplan.tools.search.driver import search
from trainplan.tools.hardware.specs import ClusterSpec
from trainplan.tools.perf.step import step_time

MODEL, GPU = load_model("llama3-8b"), load_gpu("h100-sxm-80gb")
LAYOUT = dict(zero=3, mbs=1, gbs=64, seq=4096, recompute="full")


def _cluster(gpus: int = 64, inter_node_bw: float | None = None) -> ClusterSpec:
    return ClusterSpec.build(GPU, gpus, gpus_per_node=8, inter_node_bw=inter_node_bw)


def test_full_sharding_is_the_default_and_dp_shard_equal_to_dp_changes_nothing():
    full = resolve_config(MODEL, 64, **LAYOUT)
    same = resolve_config(MODEL, 64, dp_shard=64, **LAYOUT)
    assert full.dp_shard is None and same.dp_shard is None and full.dp_shard_size == 64 and full.dp_replicas == 1
    assert step_time(MODEL, same, _cluster()).step_s == step_time(MODEL, full, _cluster()).step_s


@pytest.mark.parametrize("zero, sharded", [(1, ("optimizer",)), (2, ("optimizer", "gradients")),
                                           (3, ("optimizer", "gradients", "weights"))])
def test_sharded_states_divide_by_dp_shard_not_dp(zero, sharded):
    """What each ZeRO stage shards is divided over dp_shard*cp ranks: 8 of 64 holds 8x the state."""
    full = memory_breakdown(MODEL, resolve_config(MODEL, 64, **{**LAYOUT, "zero": zero}), GPU).breakdown
    hybrid = memory_breakdown(MODEL, resolve_config(MODEL, 64, dp_shard=8, **{**LAYOUT, "zero": zero}), GPU).breakdown
    for part in ("weights", "gradients", "optimizer"):
        ratio = hybrid[f"{part}/layers"] / full[f"{part}/layers"]
        assert ratio == pytest.approx(8.0 if part in sharded else 1.0)


def test_cp_ranks_stay_in_the_shard_group():
    """ZeRO shards over dp_shard*cp (Megatron's dp-cp group, torchtitan's dp_shard_cp mesh)."""
    cfg = resolve_config(MODEL, 64, cp=2, dp_shard=4, **LAYOUT)
    groups = group_layout(cfg, 8)
    assert groups["dp_shard"].size == 8 and groups["dp_shard"].num_nodes == 1 and groups["dp_replicate"].size == 8
    one = memory_breakdown(MODEL, cfg, GPU).breakdown["optimizer/layers"]
    assert one == pytest.approx(memory_breakdown(MODEL, resolve_config(MODEL, 64, dp_shard=8, **LAYOUT), GPU)
                                .breakdown["optimizer/layers"])


def test_one_node_shard_group_gathers_over_nvlink_and_all_reduces_across_nodes():
    cfg = resolve_config(MODEL, 64, dp_shard=8, **LAYOUT)
    groups = group_layout(cfg, 8)
    shard, replicas = groups["dp_shard"], groups["dp_replicate"]
    assert (shard.size, shard.num_nodes) == (8, 1)
    assert (replicas.size, replicas.ranks_per_node, replicas.num_nodes) == (8, 1, 8)
    weights = 2.0 * 8e9
    slow, fast = _cluster(inter_node_bw=1.0), _cluster(inter_node_bw=100.0)
    # the all-gather does not touch the network; the replicas' all-reduce does
    assert collective_time_s("all_gather", weights, shard, slow) == collective_time_s("all_gather", weights, shard, fast)
    assert collective_time_s("all_reduce", weights / 8, replicas, slow) > 10 * collective_time_s(
        "all_reduce", weights / 8, replicas, fast)
    # full sharding's gather crosses the network
    full = group_layout(resolve_config(MODEL, 64, **LAYOUT), 8)["dp_shard"]
    assert full.num_nodes == 8
    assert collective_time_s("all_gather", weights, full, slow) > 5 * collective_time_s("all_gather", weights, full, fast)


def test_replica_all_reduce_adds_to_the_exchange():
    """Hybrid sharding's exchange has a cross-replica all-reduce beside the shard group's collectives: with
    nothing to hide behind, ZeRO-1's exposed time is at least the shard's all-reduce over the replicas."""
    cfg = resolve_config(MODEL, 64, zero=1, dp_shard=8, gbs=64, seq=4096)
    groups = group_layout(cfg, 8)
    cluster = _cluster(inter_node_bw=5.0)
    params = 8e9
    window = ComputeWindow(0.0, 0.0, 1)
    exposed = dp_exchange_s(1, params, groups["dp_shard"], cluster, window, 4, replicate=groups["dp_replicate"])
    alone = dp_exchange_s(1, params, groups["dp_shard"], cluster, window, 4)
    all_reduce = collective_time_s("all_reduce", 4 * params / 8, groups["dp_replicate"], cluster)
    assert exposed >= all_reduce > alone > 0


def test_hybrid_zero3_exposes_less_on_a_slow_network():
    """ZeRO-3 gathers the weights twice per micro-batch; inside a node they leave the network to the
    gradient all-reduce alone, so on a slow network the exposed data-parallel time falls."""
    slow = _cluster(inter_node_bw=2.0)
    full = step_time(MODEL, resolve_config(MODEL, 64, bf16_grads=True, **LAYOUT), slow).breakdown["comm/dp"]
    hybrid = step_time(MODEL, resolve_config(MODEL, 64, dp_shard=8, bf16_grads=True, **LAYOUT), slow)
    assert hybrid.breakdown["comm/dp"] < 0.8 * full
    assert hybrid.mfu <= hybrid.hfu < 1


@pytest.mark.parametrize("knobs, fragment", [
    (dict(dp_shard=3), "dp_shard=3 must divide dp=64"),
    (dict(dp_shard=128), "dp_shard=128 must divide dp=64"),
    (dict(dp_shard=8, zero=0), "zero=0 shards nothing"),
    (dict(dp_shard=0), "dp_shard=0 must be a positive number"),
])
def test_bad_dp_shard_is_refused(knobs, fragment):
    with pytest.raises(InputError, match=fragment):
        resolve_config(MODEL, 64, **{**LAYOUT, **knobs})


def test_replicas_must_divide_the_expert_data_parallel_group():
    moe = load_model("deepseek-v2-lite")
    with pytest.raises(InputError, match="replicas must divide the expert-data-parallel size"):
        resolve_config(moe, 16, ep=8, zero=1, dp_shard=4, gbs=32, seq=4096)
    assert resolve_config(moe, 16, ep=2, zero=1, dp_shard=4, gbs=32, seq=4096).dp_replicas == 4


@pytest.mark.parametrize("flag, fragment", [(["--dp-shard", "3"], "dp_shard=3 must divide dp=64"),
                                            (["--dp-shard", "8", "--zero", "0"], "zero=0 shards nothing"),
                                            (["--dp-shard", "0"], "dp_shard")])
def test_cli_bad_dp_shard_is_one_error_line_exit_2(flag, fragment):
    result = in_process("estimate", "--model", "llama3-8b", "--gpu",
                             "h100", "--gpus", "64", "--zero", "3", *flag)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert fragment in lines[0] and "Traceback" not in result.stderr


def _exported(engine: str, **knobs):
    cfg = resolve_config(MODEL, 64, **{**LAYOUT, **knobs})
    return export(engine, MODEL, cfg, model_ref="llama3-8b").content


def test_exports_write_the_replicas():
    toml = tomllib.loads(_exported("torchtitan", dp_shard=8))["parallelism"]
    assert (toml["data_parallel_shard_degree"], toml["data_parallel_replicate_degree"]) == (8, 8)
    assert tomllib.loads(_exported("torchtitan"))["parallelism"]["data_parallel_shard_degree"] == 64
    flags = parse_args_text(_exported("megatron", zero=1, dp_shard=16))
    assert flags["--num-distributed-optimizer-instances"] == "4" and "--use-distributed-optimizer" in flags
    assert "--num-distributed-optimizer-instances" not in parse_args_text(_exported("megatron", zero=1))
    body = yaml.safe_load(_exported("accelerate", dp_shard=8))
    assert body["parallelism_config"] == {"parallelism_config_dp_replicate_size": 8,
                                          "parallelism_config_dp_shard_size": 8}
    assert "parallelism_config" not in yaml.safe_load(_exported("accelerate"))


@pytest.mark.parametrize("engine", ["deepspeed", "axolotl", "llamafactory", "trl"])
def test_engines_without_hybrid_sharding_refuse_it(engine):
    with pytest.raises(ExportError, match="dp_shard=8"):
        _exported(engine, dp_shard=8)
    _exported(engine)   # full sharding exports


def test_cli_export_refusal_is_one_line():
    result = in_process("export", "--engine", "deepspeed", "--model",
                             "llama3-8b", "--gpu", "h100", "--gpus", "64", "--zero", "3", "--dp-shard", "8",
                             "--gbs", "64")
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "hpZ" in lines[0]


def test_search_weighs_one_node_shard_groups_where_the_network_is_slow():
    """With ZeRO-3 pinned on a slow network, the best layout shards inside a node; the search's
    vectorised figures agree with the exact path for it (it was re-scored)."""
    out = search("llama3-8b", "h100", 64, gbs=64, seq=4096, zero=3, tp=1, pp=1, cp=1, recompute="full",
                 inter_node_bw=1.0, top_k=3)
    best = out.candidates[0]["config"]
    assert best["dp_shard"] == 8
    fast = search("llama3-8b", "h100", 64, gbs=64, seq=4096, zero=3, tp=1, pp=1, cp=1, recompute="full", top_k=3)
    assert {c["config"]["dp_shard"] for c in fast.candidates} <= {None, 8}


def test_search_pin_that_no_layout_admits_is_counted():
    out = search("llama3-8b", "h100", 16, gbs=32, seq=4096, zero=3, dp_shard=3, top_k=1)
    assert out.candidates == [] and out.rejected["invalid split: dp_shard does not divide dp"] > 0


def test_estimate_json_echoes_the_knob():
    result = in_process("estimate", "--model", "llama3-8b", "--gpu",
                             "h100", "--gpus", "64", "--zero", "3", "--dp-shard", "8", "--gbs", "64", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["dp_shard"] == 8
    assert np.isfinite(json.loads(result.stdout)["time"]["step_s"])


def test_memory_hint_offers_a_wider_shard_group_only_where_it_shrinks_the_part():
    from trainplan.tools.perf.memory_hints import memory_fixes

    assert "a larger dp_shard" in memory_fixes("weights", {"zero": 3, "dp_shard": 8})[0]
    assert not any("dp_shard" in fix for fix in memory_fixes("weights", {"zero": 3}))
    assert not any("dp_shard" in fix for fix in memory_fixes("gradients", {"zero": 1, "dp_shard": 8}))


def test_layout_label_names_the_shard_group():
    from trainplan.tools.search.explain import label

    base = {"tp": 1, "pp": 1, "dp": 64, "cp": 1, "ep": 1, "vpp": 1, "schedule": "1f1b", "zero": 3, "mbs": 1,
            "recompute": "full"}
    assert "zero3/shard8" in label({**base, "dp_shard": 8})
    assert "shard" not in label({**base, "dp_shard": None})
