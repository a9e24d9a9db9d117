"""Communication beside compute: what shows of a collective that runs while kernels compute.

One rule for every overlapped term of the step model (TP, CP, EP, data parallelism, offload copies).
"""

from __future__ import annotations

import numpy as np

# Communication that overlaps compute still slows it: its kernels hold SMs and HBM bandwidth.
# DeepSeek-V3 (report §3.2.2) dedicates 20 of the H800's 132 SMs to communication; NCCL's channels
# likewise run on SMs. Hidden communication costs this share of its own duration.
COMM_COMPUTE_CONTENTION = 20 / 132


def overlapped_s(comm_s, window_s):
    """Exposed seconds of communication that runs beside `window_s` of compute (numpy-friendly).

    The part longer than the window shows in full; the hidden part still costs
    COMM_COMPUTE_CONTENTION of its length, because the communication kernels hold SMs and HBM
    bandwidth that the compute kernels would use.
    """
    hidden = np.minimum(comm_s, window_s)
    return np.maximum(0.0, comm_s - window_s) + COMM_COMPUTE_CONTENTION * hidden
