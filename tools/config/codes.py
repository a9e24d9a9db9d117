"""Integer codes of the layout enums, for numpy arrays of many layouts (memory, validity, search).

A member's code is its position in its enum's declaration order (tools/config/contract.py, re-exported by
specs.py): Recompute none is 0, selective 1, full 2, and likewise for Schedule, Precision and Attention
(every kernel it declares). The codes are derived below, never listed by hand.
"""

from __future__ import annotations

from trainplan.tools.core.enums import Attention, Precision, Recompute, Schedule

RECOMPUTE_CODES = {mode: i for i, mode in enumerate(Recompute)}
SCHEDULE_CODES = {sched: i for i, sched in enumerate(Schedule)}
PRECISION_CODES = {prec: i for i, prec in enumerate(Precision)}
ATTENTION_CODES = {kernel: i for i, kernel in enumerate(Attention)}
RECOMPUTE_BY_CODE = {code: mode for mode, code in RECOMPUTE_CODES.items()}
SCHEDULE_BY_CODE = {code: sched for sched, code in SCHEDULE_CODES.items()}
