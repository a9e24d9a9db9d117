"""The grounding check: every number in the agent's final text must come from a source.

Sources are this conversation's tool results (nested dicts and lists, or their JSON text) and the
user's request (a `RequestText`). A number in the text is *grounded* when one of its readings
matches a source number at the precision it was written with (``41.2%`` matches 0.41237;
``$1.23M`` matches 1,234,567), and the unit it was written with fits the source's field:

| written with                         | grounded only by                                          |
|--------------------------------------|-----------------------------------------------------------|
| a byte unit (GiB, GB, MB, ...)       | memory fields (``memory_gib.*``, ``*_gib``); GB/s: bandwidths |
| ``$``                                | cost fields (``*_usd``, ``price``)                         |
| ``%`` / ``percent``                  | fractions (``mfu``, ``mfu_full_attention``, ``hfu``, ``goodput``, ``*_fraction``, ``*share*``) as the percent of them, or percentages (``*_pct``) |
| days                                 | day fields (``days``, ``*_days``)                          |
| s, sec, seconds, ms, min             | time fields (``*_s``, ``*_ms``, ``time.breakdown.*``)      |
| hours, GPU-hours                     | hour fields (``*_hours``), or days x 24                    |
| nothing (a plain number)             | any source number                                          |

A field's kind comes from its key path; a number inside a source string (a tool's note, the
request) takes the kind of the unit written after it there (``$2/GPU-hour`` is a cost,
``within 30 days`` a day count). How the text's numbers are read, and which are not checked, is
agent/number_mentions.py.

Each match is graded: a number written with 1-2 significant digits (``10 GiB``, ``8%``,
``8 days``, ``2``) matches too easily, so it is reported apart as *weak*; layout tokens (below)
are matched by key and are never weak. A match found only in the user's request (not in a tool
result) is marked ``origin="request"``. An empty text is not grounded.

Layout tokens (``TP8``, ``tp=8``, ``ZeRO-3``) are checked against their own key: they are grounded only by a
source value under that key (``"tp": 8`` in a tool result, ``tp=8`` or ``TP8`` in the request).

`mark_ungrounded` writes `` [ungrounded]`` after each ungrounded number, but never inside code:
after an inline code span's closing backtick, and on a line of its own after a fenced block.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any

from trainplan.agent.number_mentions import (LAYOUT_KEYS, MULTIPLIERS, GroundingTimeout, NumberMention, check_deadline,
                                             extract_numbers, parse_number, scan_numbers)
from trainplan.tools.core import safe_json
from trainplan.tools.core.errors import InputError

__all__ = ["GroundedNumber", "GroundingReport", "GroundingTimeout", "RequestText", "check_grounding", "mark_ungrounded",
           "UNGROUNDED_MARK"]

UNGROUNDED_MARK = "[ungrounded]"


class RequestText(str):
    """The user's request as a grounding source: its matches are marked as from the request."""


def field_kind(path: tuple[str, ...]) -> str | None:
    """The kind of a source number from its key path (module docstring), or None for a plain count."""
    keys = [str(k).lower() for k in path]
    key = keys[-1] if keys else ""
    if any(k == "memory_gib" or k.endswith("_gib") or k.endswith("_gb") for k in keys):
        return "memory"
    if "bw" in key.split("_") or "bandwidth" in key or key.endswith("_gb_s"):
        return "bandwidth"
    if key.endswith("_usd") or key.startswith("price") or key.startswith("cost"):
        return "cost"
    if key.endswith("_pct") or "percent" in key:
        return "percent"
    if key in ("mfu", "hfu", "goodput", "mfu_full_attention") or key.endswith("_fraction") or "share" in key:
        return "fraction"
    if key == "days" or key.endswith("_days"):
        return "days"
    if key.endswith("_hours") or key == "hours":
        return "hours"
    if key.endswith("_ms"):
        return "time_ms"
    if (key.endswith("_s") and "per_s" not in key) or key == "seconds" or ("time" in keys and "breakdown" in keys):
        return "time"
    return None


@dataclass(frozen=True)
class GroundedNumber:
    """A mention and the source number that grounds it."""

    mention: NumberMention
    source_value: float
    origin: str = "tool"  # "tool": a tool result; "request": only the user's request has it
    kind: str | None = None  # the source field's kind (field_kind), None for a plain count


@dataclass
class GroundingReport:
    """The result of check_grounding."""

    grounded: list[GroundedNumber] = field(default_factory=list)  # strong matches
    ungrounded: list[NumberMention] = field(default_factory=list)
    weak: list[GroundedNumber] = field(default_factory=list)  # matches of 1-2 significant digits
    empty: bool = False  # the text was empty: nothing was said, so nothing is grounded

    @property
    def checked(self) -> int:
        return len(self.grounded) + len(self.weak) + len(self.ungrounded)

    @property
    def share_grounded(self) -> float | None:
        """Grounded mentions (weak included) / all checked mentions; None when there was none to check."""
        return (len(self.grounded) + len(self.weak)) / self.checked if self.checked else None

    @property
    def from_request(self) -> list[GroundedNumber]:
        """Matches found only in the user's request."""
        return [g for g in (*self.grounded, *self.weak) if g.origin == "request"]

    @property
    def ok(self) -> bool:
        """True when the text is not empty and no number in it is ungrounded."""
        return not self.empty and not self.ungrounded



_ORIGINS = ("tool", "request")


@dataclass
class _Sources:
    """Sorted source numbers by (origin, field kind), and the values under each layout key by origin."""

    values: dict[tuple[str, str | None], list[float]] = field(default_factory=dict)
    layout: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    deadline: float | None = None  # time.monotonic() past which the check stops (GroundingTimeout)

    def add(self, obj: Any, path: tuple[str, ...] = (), origin: str = "tool") -> None:
        """Add every number in a JSON-like object; strings are scanned generously (JSON text is parsed)."""
        if isinstance(obj, RequestText):
            self._add_text(obj, "request")
        elif isinstance(obj, bool) or obj is None:
            return
        elif isinstance(obj, (int, float)):
            if math.isfinite(obj):
                self._put(origin, field_kind(path), abs(float(obj)))
                key = path[-1].lower() if path else ""
                if key in LAYOUT_KEYS:
                    self.layout.setdefault((origin, key), []).append(abs(float(obj)))
        elif isinstance(obj, str):
            if obj.lstrip().startswith(("{", "[")):
                try:
                    self.add(safe_json.loads(obj, "a tool result", safe_json.TRANSCRIPT), path, origin)
                    return
                except InputError:
                    pass
            self._add_text(obj, origin)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                self.add(str(k), (), origin)
                self.add(v, (*path, str(k)), origin)
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                self.add(item, path, origin)

    def _put(self, origin: str, kind: str | None, value: float) -> None:
        self.values.setdefault((origin, kind), []).append(value)

    def _add_text(self, text: str, origin: str) -> None:
        """Numbers in prose take the kind of the unit written with them ("$2/GPU-hour" is a cost)."""
        for m, _, layout in scan_numbers(text, self.deadline):
            value, quantum, unit, digits = parse_number(m, text)
            mention = NumberMention(m.group(0), m.start(), m.end(), abs(value), quantum, unit, None, digits)
            for reading, _, kinds in mention.readings():
                for kind in kinds or (None,):
                    self._put(origin, kind, reading)
            raw = float(m["num"].replace(",", ""))
            self._put(origin, None, raw)
            suffix = text[m.end():m.end() + 1].upper()
            if suffix in MULTIPLIERS and not (m["mult"] or m["bytes"]):
                self._put(origin, None, raw * MULTIPLIERS[suffix])  # "llama3-405b" -> 405e9
            if layout:
                self.layout.setdefault((origin, layout["key"].lower()), []).append(raw)

    def sort(self) -> None:
        for values in (*self.values.values(), *self.layout.values()):
            values.sort()

    def find(self, mention: NumberMention) -> GroundedNumber | None:
        """The first source number within one of the mention's readings (tool results first), or None."""
        for origin in _ORIGINS:
            for centre, half, kinds in mention.readings():
                tol = half * (1 + 1e-9) + 1e-12 * centre
                if mention.layout_key:
                    pools = [(None, self.layout.get((origin, mention.layout_key), []))]
                else:
                    pools = [(kind, values) for (o, kind), values in self.values.items()
                             if o == origin and (kinds is None or kind in kinds)]
                for kind, values in pools:
                    i = bisect.bisect_left(values, centre - tol)
                    if i < len(values) and values[i] <= centre + tol:
                        return GroundedNumber(mention, values[i], origin, kind)
        return None


def check_grounding(text: str, sources: list[Any], deadline: float | None = None) -> GroundingReport:
    """Check every number in `text` against the numbers in `sources` (tool results; the request as a
    RequestText). Linear in the text and the sources; past `deadline` (time.monotonic()) it raises
    GroundingTimeout."""
    found = _Sources(deadline=deadline)
    for source in sources:
        found.add(source)
    found.sort()
    report = GroundingReport(empty=not text.strip())
    for count, mention in enumerate(extract_numbers(text, deadline)):
        check_deadline(deadline, count)
        match = found.find(mention)
        if match is None:
            report.ungrounded.append(mention)
        elif mention.weak:
            report.weak.append(match)
        else:
            report.grounded.append(match)
    return report


_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


def _code_spans(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, fenced) of each code block and inline code span in Markdown `text`, in order."""
    spans: list[tuple[int, int, bool]] = []
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        opening = fences[i]
        j = i + 1
        while j < len(fences) and fences[j].group(1) != opening.group(1):
            j += 1
        if j < len(fences):
            end_of_line = text.find("\n", fences[j].end())
            spans.append((opening.start(), len(text) if end_of_line < 0 else end_of_line, True))
        else:
            spans.append((opening.start(), len(text), True))
        i = j + 1
    outside = 0
    for start, end, _ in [*spans, (len(text), len(text), True)]:
        for m in _INLINE_CODE.finditer(text, outside, start):
            spans.append((m.start(), m.end(), False))
        outside = end
    return sorted(spans)


def mark_ungrounded(text: str, mentions: list[NumberMention]) -> str:
    """`text` with " [ungrounded]" after each of `mentions` (mentions of this same text); never inside
    code: after an inline code span, or on a line of its own after a fenced block, naming the numbers.
    One pass: linear in the text and the mentions."""
    inserts: dict[int, list[NumberMention]] = {}
    spans = _code_spans(text)
    starts = [s[0] for s in spans]
    fenced_ends = {s[1] for s in spans if s[2]}
    for mention in mentions:
        k = bisect.bisect_right(starts, mention.start) - 1
        span = spans[k] if k >= 0 and spans[k][0] <= mention.start < spans[k][1] else None
        inserts.setdefault(mention.end if span is None else span[1], []).append(mention)
    pieces, done = [], 0
    for position in sorted(inserts):
        pieces.append(text[done:position])
        if position in fenced_ends:
            names = ", ".join(m.text for m in inserts[position])
            pieces.append(f"\n{UNGROUNDED_MARK} in the block above: {names}")
        else:
            pieces.append(f" {UNGROUNDED_MARK}")
        done = position
    pieces.append(text[done:])
    return "".join(pieces)
