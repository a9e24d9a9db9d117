"""trainplan.tools: deterministic calculators. No LLM, no network, no printing."""
