"""Models and machines: ModelSpec, GPUSpec, ClusterSpec, the HF config reader, the catalogs and counting. Imports core."""
