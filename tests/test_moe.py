"""MoE layers as engines run them: MoE Parallel Folding rules, routing load, grouped GEMMs, dispatch."""

from __future__ import annotations

import pytest

import trainplan
from trainplan.tools.perf import layer_compute, moe
from trainplan.tools.hardware.catalog import load_gpu, load_model
from trainplan.tools.perf.collectives import group_layout
from trainplan.tools.core.errors import InputError
from trainplan.tools.config.layout import resolve_config
from trainplan.tools.hardware.specs import ClusterSpec

QWEN3 = load_model("qwen3-30b-a3b")
H100 = load_gpu("h100-sxm-80gb")


def _moe_ms(cfg, key):
    layer = layer_compute.layer_times(QWEN3, cfg, H100, QWEN3.moe_layers[0])
    return 1e3 * sum(part.get(key, 0.0) for part in (layer.forward_s, layer.backward_input_s, layer.backward_weight_s))


def test_folding_accepts_ep_spanning_tensor_parallel_ranks():
    """NVIDIA's Qwen3-235B-A22B layout on 256 H100: TP2 PP8 EP32 with expert TP 1. dp*cp = 16 < ep,
    but etp*ep = 32 divides tp*cp*dp = 32 (Megatron-Core's expert grid)."""
    model = load_model("qwen3-235b-a22b")
    cfg = resolve_config(model, 256, tp=2, pp=8, ep=32, etp=1, vpp=4, seq=4096, gbs=2048)
    assert (cfg.dp, cfg.expert_tp, cfg.expert_dp) == (16, 1, 1)
    groups = group_layout(cfg, gpus_per_node=8)
    assert groups["ep"].size == 32 and groups["ep"].ranks_per_node == 8     # spans 4 nodes, stride etp = 1
    assert groups["edp"].size == 1


def test_default_expert_tp_is_tp_and_keeps_the_old_rule():
    """Without --etp, expert TP equals tp, so ep must divide dp*cp as before folding."""
    with pytest.raises(InputError, match="etp\\*ep=2\\*32=64 must divide tp\\*cp\\*dp=2\\*1\\*16=32"):
        resolve_config(load_model("qwen3-235b-a22b"), 256, tp=2, pp=8, ep=32, seq=4096)


@pytest.mark.parametrize("kwargs, message", [
    ({"ep": 3}, "does not divide the 128 experts"),
    ({"ep": 8, "etp": 5}, "etp=5 does not divide the expert hidden size 768"),
    ({"tp": 2, "ep": 4, "sequence_parallel": False}, "needs sequence parallelism"),
    ({"ep": 16}, "must divide tp\\*cp\\*dp"),
])
def test_expert_grid_rules_name_the_fix(kwargs, message):
    with pytest.raises(InputError, match=message):
        resolve_config(QWEN3, 8, seq=4096, **kwargs)


def test_expert_tp_on_a_dense_model_is_refused():
    with pytest.raises(InputError, match="dense"):
        resolve_config(load_model("llama3-8b"), 8, tp=2, etp=1, seq=4096)


def test_routing_load_factor_by_mode():
    base = dict(seq=4096, ep=8)
    assert moe.load_factor(resolve_config(QWEN3, 8, force_balance=True, **base)) == 1.0
    assert moe.load_factor(resolve_config(QWEN3, 8, **base)) == moe.DROPLESS_LOAD_IMBALANCE > 1
    assert moe.load_factor(resolve_config(QWEN3, 8, capacity_factor=1.5, **base)) == 1.5


def test_learned_routing_is_slower_than_forced_balance():
    """The busiest rank sets the pace: its grouped GEMMs and all-to-all carry the imbalance."""
    base = dict(seq=4096, ep=8, grouped_gemm="fused")
    balanced = _moe_ms(resolve_config(QWEN3, 8, force_balance=True, **base), "moe/experts")
    learned = _moe_ms(resolve_config(QWEN3, 8, **base), "moe/experts")
    assert learned > balanced * 1.1


def test_grouped_gemm_rows_follow_tokens_per_local_expert():
    """Same routed rows, more local experts -> smaller M per GEMM -> no faster per FLOP: the expert
    GEMM time never drops below the FLOP count at the GPU's ceiling."""
    for ep in (1, 8):
        cfg = resolve_config(QWEN3, 8, seq=4096, ep=ep, force_balance=True, grouped_gemm="fused")
        rows = moe.routed_rows(QWEN3, cfg)
        flops = 3 * 2 * rows * QWEN3.hidden_size * 3 * QWEN3.moe_intermediate_size
        ceiling = H100.bf16_tflops * 1e12 * H100.gemm_efficiency
        assert _moe_ms(cfg, "moe/experts") / 1e3 >= flops / ceiling


def test_host_issued_expert_gemms_show_only_beyond_gpu_time():
    """Per-expert GEMMs issued by the host cost max(GPU, host); a fused kernel has no host term."""
    many = resolve_config(QWEN3, 8, seq=4096, ep=1, force_balance=True)          # 128 local experts
    fused = resolve_config(QWEN3, 8, seq=4096, ep=1, force_balance=True, grouped_gemm="fused")
    assert _moe_ms(many, "moe/host") > 0
    assert _moe_ms(fused, "moe/host") == 0
    gpu_ms = _moe_ms(many, "moe/experts")
    host_ms = 1e3 * 2 * 128 * 3 * moe.HOST_S_PER_EXPERT_GEMM
    assert _moe_ms(many, "moe/host") == pytest.approx(max(0.0, host_ms - gpu_ms), rel=0.05)


def test_per_expert_gemms_are_host_paced_alike_on_hopper_and_blackwell():
    """Transformer Engine's GroupedLinear runs one cuBLAS GEMM per local expert on every architecture
    (nvte_multi_tensor_gemm; its CUTLASS grouped kernel is Hopper-only and opt-in), so a host-paced expert
    part takes the same time on H100 and B200, the host's, while a fused grouped GEMM runs faster on the
    faster GPU."""
    b200 = load_gpu("b200")

    def experts_ms(gpu, grouped_gemm):
        cfg = resolve_config(QWEN3, 8, seq=4096, ep=1, force_balance=True, precision="fp8", grouped_gemm=grouped_gemm)
        layer = layer_compute.layer_times(QWEN3, cfg, gpu, QWEN3.moe_layers[0])
        return 1e3 * sum(layer.forward_s.get(k, 0.0) for k in ("moe/experts", "moe/host"))

    host_forward_ms = 1e3 * 2 * QWEN3.num_experts * moe.GEMMS_PER_EXPERT_LINEAR[0] * moe.HOST_S_PER_EXPERT_GEMM
    assert experts_ms(H100, "per_expert") == pytest.approx(host_forward_ms)
    assert experts_ms(b200, "per_expert") == pytest.approx(host_forward_ms)
    assert experts_ms(b200, "fused") < 0.75 * experts_ms(H100, "fused") < experts_ms(H100, "per_expert")


def test_host_paced_layer_amortises_with_micro_batch_size():
    """Host-issued expert GEMMs cost the same host time at any micro-batch size, so a host-paced MoE
    layer (Qwen3-30B-A3B, EP8: 16 local experts, on B200) takes about as long at MBS 2 as at MBS 1 and its
    time per token falls towards the GPU's rate as MBS grows; a fused grouped GEMM is GPU-paced from the
    start, its time per token nearly flat. (The signature that rules a cost fixed per layer out for the H100
    rows in evals: their time per layer doubles from MBS 1 to MBS 2; benchmarks/bench_moe_h100.py.)"""
    b200 = load_gpu("b200")

    def layer(mbs, grouped_gemm):
        cfg = resolve_config(QWEN3, 8, seq=4096, ep=8, mbs=mbs, force_balance=True, precision="fp8",
                             grouped_gemm=grouped_gemm)
        times = layer_compute.layer_times(QWEN3, cfg, b200, QWEN3.moe_layers[0])
        parts = (times.forward_s, times.backward_input_s, times.backward_weight_s)
        total = times.forward + times.backward_input + times.backward_weight
        return total, sum(part.get("moe/host", 0.0) for part in parts) / total

    (host_1, share_1), (host_2, _), (host_4, share_4) = (layer(m, "per_expert") for m in (1, 2, 4))
    (fused_1, _), (fused_4, _) = (layer(m, "fused") for m in (1, 4))
    assert share_1 > 0.5 > share_4                        # the host sets the pace at MBS 1, not at MBS 4
    assert host_2 < 1.5 * host_1                          # twice the tokens, far less than twice the time
    assert host_4 / 4 < 0.5 * host_1                      # per token: amortised
    assert fused_4 / 4 > 0.6 * fused_1                    # GPU-paced: per token nearly flat
    assert fused_1 < host_1 and fused_4 <= host_4         # the host term only ever adds time


def test_allgather_dispatch_moves_the_whole_group_tokens():
    """All-to-all sends k copies of one rank's T tokens, (n-1)/n of them off the rank; the allgather
    dispatcher gathers the n ranks' T tokens. On n = 4 ranks with top-8 routing allgather moves n/k = 1/2.
    (Volumes only: without NCCL's fixed per-call latency, which the gather and scatter pay and the pairwise
    all-to-all's sends do not.)"""
    cluster = ClusterSpec.build(H100, 8, collective_base_latency_us=0.0)
    seconds = {}
    for dispatcher in ("alltoall", "allgather"):
        cfg = resolve_config(QWEN3, 8, seq=4096, ep=4, force_balance=True, dispatcher=dispatcher)
        seconds[dispatcher] = moe.dispatch_comm_s(QWEN3, cfg, cluster, group_layout(cfg, 8))
    assert seconds["allgather"] == pytest.approx(seconds["alltoall"] * 4 / 8, rel=0.05)


def _dispatch_s(model, gpus, **knobs):
    cfg = resolve_config(model, gpus, seq=4096, force_balance=True, **knobs)
    return moe.dispatch_comm_s(model, cfg, ClusterSpec.build(H100, gpus), group_layout(cfg, 8))


def test_megatron_dispatchers_send_bf16_tokens_under_fp8():
    """Megatron-Core's alltoall and allgather dispatchers move the BF16 hidden states; FP8 is cast inside
    the expert GEMM, after the communication: the EP traffic is the same at fp8 as at bf16."""
    for dispatcher in ("alltoall", "allgather"):
        fp8, bf16 = (_dispatch_s(QWEN3, 8, ep=8, dispatcher=dispatcher, precision=p) for p in ("fp8", "bf16"))
        assert fp8 == pytest.approx(bf16, rel=1e-12) and fp8 > 0


def test_deepep_fp8_dispatch_sends_half_the_bytes_and_combines_in_bf16():
    """DeepSeek-V3's DeepEP dispatch: FP8 tokens (1 B plus a 4 B scale per 128 elements) to the experts,
    BF16 back. At 64K tokens per rank the all-to-all is bandwidth-bound, so dispatch + combine take
    (1 + 4/128 + 2) / (2 + 2) of Megatron's BF16 all-to-all per copy; within a node DeepEP sends one copy per
    target rank (test below), so under bf16 it moves that share of the bytes."""
    big = dict(ep=8, mbs=16)
    per_rank = moe.ranks_per_token(QWEN3.num_experts, QWEN3.experts_per_token, 8) / QWEN3.experts_per_token
    alltoall = _dispatch_s(QWEN3, 8, dispatcher="alltoall", precision="fp8", **big)
    deepep = _dispatch_s(QWEN3, 8, dispatcher="deepep", precision="fp8", **big)
    assert deepep == pytest.approx(alltoall * per_rank * (1 + 4 / 128 + 2) / 4, rel=0.01)
    assert _dispatch_s(QWEN3, 8, dispatcher="deepep", precision="bf16", **big) == pytest.approx(alltoall * per_rank,
                                                                                              rel=0.01)


def test_deepep_within_a_node_sends_a_token_once_per_target_rank():
    """get_dispatch_layout's is_token_in_rank: a token goes once to each rank holding one of its k experts. The
    expected number of such ranks, k chosen uniformly among E experts spread E/ep per rank, checked against every
    choice on a small case, and Qwen3-30B-A3B's top-8 of 128 over EP8: 5.34 ranks where Megatron's alltoall sends 8
    copies."""
    from itertools import combinations

    experts, k, ep = 8, 3, 4
    choices = list(combinations(range(experts), k))
    exact = sum(len({e // (experts // ep) for e in choice}) for choice in choices) / len(choices)
    assert moe.ranks_per_token(experts, k, ep) == pytest.approx(exact, rel=1e-12)
    assert moe.ranks_per_token(128, 8, 8) == pytest.approx(5.339, abs=1e-3)
    assert moe.ranks_per_token(128, 8, 1) == 1.0


def test_only_deepep_sends_a_group_limited_token_once_per_node():
    """DeepSeek-V3 routes each token to at most 4 nodes and DeepEP sends it over the network once per
    node, forwarding over NVLink; Megatron's alltoall (NCCL all_to_all) sends each of the 8 copies."""
    dsv3 = load_model("deepseek-v3")
    knobs = dict(pp=16, ep=64, gbs=1024, precision="bf16")
    alltoall = _dispatch_s(dsv3, 2048, dispatcher="alltoall", **knobs)
    deepep = _dispatch_s(dsv3, 2048, dispatcher="deepep", **knobs)
    assert deepep < 0.6 * alltoall          # 4 of 8 copies cross the network, plus latency


def test_megatron_export_runs_deepep_as_the_flex_dispatcher_and_says_it_sends_bf16():
    from trainplan.tools.engines.megatron import export_megatron, parse_args_text

    dsv3 = load_model("deepseek-v3")
    cfg = resolve_config(dsv3, 2048, pp=16, ep=64, seq=4096, gbs=1024, dispatcher="deepep", precision="fp8")
    result = export_megatron(dsv3, cfg, model_ref="deepseek-v3")
    flags = parse_args_text(result.content)
    assert flags["--moe-token-dispatcher-type"] == "flex" and "--moe-enable-deepep" in flags
    assert any("BF16 tokens through DeepEP" in note for note in result.notes)


@pytest.mark.parametrize("knobs", [dict(ep=1), dict(ep=8, capacity_factor=1.25)])
def test_megatron_export_writes_alltoall_where_the_flex_dispatcher_refuses_the_layout(knobs):
    """Megatron's flex dispatcher asserts tp x ep > 1 and refuses capacity padding: a deepep layout
    without expert or tensor parallelism, or with padded capacity, is exported with alltoall, and says so."""
    from trainplan.tools.engines.megatron import export_megatron, parse_args_text

    cfg = resolve_config(QWEN3, 8, seq=4096, dispatcher="deepep", **knobs)
    result = export_megatron(QWEN3, cfg, model_ref="qwen3-30b-a3b")
    flags = parse_args_text(result.content)
    assert flags["--moe-token-dispatcher-type"] == "alltoall" and "--moe-enable-deepep" not in flags
    assert any("flex dispatcher needs" in note for note in result.notes)


def test_estimate_reports_the_moe_knobs():
    r = trainplan.estimate(model="qwen3-30b-a3b", gpu="h100-sxm-80gb", gpus=16, tp=2, ep=8, etp=1, seq=4096,
                           gbs=64, force_balance=True, dispatcher="alltoall")
    config = r.config
    assert (config.etp, config.dispatcher, config.force_balance, config.capacity_factor) == \
        (1, "alltoall", True, None)
    assert r.time.breakdown["comm/ep"] > 0


def test_bad_dispatcher_is_one_input_error():
    with pytest.raises(InputError, match="dispatcher='nccl' is not one of: alltoall, allgather, deepep"):
        resolve_config(QWEN3, 8, seq=4096, ep=8, dispatcher="nccl")


def test_megatron_export_writes_the_expert_layout_and_dispatch_flags():
    """The knobs reach Megatron's own flags: expert TP, dispatcher, capacity, forced balance."""
    from trainplan.tools.engines.megatron import export_megatron, parse_args_text

    model = load_model("qwen3-235b-a22b")
    cfg = resolve_config(model, 256, tp=2, pp=8, ep=32, etp=1, vpp=4, seq=4096, gbs=2048, dispatcher="allgather",
                         capacity_factor=1.25, force_balance=True)
    flags = parse_args_text(export_megatron(model, cfg, model_ref="qwen3-235b-a22b").content)
    assert flags["--expert-model-parallel-size"] == "32" and flags["--expert-tensor-parallel-size"] == "1"
    assert flags["--moe-token-dispatcher-type"] == "allgather"
    assert flags["--moe-expert-capacity-factor"] == "1.25" and "--moe-pad-expert-input-to-capacity" in flags
    assert "--moe-router-force-load-balancing" in flags


def test_expert_weights_shard_over_ep_times_expert_tp():
    """A rank holds E/ep experts, each split over etp: TP2 EP32 with etp 1 and TP2 EP16 with etp = tp = 2
    both keep 128/32 experts' worth of weights per rank on the same 256 GPUs (dividing the experts by
    ep * tp instead would halve the first)."""
    base = dict(tp=2, pp=8, vpp=4, seq=4096, gbs=2048, zero=0)
    folded = trainplan.estimate(model="qwen3-235b-a22b", gpu="h100", gpus=256, ep=32, etp=1, **base)
    classic = trainplan.estimate(model="qwen3-235b-a22b", gpu="h100", gpus=256, ep=16, **base)
    assert folded.memory_gib.weights == pytest.approx(classic.memory_gib.weights, rel=1e-9)
