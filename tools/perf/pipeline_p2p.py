"""Pipeline-parallel transfers: the time of one hop between adjacent stages, and the blocking transfers of
engines that run them before their compute (DeepSpeed's pipeline engine). step.py and the search both use them.
"""

from __future__ import annotations

import numpy as np

from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.hardware.specs import ClusterSpec, ModelSpec
from trainplan.tools.perf.collectives import collective_time_s


def p2p_s(model: ModelSpec, cfg: ParallelConfig, groups: dict, cluster: ClusterSpec, mbs=None):
    """Seconds of one pipeline hop: a micro-batch's activation (or its gradient), 2 b s/cp h bytes,
    split over tp with sequence parallelism; 0 without pipeline parallelism. b is cfg.mbs, or `mbs`
    (numpy-friendly: the search passes a column)."""
    mbs = cfg.mbs if mbs is None else mbs
    if cfg.pp == 1:
        return np.zeros_like(np.asarray(mbs, dtype=float))
    p2p_bytes = 2.0 * mbs * cfg.seq / cfg.cp * model.hidden_size / (cfg.tp if cfg.sequence_parallel else 1)
    return collective_time_s("p2p", p2p_bytes, groups["pp"], cluster)


def blocking_p2p_s(hop_s, pp: int):
    """(forward, backward) seconds each stage spends in blocking pipeline transfers per micro-batch,
    numpy-friendly in hop_s (broadcast against the last axis, the pp stages).

    DeepSpeed's pipeline engine (deepspeed/runtime/pipe/schedule.py TrainSchedule) runs each step's
    sends and receives, blocking, before its compute: a forward step receives the activation from the
    stage before and sends it the previous micro-batch's gradient (two transfers on every stage but the
    first); a backward step sends the previous activation to the stage after and receives the gradient
    from it (two on every stage but the last). The transfers occupy the rank, so they add to its time.
    """
    stage = np.arange(pp)
    hop = np.asarray(hop_s, dtype=float)[..., None]
    return 2 * hop * (stage > 0), 2 * hop * (stage < pp - 1)
