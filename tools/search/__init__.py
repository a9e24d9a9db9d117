"""The layout search: enumerate, score (numpy), rank, explain, evidence, limits. Imports core up to perf."""
