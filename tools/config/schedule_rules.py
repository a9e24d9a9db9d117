"""What a pipeline schedule admits: the micro-batch rules of the interleaved and DualPipe schedules and the
size the simulator runs (tools/perf/pipeline.py simulates; tools/config/validity.py checks layouts with these).
"""

from __future__ import annotations

SIMULATE_MAX_UNITS = 2**20
"""Largest pp x microbatches x vpp simulated: about 2 million ops, ~2 s and ~0.5 GB. The simulation is
linear in ops (~1 us each in Python), so pp=256 x 65,536 micro-batches would take over a minute. A
real step has far fewer (Llama 3 405B: 16 x 16 x 8 = 2,048); the bubble depends on m/p, so a smaller
m with the same ratio shows the same fraction."""
TIMELINE_MAX_UNITS = 2**17
"""Largest pp x microbatches x vpp whose timeline is recorded: 2 events per unit, 262,144 events."""


def interleaved_batch_ok(pp, num_microbatches):
    """Megatron's interleaved schedule runs micro-batches in groups of pp (numpy-friendly)."""
    return num_microbatches % pp == 0


def dualpipe_batch_ok(pp, num_microbatches):
    """DualPipe.step asserts an even pp, an even number of micro-batches and at least 2 pp of them
    (numpy-friendly)."""
    return (pp >= 2) & (pp % 2 == 0) & (num_microbatches % 2 == 0) & (num_microbatches >= 2 * pp)


def simulated_units(pp, num_microbatches, vpp):
    """pp x microbatches x vpp: the simulation's size, bounded by SIMULATE_MAX_UNITS (numpy-friendly)."""
    return pp * num_microbatches * vpp
