"""trainplan.evals: published training runs as reference cases, and the runner that scores the tools.

Dataset -> Case -> Evaluator -> Report (after pydantic_evals):
- runs/*.yaml: one published run per file; every figure with its source, every assumption marked
  (dataset.py);
- cases.py: the evaluators for the three kinds: prediction (published layout -> predicted figures),
  planning (request only -> the planner's layout, scored), claims (the lesson's arithmetic);
- runner.py: runs the cases and summarises (MAPE per quantity, held-out MAPE, pass counts);
- report.py: the Markdown report with a text plot of predicted against published.

`trainplan eval` is the command line; benchmarks/bench_accuracy.py prints the accuracy table.

This package imports nothing: tools/search/eval_summary.py reads summary.json as its package data, and a lower
layer must not load the evals (which call the planner) by doing so.
"""
