"""The text of a plain-language request, bounded, and the parts of it the parser has read.

`RequestText` normalises the request (Unicode NFKC: full-width digits, letters and punctuation
become ASCII, so '５１２张Ｈ１００，' reads as '512张H100,'), bounds it, and records which characters
each rule of agent/request.py has read. Whatever no rule read is reported back as words the
parser did not understand.

Bounds, checked first and in linear time, so that no input can make the parser slow:
- at most MAX_CHARS characters (a request is a few sentences);
- no number longer than MAX_DIGITS digits (the largest count a request needs, 16,384 GPUs or
  15.6T tokens, has 14 digits written out).
Every rule is a regular expression without nested repetition, run once over the text or over a
window of bounded size, so parsing time is linear in the length of the request. NFKC can lengthen a
request that was under MAX_CHARS ('㎒' is 'MHz', one ligature is 18 letters): the part past MAX_CHARS is
then cut, and reported as not read (`cut`, the last entry of unread_words), never dropped silently.

Signs: the minus sign (U+2212), the figure, en and em dashes (U+2012-U+2014) and the Unicode hyphens
(U+2010, U+2011) are read as the ASCII '-' they are typed for, so '–512 H100s' is '-512 H100s' and
'8–16 GPUs' is the range '8-16 GPUs'. A '-' that is not inside a word ('-$2', '$-2', 'TP -8', 'tp=−8',
not 'Llama-3', 'H100-80GB', '8-16', '1e-3') makes the number after it negative: `signed_number` finds the
first, and parse_partial refuses it with one line (no request number can be negative), so no rule reads
a negative as its positive.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator

from trainplan.tools.core.errors import InputError

MAX_CHARS = 4000
"""Longest request read, in characters."""
MAX_DIGITS = 18
"""Longest number read, in digits (commas and the decimal point not counted)."""

NUM = r"(?<![0-9a-z.])(?<![0-9],)[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?(?![0-9])"
"""A number as written: 512, 16,384, 15.6, 15.6e12 (ASCII digits only)."""
MULT = r"(?:thousand|million|billion|trillion|[kmbt])"
DECIMAL = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "b": 1e9, "billion": 1e9,
           "t": 1e12, "trillion": 1e12}

CJK = r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]"
"""Chinese, Japanese kana and Korean hangul characters."""

SIGNS = str.maketrans({c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2212\u2796"})
"""Hyphens, the figure, en and em dashes, the minus sign and the heavy minus, as the ASCII '-' (after NFKC,
which already maps the small and full-width hyphen-minus U+FE63, U+FF0D to '-')."""
_SIGNED = r"-\$?[0-9]|\$-[0-9]"
"""A minus written against a number, a dollar sign on either side: '-8', '-$2', '$-2' (not '- 8', a bullet or
a spaced range '3 - 4'); it is a sign where the '-' does not follow a letter or digit (signed_number)."""

# Words that carry no planning information. Anything else no rule read is reported.
STOPWORDS = frozenset("""
a an the on of for with using use used in at to into by from as and or but also then than via per each
i we me my our us you your it its this that these those there here it's i'd i'm we'd we're let's
is are be been being was were will would could should can may might must shall do does did done
want wants need needs like would love please pls kindly thanks thank help hi hello hey
what which how how's what's who when where why if whether about around roughly approximately approx
plan plans planning planned train trains training trained pretrain pretraining pre-train pre-training
finetune fine-tune fine-tuning tune tuned tuning run runs running job jobs launch estimate estimates give show tell find
model models llm llms network gpu gpus accelerator accelerators card cards device devices cluster
clusters node nodes machine machines server servers total overall available have has got having
layout layouts configuration config setup parallelism parallel sharding strategy best good optimal
only just some any all new existing current same one from-scratch scratch way ways option options maybe perhaps
switch change try instead go move make let see compare now then again ok okay
mixed precision data dataset corpus tokens token worth
lay out fit fits long much many cost costs take takes time global
instruct chat base memory max maximum continue continued continuing
packing packed sample_packing sample true false meta meta-llama
what's would've i'll we'll
""".split())
CJK_STOPWORDS = ("帮我", "请", "用", "在", "上", "训练", "預訓練", "预训练", "规划", "計画", "模型", "使用", "使", "的",
                 "个", "張", "张", "块", "卡", "台", "和", "与", "一个", "需要", "多少", "我", "想", "要", "で", "を",
                 "に", "の", "は", "が", "と", "完成", "する", "して", "ください", "学習", "训", "练", "개", "장", "로", "을",
                 "를", "으로", "에서", "학습")


def number(text: str) -> float:
    """'16,384' -> 16384.0; InputError for a value that is not finite ('1e999')."""
    value = float(text.replace(",", ""))
    if not math.isfinite(value):
        raise InputError(f"the number {text} in the request is too large: write e.g. 15.6T or 15.6e12")
    return value


class RequestText:
    """The normalised request and the characters the rules have read."""

    def __init__(self, raw: str) -> None:
        if len(raw) > MAX_CHARS:
            raise InputError(f"the request has {len(raw):,} characters, more than {MAX_CHARS:,}: state the model, "
                             "the hardware and the tokens in a few sentences")
        # A full-width comma separates phrases ('DeepSeek-V3，15万亿token'); NFKC would make it an ASCII comma
        # that reads as a thousands separator ('3,15').
        text = unicodedata.normalize("NFKC", raw.replace("\uff0c", ", ")).translate(SIGNS)
        self.cut = text[MAX_CHARS:]
        """What NFKC pushed past MAX_CHARS: not read, and reported (unread_words)."""
        text = text[:MAX_CHARS]
        for written in re.finditer(r"[0-9]+(?:,[0-9]{3})*", text):
            digits = len(written.group(0)) - written.group(0).count(",")
            if digits > MAX_DIGITS:
                raise InputError(f"the request holds a {digits:,}-digit number, more than any count a plan needs "
                                 f"({MAX_DIGITS} digits): write e.g. 512 GPUs or 15.6T tokens")
        self.text = text
        self._read = bytearray(len(text))

    # --- reading ------------------------------------------------------------------------------------

    def is_read(self, start: int, end: int) -> bool:
        return any(self._read[start:end])

    def mark(self, start: int, end: int) -> None:
        self._read[start:end] = b"\x01" * (end - start)

    def matches(self, pattern: str, group: int | str = 0, start: int = 0, end: int | None = None
                ) -> Iterator[re.Match]:
        """Matches of `pattern` (case-insensitive) whose `group` no rule has read yet, in order."""
        for match in re.finditer(pattern, self.text[:end] if end is not None else self.text, re.IGNORECASE):
            if match.start() >= start and match.group(group) is not None and not self.is_read(*match.span(group)):
                yield match

    def first(self, pattern: str, group: int | str = 0) -> re.Match | None:
        return next(self.matches(pattern, group), None)

    def take(self, pattern: str, group: int | str = 0) -> re.Match | None:
        """The first unread match, marked as read (the whole match)."""
        match = self.first(pattern, group)
        if match:
            self.mark(*match.span())
        return match

    def before(self, index: int, width: int = 48) -> str:
        """Up to `width` characters before `index` (a bounded window for right-anchored patterns)."""
        return self.text[max(0, index - width):index]

    def negative_at(self, index: int) -> bool:
        """A minus sign written right before the number at `index`, not as a hyphen inside a word
        ('-512', 'of -15T'; not 'llama-3', 'ZeRO-3')."""
        if index == 0 or self.text[index - 1] != "-":
            return False
        return index < 2 or not self.text[index - 2].isalnum()

    def signed_number(self, skip: tuple[tuple[int, int], ...] = ()) -> str | None:
        """The first negative number as written with its neighbouring words ('TP -8', 'at -$2 per'), or None.
        A '-' after a letter or digit is a hyphen ('Llama-3', 'H100-80GB', '8-16', '1e-3'); spans in `skip`
        (file paths) are not read."""
        for match in re.finditer(_SIGNED, self.text):
            minus = match.start() + (1 if self.text[match.start()] == "$" else 0)
            if minus > 0 and self.text[minus - 1].isalnum():
                continue
            if any(start <= match.start() < end for start, end in skip):
                continue
            before = re.search(r"(?:[^\s]+\s*)?$", self.text[max(0, match.start() - 24):match.start()])
            after = re.match(r"[$0-9.,]*[0-9](?:[^\s]*\s*[^\s,.;]*)?", self.text[match.end() - 1:match.end() + 23])
            return ((before.group(0) if before else "") + self.text[match.start():match.end() - 1]
                    + (after.group(0) if after else "")).strip()
        return None

    # --- what was not understood ---------------------------------------------------------------------

    def unread_words(self) -> list[str]:
        """Words, numbers and CJK phrases no rule read, stop words left out, each once, in order."""
        out: list[str] = []
        unread = "".join(" " if flag else ch for ch, flag in zip(self.text, self._read))
        pattern = rf"[a-z][a-z'-]*[a-z]|[a-z]|[0-9][0-9,.]*[a-z]*|{CJK}+"
        for match in re.finditer(pattern, unread, re.IGNORECASE):
            word = match.group(0)
            if re.match(CJK, word):
                for stop in sorted(CJK_STOPWORDS, key=len, reverse=True):
                    word = word.replace(stop, " ")
                pieces = word.split()
            else:
                pieces = [] if word.lower() in STOPWORDS else [word]
            out += [p for p in pieces if p not in out]
        if self.cut:
            words = self.cut.split()
            preview = " ".join(words) if len(words) <= 10 else f"{' '.join(words[:3])} ... {' '.join(words[-6:])}"
            out.append(f"(not read: the last {len(self.cut):,} characters, past the {MAX_CHARS:,}-character limit "
                       f"once normalised: '{preview[:240]}')")
        return out
