"""Communication beside compute: what shows of a collective that runs while kernels compute.

One rule for every overlapped term of the step model (TP, CP, EP, data parallelism, offload copies).
"""

from __future__ import annotations

import functools

import numpy as np

from trainplan.tools.core import assumptions
from trainplan.tools.hardware.catalog import load_gpu

# Communication that overlaps compute still slows it: its kernels hold SMs and HBM bandwidth.
# DeepSeek-V3 (report §3.2.2) dedicates 20 of the H800's 132 SMs to communication; NCCL's channels
# likewise run on SMs. Hidden communication costs this share of its own duration (the SM count read
# from tools/hardware/catalog/gpus/h800-sxm-80gb.json).
COMM_COMPUTE_CONTENTION = assumptions.COMMUNICATION_SMS.value / load_gpu("h800-sxm-80gb").sm_count


def overlapped_s(comm_s, window_s):
    """Exposed seconds of communication that runs beside `window_s` of compute (numpy-friendly).

    The part longer than the window shows in full; the hidden part still costs
    COMM_COMPUTE_CONTENTION of its length, because the communication kernels hold SMs and HBM
    bandwidth that the compute kernels would use.
    """
    hidden = np.minimum(comm_s, window_s)
    return np.maximum(0.0, comm_s - window_s) + COMM_COMPUTE_CONTENTION * hidden


def side_by_side_s(streams, window_s):
    """Exposed seconds of collectives on separate streams and links (numpy-friendly) that all run beside
    the same `window_s` of compute: the longest stream shows past the window, and every stream's hidden
    part costs COMM_COMPUTE_CONTENTION of its length. One stream gives overlapped_s.

    Hybrid sharding issues its cross-replica all-reduce on a stream of its own, beside the reduce-scatters
    and all-gathers inside the shard group: PyTorch FSDP's _all_reduce_stream (torch/distributed/fsdp/
    _runtime_utils.py _reduce_grad, HYBRID_SHARD) and FSDP2's all_reduce_stream (_fully_shard/
    _fsdp_collectives.py foreach_reduce); the two run on different links (NVLink inside a node, the NICs
    across nodes)."""
    streams = [np.asarray(s, dtype=float) for s in streams]
    longest = functools.reduce(np.maximum, streams)
    hidden = sum(np.minimum(s, window_s) for s in streams)
    return np.maximum(0.0, longest - window_s) + COMM_COMPUTE_CONTENTION * hidden
