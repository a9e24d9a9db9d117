"""Integer codes of the layout enums, for numpy arrays of many layouts (memory, validity, search).

Codes follow the enums' declaration order in specs.py:
    recompute  0 none, 1 selective, 2 full
    schedule   0 gpipe, 1 1f1b, 2 interleaved, 3 zb-h1, 4 dualpipe
    precision  0 bf16, 1 fp8
    attention  0 flash, 1 eager
"""

from __future__ import annotations

from .specs import Attention, Precision, Recompute, Schedule

RECOMPUTE_CODES = {mode: i for i, mode in enumerate(Recompute)}
SCHEDULE_CODES = {sched: i for i, sched in enumerate(Schedule)}
PRECISION_CODES = {prec: i for i, prec in enumerate(Precision)}
ATTENTION_CODES = {kernel: i for i, kernel in enumerate(Attention)}
RECOMPUTE_BY_CODE = {code: mode for mode, code in RECOMPUTE_CODES.items()}
SCHEDULE_BY_CODE = {code: sched for sched, code in SCHEDULE_CODES.items()}
