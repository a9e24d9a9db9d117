"""The cost model: compute, collectives, memory, activations, the pipeline simulator, one step, cost. Imports core,
hardware and config."""
