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
``within 30 days`` a day count). The text's numbers are read as follows (signs are ignored):

- plain number, with thousands commas and ``$``: as written (``1,234,567``, ``$1.23M``);
- ``K/M/B/T`` suffixes and the words thousand/million/billion/trillion multiply (``K`` also
  reads as 1024, so ``128K`` matches 131072); scientific ``15.6e12`` and ``2.5 x 10^12``;
- bytes: the same number (a GiB figure may be written with "GB"), the binary/decimal twin at the
  same prefix, and the value in GiB and in GB (``80 GB`` matches 74.51 GiB);
- a time or day unit may be glued (``8.4s``, ``3h``) or follow after a space or hyphen
  (``8.41 s``, ``38.6 days``, ``30-day``); the unit is not part of the mention's span.

Integers of 1000 or more written with trailing zeros (``1,200``) are read at two significant
digits at least (rounded to the hundred here); every other integer is exact.

Each match is graded: a number written with 1-2 significant digits (``10 GiB``, ``8%``,
``8 days``, ``2``) matches too easily, so it is reported apart as *weak*; layout tokens (below)
are matched by key and are never weak. A match found only in the user's request (not in a tool
result) is marked ``origin="request"``. An empty text is not grounded.

Not checked (never reported):

- numbers inside identifiers: glued to letters or chained to one by ``-./`` (``llama3-70b``,
  ``H100``, ``a100-sxm-80gb``, ``bf16``, ``1F1B``, ``ZB-H1``, ``v3.1``);
- list markers at the start of a line (``1.``, ``2)``, ``(3)``), a heading's leading section
  number (``## 2. Cost``), footnotes ``[1]``, ``#1``, and small ordinals after
  option/alternative/candidate/choice/step/phase/section/table/figure/appendix (``Option 2``);
- years (1950-2039) after ``et al.``; or after ``(``, in/since/from/until/by or a month and
  followed by punctuation or the end of the line (``Korthikanti et al. 2022``, ``(Meta, 2024)``).

Layout tokens are checked against their own key: ``TP8``, ``tp=8``, ``PP 16``, ``VPP2``,
``ZeRO-3`` (keys tp, pp, dp, cp, ep, vpp, zero) are grounded only by a source value under that key
(``"tp": 8`` in a tool result, ``tp=8`` or ``TP8`` in the request).

`mark_ungrounded` writes `` [ungrounded]`` after each ungrounded number, but never inside code:
after an inline code span's closing backtick, and on a line of its own after a fenced block.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from trainplan.tools.core import safe_json
from trainplan.tools.core.errors import InputError

__all__ = ["NumberMention", "GroundedNumber", "GroundingReport", "GroundingTimeout", "RequestText", "extract_numbers",
           "check_grounding", "mark_ungrounded", "UNGROUNDED_MARK", "WEAK_MAX_DIGITS"]

UNGROUNDED_MARK = "[ungrounded]"
WEAK_MAX_DIGITS = 2
"""A match of a number written with this many significant digits or fewer is weak."""


class RequestText(str):
    """The user's request as a grounding source: its matches are marked as from the request."""

_MANTISSA = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+"
_BYTE_UNIT = r"[KMGTP]i?B(?:/s)?|kB(?:/s)?"
_GLUED_UNIT = r"s|sec|secs|h|hr|hrs|d|min|mins|[GTPE]?FLOP(?:s|S)?(?:/s)?|[GTP]FLOPS"
_NUMBER = re.compile(
    rf"""
    (?P<cur>\$\s?)?
    (?P<num>{_MANTISSA})
    (?: [eE](?P<exp>[+-]?\d+) | \s?[x×*·]\s?10\^(?P<exp2>[+-]?\d+) )?
    (?:
        \s?(?P<bytes>{_BYTE_UNIT})(?![A-Za-z0-9_])
      | \s?(?P<pct>%|percent\b)
      | \s?(?P<ms>ms)(?![A-Za-z0-9_])
      | \s(?P<word>thousand|million|billion|trillion)\b
      | \s?(?P<mult>[kKMBT])(?![A-Za-z0-9_])
    )?
    (?P<glued>[x×](?![a-z])|(?:{_GLUED_UNIT})(?![A-Za-z0-9_]))?
    """,
    re.VERBOSE,
)
_MULT = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12,
         "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_PREFIX_POWER = {"K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_LAYOUT_KEYS = ("vpp", "tp", "pp", "dp", "cp", "ep", "zero")
_LAYOUT_BEFORE = re.compile(  # a layout key right before a number: "TP8", "tp=8", "xPP4", "ZeRO-1", '"tp": '
    rf"(?:(?<![A-Za-z0-9_])|(?<=\d[x×]))(?P<key>{'|'.join(_LAYOUT_KEYS)})\"?[ \t]*[-=:]?[ \t]*$",
    re.IGNORECASE)
_ORDINAL_WORDS = {"option", "alternative", "candidate", "choice", "step", "phase",
                  "section", "table", "figure", "fig", "appendix"}
_YEAR_BEFORE = re.compile(
    r"(?:\([^()]*|\b(?:in|since|from|until|by|jan(?:uary)?|feb(?:ruary)?|march|mar|april|apr|may|june?|july?"
    r"|aug(?:ust)?|sep(?:tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?)\s*$", re.IGNORECASE)
_GiB, _GB = 2.0**30, 1e9
_UNIT_AFTER = re.compile(  # a unit word after the number (not part of its span)
    r"[ \t-]?(?:(?P<days>days?)|(?P<hours>GPU[- ]hours?|hours?|hrs?)|(?P<secs>seconds?|secs?|s)|(?P<mins>minutes?|mins?))"
    r"(?![A-Za-z0-9_])", re.IGNORECASE)
_GLUED_KIND = {"s": "s", "sec": "s", "secs": "s", "h": "h", "hr": "h", "hrs": "h", "d": "days", "min": "min",
               "mins": "min"}
Kinds = frozenset[str] | None  # source field kinds a reading may match; None: any


@dataclass(frozen=True)
class NumberMention:
    """One number in a text, as written."""

    text: str  # the span as written, e.g. "$1.23M", "41%", "80 GB", "TP8"
    start: int  # offsets into the checked text
    end: int
    value: float  # the number with multiplier/exponent applied, unsigned: "1.5M" -> 1.5e6, "41%" -> 41
    quantum: float  # the place value of the last written digit, in `value`'s units: "1.5M" -> 1e5
    unit: str | None = None  # "%", a byte unit ("GiB", "GB/s"), "$", "ms", "s", "min", "h" or "days"; None: plain
    layout_key: str | None = None  # "tp" for "TP8" or "tp=8": only a source's tp values ground it
    digits: int = 3  # significant digits as written ("10" -> 1, "41.2" -> 3, "0.41" -> 2)

    @property
    def weak(self) -> bool:
        """Written with so few digits that an unrelated source number may match it."""
        return self.layout_key is None and self.digits <= WEAK_MAX_DIGITS

    def readings(self) -> list[tuple[float, float, Kinds]]:
        """(value, half-width, kinds) triples this mention may stand for; see the module docstring."""
        v, half = self.value, self.quantum / 2
        unit = self.unit
        if unit is None:
            out: list[tuple[float, float, Kinds]] = [(v, half, None)]
            if re.search(r"\d\s?[kK]$", self.text):
                out.append((v * 1.024, half * 1.024, None))  # 128K = 131072
            return out
        if unit == "%":
            return [(v / 100, half / 100, _FRACTION), (v, half, _PERCENT)]
        if unit == "$":
            return [(v, half, _COST)]
        if unit == "days":
            return [(v, half, _DAYS)]
        if unit == "h":
            return [(v, half, _HOURS), (v / 24, half / 24, _DAYS)]
        seconds = {"ms": 1e-3, "s": 1.0, "min": 60.0}.get(unit)
        if seconds is not None:
            return [(v * seconds, half * seconds, _TIME), (v * seconds * 1e3, half * seconds * 1e3, _TIME_MS)]
        # a byte unit: what was written may mean decimal or binary bytes ("GB" is often GiB); "GiB" is binary
        kinds = _BANDWIDTH if unit.endswith("/s") else _MEMORY
        power = _PREFIX_POWER[unit[0]]
        meanings = {1024.0**power} if "i" in unit else {1000.0**power, 1024.0**power}
        out = [(v, half, kinds)]
        for unit_bytes in meanings:
            for source_unit_bytes in (1024.0**power, 1000.0**power, _GiB, _GB):
                factor = unit_bytes / source_unit_bytes
                out.append((v * factor, half * factor, kinds))
        return out


_MEMORY, _BANDWIDTH, _COST = frozenset({"memory"}), frozenset({"bandwidth"}), frozenset({"cost"})
_FRACTION, _PERCENT, _DAYS = frozenset({"fraction"}), frozenset({"percent"}), frozenset({"days"})
_HOURS, _TIME, _TIME_MS = frozenset({"hours"}), frozenset({"time"}), frozenset({"time_ms"})


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


def _parse(m: re.Match, text: str = "") -> tuple[float, float, str | None, int]:
    """(value, quantum, unit, significant digits) of a regex match in `text`."""
    num = m["num"].replace(",", "")
    decimals = len(num.split(".")[1]) if "." in num else 0
    value = float(num)
    quantum = 10.0**-decimals
    digits = num.lstrip("0")
    if not decimals and value >= 1000 and not (m["mult"] or m["word"] or m["exp"] or m["exp2"]):
        trailing = len(digits) - len(digits.rstrip("0"))
        quantum = 10.0 ** min(trailing, len(digits) - 2)
    mantissa = num.replace(".", "").lstrip("0")
    significant = len(mantissa) if decimals else len(mantissa.rstrip("0"))
    scale = 10.0 ** int(m["exp"] or m["exp2"] or 0) * _MULT.get(m["mult"] or m["word"] or "", 1.0)
    unit = "%" if m["pct"] else m["bytes"] or m["ms"] or ("$" if m["cur"] else None)
    if unit is None:
        unit = _GLUED_KIND.get((m["glued"] or "").lower()) or _unit_after(text, m.end())
    return value * scale, quantum * scale, unit, max(1, significant)


def _unit_after(text: str, end: int) -> str | None:
    """The time or day unit written right after a number ("8.41 s", "38.6 days", "30-day"), if any."""
    after = _UNIT_AFTER.match(text, end)
    if not after:
        return None
    return "days" if after["days"] else "h" if after["hours"] else "s" if after["secs"] else "min"


_ORDINAL_BEFORE = re.compile(r"(?:^|[^A-Za-z])(?:" + "|".join(sorted(_ORDINAL_WORDS)) + r")\.?\s{1,4}$", re.IGNORECASE)
_WINDOW = 200
"""Characters before a number that the exemptions look at: bounded, so that the check is linear in the text."""


def _is_exempt(text: str, m: re.Match, value: float, line_start: int | None = None) -> bool:
    """List markers, heading numbers, footnotes, ordinals and years (module docstring). `line_start`: where
    the number's line starts (found when not given)."""
    start, end = m.start(), m.end()
    if line_start is None:
        line_start = text.rfind("\n", max(0, start - _WINDOW - 1), start) + 1
    whole_line = line_start >= start - _WINDOW  # the line's start is within the window
    before = text[max(line_start, start - _WINDOW):start]
    after = text[end:end + 2]
    is_int = re.fullmatch(r"\d+", m.group(0)) is not None
    if whole_line and (is_int or re.fullmatch(r"\d+(\.\d+)*", m.group(0))):
        if re.fullmatch(r"\s*(?:[-*+]\s+)?\(?", before) and re.match(r"[.)](?:\s|$)", after + " "):
            return True  # "1. ", "2) ", "(3) "
        if re.fullmatch(r"\s*#{1,6}\s*", before):
            return True  # "## 2. Cost"
    if not is_int:
        return False
    prev = text[start - 1] if start else ""
    if prev == "#" or (prev == "[" and text[end:end + 1] == "]"):
        return True
    if value <= 20 and _ORDINAL_BEFORE.search(before[-20:]):
        return True
    if 1950 <= value <= 2039 and (re.search(r"et al\.,?\s*$", before) or (
            re.match(r"[ \t]*(?:[,.;:)\]]|\n|$)", text[end:end + 3]) and _YEAR_BEFORE.search(before))):
        return True
    return False


def _layout_before(text: str, start: int) -> re.Match | None:
    """The layout key written right before position `start`, if any."""
    return _LAYOUT_BEFORE.search(text, max(0, start - 12), start)


def _scan(text: str, deadline: float | None = None) -> list[tuple[re.Match, str, re.Match | None]]:
    """Every number match with its kind ("number", "identifier" or "layout") and layout-key match."""
    out: list[tuple[re.Match, str, re.Match | None]] = []
    identifier_ends: set[int] = set()
    for count, m in enumerate(_NUMBER.finditer(text)):
        _check_deadline(deadline, count)
        start, end = m.start(), m.end()
        prev = text[start - 1] if start else ""
        prev2 = text[start - 2] if start > 1 else ""
        nxt = text[end] if end < len(text) else ""
        layout = _layout_before(text, start) if not m["cur"] else None
        kind = "layout" if layout else "number"
        if layout:
            pass
        elif prev.isalpha() or prev == "_" or prev.isdigit():
            if not (prev in "x×" and prev2.isdigit()):  # "8x8x16": x separates numbers
                kind = "identifier"  # "H100", "bf16"
        elif prev in "-./" and (prev2.isalpha() or prev2 == "_" or (start - 1) in identifier_ends):
            kind = "identifier"  # "llama3-70b", "a100-sxm-80gb"
        if not m["glued"] and (nxt.isalnum() or nxt == "_") and not (layout and nxt in "x×"):
            kind = "identifier"  # "1f1b", "3rd", "2D"
        if nxt == "." and text[end + 1:end + 2].isdigit():
            kind = "identifier"  # version numbers "1.2.3"
        if kind == "identifier":
            identifier_ends.add(end)
        out.append((m, kind, layout))
    return out


def extract_numbers(text: str, deadline: float | None = None) -> list[NumberMention]:
    """The numbers in `text` that must be grounded, in order (exemptions: module docstring); linear in the
    text. Past `deadline` (time.monotonic()), GroundingTimeout."""
    mentions = []
    line_start, scanned = 0, 0
    for count, (m, kind, layout) in enumerate(_scan(text, deadline)):
        if kind == "identifier":
            continue
        newline = text.rfind("\n", scanned, m.start())
        if newline >= 0:
            line_start = newline + 1
        scanned = m.start()
        value, quantum, unit, digits = _parse(m, text)
        if kind == "number" and _is_exempt(text, m, value, line_start):
            continue
        start = layout.start() if layout else m.start()
        key = layout["key"].lower() if layout else None
        mentions.append(NumberMention(text[start:m.end()], start, m.end(), abs(value), quantum, unit, key, digits))
    return mentions


class GroundingTimeout(TimeoutError):
    """The grounding check ran past its deadline (the LLM run's)."""


def _check_deadline(deadline: float | None, count: int) -> None:
    if deadline is not None and count % 512 == 0 and time.monotonic() > deadline:
        raise GroundingTimeout("the grounding check ran past the deadline")


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
                if key in _LAYOUT_KEYS:
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
        for m, _, layout in _scan(text, self.deadline):
            value, quantum, unit, digits = _parse(m, text)
            mention = NumberMention(m.group(0), m.start(), m.end(), abs(value), quantum, unit, None, digits)
            for reading, _, kinds in mention.readings():
                for kind in kinds or (None,):
                    self._put(origin, kind, reading)
            raw = float(m["num"].replace(",", ""))
            self._put(origin, None, raw)
            suffix = text[m.end():m.end() + 1].upper()
            if suffix in _MULT and not (m["mult"] or m["bytes"]):
                self._put(origin, None, raw * _MULT[suffix])  # "llama3-405b" -> 405e9
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
        _check_deadline(deadline, count)
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
