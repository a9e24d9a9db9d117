"""The numbers a text mentions, as written, and the values each may stand for (the grounding check's
reading of the agent's text, agent/grounding.py).

The text's numbers are read as follows (signs are ignored):

- plain number, with thousands commas and ``$``: as written (``1,234,567``, ``$1.23M``);
- ``K/M/B/T`` suffixes and the words thousand/million/billion/trillion multiply (``K`` also
  reads as 1024, so ``128K`` matches 131072); scientific ``15.6e12`` and ``2.5 x 10^12``;
- bytes: the same number (a GiB figure may be written with "GB"), the binary/decimal twin at the
  same prefix, and the value in GiB and in GB (``80 GB`` matches 74.51 GiB);
- a time or day unit may be glued (``8.4s``, ``3h``) or follow after a space or hyphen
  (``8.41 s``, ``38.6 days``, ``30-day``); the unit is not part of the mention's span.

Integers of 1000 or more written with trailing zeros (``1,200``) are read at two significant
digits at least (rounded to the hundred here); every other integer is exact.

Not checked (never reported):

- numbers inside identifiers: glued to letters or chained to one by ``-./`` (``llama3-70b``,
  ``H100``, ``a100-sxm-80gb``, ``bf16``, ``1F1B``, ``ZB-H1``, ``v3.1``);
- list markers at the start of a line (``1.``, ``2)``, ``(3)``), a heading's leading section
  number (``## 2. Cost``), footnotes ``[1]``, ``#1``, and small ordinals after
  option/alternative/candidate/choice/step/phase/section/table/figure/appendix (``Option 2``);
- years (1950-2039) after ``et al.``; or after ``(``, in/since/from/until/by or a month and
  followed by punctuation or the end of the line (``Korthikanti et al. 2022``, ``(Meta, 2024)``).

Layout tokens ``TP8``, ``tp=8``, ``PP 16``, ``VPP2``, ``ZeRO-3`` (keys tp, pp, dp, cp, ep, vpp, zero) are read
with their key (NumberMention.layout_key).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

__all__ = ["NumberMention", "GroundingTimeout", "extract_numbers", "scan_numbers", "parse_number", "check_deadline",
           "LAYOUT_KEYS", "MULTIPLIERS", "WEAK_MAX_DIGITS"]

WEAK_MAX_DIGITS = 2
"""A match of a number written with this many significant digits or fewer is weak."""

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
MULTIPLIERS = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12,
         "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_PREFIX_POWER = {"K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5}
LAYOUT_KEYS = ("vpp", "tp", "pp", "dp", "cp", "ep", "zero")
_LAYOUT_BEFORE = re.compile(  # a layout key right before a number: "TP8", "tp=8", "xPP4", "ZeRO-1", '"tp": '
    rf"(?:(?<![A-Za-z0-9_])|(?<=\d[x×]))(?P<key>{'|'.join(LAYOUT_KEYS)})\"?[ \t]*[-=:]?[ \t]*$",
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
        """(value, half-width, kinds) triples this mention may stand for: the module docstring; the kinds are
        the source fields of agent/grounding.py's table."""
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


def parse_number(m: re.Match, text: str = "") -> tuple[float, float, str | None, int]:
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
    scale = 10.0 ** int(m["exp"] or m["exp2"] or 0) * MULTIPLIERS.get(m["mult"] or m["word"] or "", 1.0)
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


def scan_numbers(text: str, deadline: float | None = None) -> list[tuple[re.Match, str, re.Match | None]]:
    """Every number match with its kind ("number", "identifier" or "layout") and layout-key match."""
    out: list[tuple[re.Match, str, re.Match | None]] = []
    identifier_ends: set[int] = set()
    for count, m in enumerate(_NUMBER.finditer(text)):
        check_deadline(deadline, count)
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
    for count, (m, kind, layout) in enumerate(scan_numbers(text, deadline)):
        if kind == "identifier":
            continue
        newline = text.rfind("\n", scanned, m.start())
        if newline >= 0:
            line_start = newline + 1
        scanned = m.start()
        value, quantum, unit, digits = parse_number(m, text)
        if kind == "number" and _is_exempt(text, m, value, line_start):
            continue
        start = layout.start() if layout else m.start()
        key = layout["key"].lower() if layout else None
        mentions.append(NumberMention(text[start:m.end()], start, m.end(), abs(value), quantum, unit, key, digits))
    return mentions


class GroundingTimeout(TimeoutError):
    """The grounding check ran past its deadline (the LLM run's)."""


def check_deadline(deadline: float | None, count: int) -> None:
    """GroundingTimeout when past `deadline` (time.monotonic()); looked at once every 512 counts."""
    if deadline is not None and count % 512 == 0 and time.monotonic() > deadline:
        raise GroundingTimeout("the grounding check ran past the deadline")
