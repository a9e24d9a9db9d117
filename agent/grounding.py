"""The grounding check: every number in the agent's final text must come from a source.

Sources are this conversation's tool results (nested dicts and lists) and the user's request.
A number in the text is *grounded* when one of its readings matches a source number at the
precision it was written with: a number quoted with its last digit in the 10^-d place matches a
source value that rounds to it (``41.2%`` matches 0.41237; ``$1.23M`` matches 1,234,567).

Readings of a mention (signs are ignored; every comparison is on absolute values):

- plain number, with thousands commas and ``$``: as written (``1,234,567``, ``$1.23M``);
- ``K/M/B/T`` suffixes and the words thousand/million/billion/trillion multiply (``K`` also
  reads as 1024, so ``128K`` matches 131072); scientific ``15.6e12`` and ``2.5 x 10^12``;
- ``%`` / ``percent``: the percent figure or the fraction (``41%`` matches 41 or 0.41);
- bytes (``KB MB GB TB`` and ``KiB MiB GiB TiB``, also ``/s``): the same number (a GiB figure
  may be written with "GB"), the binary/decimal twin at the same prefix, and the value in GiB and
  in GB (``80 GB`` matches 74.51 GiB);
- ``ms``: the number, or seconds. Other time units are plain numbers.

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

Layout tokens are checked against their own key: ``TP8``, ``tp=8``, ``PP 16``, ``VPP2``,
``ZeRO-3`` (keys tp, pp, dp, cp, ep, vpp, zero) are grounded only by a source value under that key
(``"tp": 8`` in a tool result, ``tp=8`` or ``TP8`` in the request). Small integers have no
exemption: ``2`` is grounded only when some source holds a number that rounds to 2.

Source numbers are gathered generously: every JSON number (booleans excluded), and every number
in a string (identifiers included, with and without its multiplier), so ``"llama3-405b"`` in the
request grounds 3, 405 and 405e9. Sources carry no units, so a reading may be grounded by an
unrelated value that happens to be equal; the check catches invented numbers, not mislabelled ones
(except layout tokens, above).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["NumberMention", "GroundedNumber", "GroundingReport", "extract_numbers", "check_grounding",
           "mark_ungrounded", "UNGROUNDED_MARK"]

UNGROUNDED_MARK = "[ungrounded]"

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


@dataclass(frozen=True)
class NumberMention:
    """One number in a text, as written."""

    text: str  # the span as written, e.g. "$1.23M", "41%", "80 GB", "TP8"
    start: int  # offsets into the checked text
    end: int
    value: float  # the number with multiplier/exponent applied, unsigned: "1.5M" -> 1.5e6, "41%" -> 41
    quantum: float  # the place value of the last written digit, in `value`'s units: "1.5M" -> 1e5
    unit: str | None = None  # "%", a byte unit ("GiB", "GB/s"), "ms" or "$"; None when plain
    layout_key: str | None = None  # "tp" for "TP8" or "tp=8": only a source's tp values ground it

    def readings(self) -> list[tuple[float, float]]:
        """(value, half-width) pairs this mention may stand for; see the module docstring."""
        v, half = self.value, self.quantum / 2
        out = [(v, half)]
        if self.unit == "%":
            out.append((v / 100, half / 100))
        elif self.unit == "ms":
            out.append((v / 1e3, half / 1e3))
        elif self.unit and self.unit[0] in _PREFIX_POWER:  # a byte unit
            power = _PREFIX_POWER[self.unit[0]]
            # what was written may mean decimal or binary bytes ("GB" is often GiB); "GiB" is binary
            meanings = {1024.0**power} if "i" in self.unit else {1000.0**power, 1024.0**power}
            for unit_bytes in meanings:
                for source_unit_bytes in (1024.0**power, 1000.0**power, _GiB, _GB):
                    factor = unit_bytes / source_unit_bytes
                    out.append((v * factor, half * factor))
        if re.search(r"\d\s?[kK]$", self.text):
            out.append((v * 1.024, half * 1.024))  # 128K = 131072
        return out


@dataclass(frozen=True)
class GroundedNumber:
    """A mention and the source number that grounds it."""

    mention: NumberMention
    source_value: float


@dataclass
class GroundingReport:
    """The result of check_grounding."""

    grounded: list[GroundedNumber] = field(default_factory=list)
    ungrounded: list[NumberMention] = field(default_factory=list)

    @property
    def share_grounded(self) -> float:
        """Grounded mentions / all checked mentions (1.0 when the text has none)."""
        total = len(self.grounded) + len(self.ungrounded)
        return len(self.grounded) / total if total else 1.0

    @property
    def ok(self) -> bool:
        """True when no number is ungrounded."""
        return not self.ungrounded


def _parse(m: re.Match) -> tuple[float, float, str | None]:
    """(value, quantum, unit) of a regex match."""
    num = m["num"].replace(",", "")
    decimals = len(num.split(".")[1]) if "." in num else 0
    value = float(num)
    quantum = 10.0**-decimals
    digits = num.lstrip("0")
    if not decimals and value >= 1000 and not (m["mult"] or m["word"] or m["exp"] or m["exp2"]):
        trailing = len(digits) - len(digits.rstrip("0"))
        quantum = 10.0 ** min(trailing, len(digits) - 2)
    scale = 10.0 ** int(m["exp"] or m["exp2"] or 0) * _MULT.get(m["mult"] or m["word"] or "", 1.0)
    unit = "%" if m["pct"] else m["bytes"] or m["ms"] or ("$" if m["cur"] else None)
    return value * scale, quantum * scale, unit


def _is_exempt(text: str, m: re.Match, value: float) -> bool:
    """List markers, heading numbers, footnotes, ordinals and years (module docstring)."""
    start, end = m.start(), m.end()
    line_start = text.rfind("\n", 0, start) + 1
    before = text[line_start:start]
    after = text[end:end + 2]
    is_int = re.fullmatch(r"\d+", m.group(0)) is not None
    if is_int or re.fullmatch(r"\d+(\.\d+)*", m.group(0)):
        if re.fullmatch(r"\s*(?:[-*+]\s+)?\(?", before) and re.match(r"[.)](?:\s|$)", after + " "):
            return True  # "1. ", "2) ", "(3) "
        if re.fullmatch(r"\s*#{1,6}\s*", before):
            return True  # "## 2. Cost"
    if not is_int:
        return False
    prev = text[start - 1] if start else ""
    if prev == "#" or (prev == "[" and text[end:end + 1] == "]"):
        return True
    word = re.search(r"([A-Za-z]+)\.?\s+$", before)
    if word and word.group(1).lower() in _ORDINAL_WORDS and value <= 20:
        return True
    if 1950 <= value <= 2039 and (re.search(r"et al\.,?\s*$", before) or (
            re.match(r"[ \t]*(?:[,.;:)\]]|\n|$)", text[end:]) and _YEAR_BEFORE.search(before))):
        return True
    return False


def _layout_before(text: str, start: int) -> re.Match | None:
    """The layout key written right before position `start`, if any."""
    return _LAYOUT_BEFORE.search(text, max(0, start - 12), start)


def _scan(text: str) -> list[tuple[re.Match, str, re.Match | None]]:
    """Every number match with its kind ("number", "identifier" or "layout") and layout-key match."""
    out: list[tuple[re.Match, str, re.Match | None]] = []
    identifier_ends: set[int] = set()
    for m in _NUMBER.finditer(text):
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


def extract_numbers(text: str) -> list[NumberMention]:
    """The numbers in `text` that must be grounded, in order (exemptions: module docstring)."""
    mentions = []
    for m, kind, layout in _scan(text):
        if kind == "identifier":
            continue
        value, quantum, unit = _parse(m)
        if kind == "number" and _is_exempt(text, m, value):
            continue
        start = layout.start() if layout else m.start()
        key = layout["key"].lower() if layout else None
        mentions.append(NumberMention(text[start:m.end()], start, m.end(), abs(value), quantum, unit, key))
    return mentions


@dataclass
class _Sources:
    """Sorted source numbers, and the values under each layout key."""

    values: list[float] = field(default_factory=list)
    layout: dict[str, list[float]] = field(default_factory=dict)

    def add(self, obj: Any, key: str | None = None) -> None:
        """Add every number in a JSON-like object; strings are scanned generously."""
        if isinstance(obj, bool) or obj is None:
            return
        if isinstance(obj, (int, float)):
            if math.isfinite(obj):
                self.values.append(abs(float(obj)))
                if key in _LAYOUT_KEYS:
                    self.layout.setdefault(key, []).append(abs(float(obj)))
        elif isinstance(obj, str):
            self._add_text(obj)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                self.add(k)
                self.add(v, str(k).lower())
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                self.add(item, key)

    def _add_text(self, text: str) -> None:
        for m, _, layout in _scan(text):
            value, quantum, unit = _parse(m)
            readings = NumberMention(m.group(0), m.start(), m.end(), abs(value), quantum, unit).readings()
            self.values.extend(v for v, _ in readings)
            raw = float(m["num"].replace(",", ""))
            self.values.append(raw)
            suffix = text[m.end():m.end() + 1].upper()
            if suffix in _MULT and not (m["mult"] or m["bytes"]):
                self.values.append(raw * _MULT[suffix])  # "llama3-405b" -> 405e9
            if layout:
                self.layout.setdefault(layout["key"].lower(), []).append(raw)

    def find(self, mention: NumberMention) -> float | None:
        """A source value within one of the mention's readings, or None."""
        values = self.layout.get(mention.layout_key, []) if mention.layout_key else self.values
        for centre, half in mention.readings():
            tol = half * (1 + 1e-9) + 1e-12 * centre
            i = bisect.bisect_left(values, centre - tol)
            if i < len(values) and values[i] <= centre + tol:
                return values[i]
        return None


def check_grounding(text: str, sources: list[Any]) -> GroundingReport:
    """Check every number in `text` against the numbers in `sources` (tool results, the request)."""
    found = _Sources()
    for source in sources:
        found.add(source)
    found.values.sort()
    for values in found.layout.values():
        values.sort()
    report = GroundingReport()
    for mention in extract_numbers(text):
        match = found.find(mention)
        if match is None:
            report.ungrounded.append(mention)
        else:
            report.grounded.append(GroundedNumber(mention, match))
    return report


def mark_ungrounded(text: str, mentions: list[NumberMention]) -> str:
    """`text` with " [ungrounded]" after each of `mentions` (mentions of this same text)."""
    for mention in sorted(mentions, key=lambda m: m.end, reverse=True):
        text = f"{text[:mention.end]} {UNGROUNDED_MARK}{text[mention.end:]}"
    return text
