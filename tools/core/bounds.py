"""Bounds on the numbers a caller gives, shared by the layers that check them (specs, contract, cost)."""

from __future__ import annotations

MIN_GOODPUT = 0.01
"""Smallest goodput a job may give (1% of wall-clock time training; Llama 3 reports more than 90%)."""
MAX_PRICE_PER_GPU_HOUR = 1e4
"""Most dollars per GPU-hour a job may give: a thousand times any catalog price; beyond it a price is a
typo, and dollars computed from it could overflow a float."""
