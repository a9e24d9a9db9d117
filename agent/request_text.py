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
window of bounded size, so parsing time is linear in the length of the request.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator

from trainplan.tools.errors import InputError

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

_MINUS = "-\u2212\u2013"  # hyphen-minus, minus sign, en dash

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
        text = unicodedata.normalize("NFKC", raw.replace("\uff0c", ", "))[:MAX_CHARS]
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
        if index == 0 or self.text[index - 1] not in _MINUS:
            return False
        return index < 2 or not self.text[index - 2].isalnum()

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
        return out
