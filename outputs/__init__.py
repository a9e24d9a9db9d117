"""trainplan.outputs: the shipped prompt (prompt-distributed-training-planner.md), rendered from prompts/ by
`trainplan prompt` and installed as package data so that an installed trainplan can print and check it."""
