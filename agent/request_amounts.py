"""The rules that read the amounts with units in a plain-language request: tokens per batch and training
tokens, sequence length, micro and global batch, price, budget, goodput and deadline.

parse_partial (agent/request.py) runs them after the names (agent/request_rules.py) and before the GPU
counts, so that '200B tokens' or '$2M' is never read as a model size or a count. An amount that cannot be
meant ('-15T tokens', '0 days') raises InputError naming it.
"""

from __future__ import annotations

import re
from typing import Any

from trainplan.tools.perf.cost import MAX_TRAINING_TOKENS
from trainplan.tools.core.errors import InputError

from .request_rules import COUNT_PATTERN, EXAMPLE, whole_count, written_at
from .request_text import DECIMAL, MULT, NUM, RequestText, number

CJK_MULT = {"万亿": 1e12, "亿": 1e8, "万": 1e4}
"""Chinese multipliers: '15万亿' = 15e12, '200万' = 2e6."""
_ANY_MULT = rf"(?:万亿|亿|万|{MULT})"


def _scale(suffix: str | None) -> float:
    suffix = (suffix or "").lower()
    return CJK_MULT.get(suffix) or DECIMAL.get(suffix, 1.0)


_PER_BATCH = r"\s*(?:per|/|a|each)\s*(?:global\s*)?(?:batch|step|iteration)"


def _amount(t: RequestText, match: re.Match, what: str, group: int = 1) -> float:
    """A positive amount with its multiplier (group + 1): '15T', '300 billion', '15万亿'."""
    start = match.start(group)
    written = written_at(t, start, match.end())
    if t.negative_at(start):
        raise InputError(f"'-{written}' is negative: write a positive number of {what}, e.g. {EXAMPLE}")
    value = number(match.group(group)) * _scale(match.group(group + 1))
    if value <= 0:
        raise InputError(f"'{written}' must be more than zero {what}: e.g. {EXAMPLE}")
    return value


def read_samples(t: RequestText, found: dict[str, Any]) -> None:
    """A data set as samples of a length ('10k samples of 512 tokens', '50,000 examples of 2048 tokens each'):
    seq is the length (k = 1024 there), tokens the samples x the length (k = 1000 for the count); packed into a
    longer sequence the request gives ('packed to 4096'), the length is the packed documents' (document_tokens)."""
    samples = t.take(rf"({NUM})\s*({_ANY_MULT})?\s*(?:samples|examples|sequences|conversations|rows|documents)\s*"
                     rf"(?:of|at|with|,)?\s*(?:up\s*to\s*)?({NUM})\s*(k(?![a-z]))?\s*tokens?(?:\s*each)?(?![a-z])"
                     rf"(?!{_PER_BATCH})")   # '256 sequences of 4096 tokens per batch' is a batch, not a data set
    if samples:
        count = _amount(t, samples, "samples")
        length = number(samples.group(3)) * (1024 if samples.group(4) else 1)
        if length != int(length) or length < 1:
            raise InputError(f"'{written_at(t, *samples.span())}' needs a whole number of tokens per sample")
        if found.get("packing") and "seq" in found:   # 'packing 10k samples of 300 tokens into 4096': documents
            found.setdefault("document_tokens", int(length))
        found.setdefault("seq", int(length))
        found["tokens"] = _bounded_tokens(count * length, written_at(t, *samples.span()))


def _bounded_tokens(tokens: float, written: str) -> float:
    """Training tokens within MAX_TRAINING_TOKENS, else InputError quoting what made them."""
    if tokens > MAX_TRAINING_TOKENS:
        raise InputError(f"'{written}' is {tokens:.3g} tokens, more than {MAX_TRAINING_TOKENS:.0e} "
                         "(the largest published runs train on tens of T): check the number and its unit")
    return tokens


def read_tokens(t: RequestText, found: dict[str, Any]) -> None:
    """Tokens per batch ('4M tokens per batch': gbs = tokens / seq, K and M read as 2^10 and 2^20 as
    batch sizes are quoted) and training tokens ('15T tokens', '300 billion tokens', '15T token')."""
    batch = (t.take(rf"({NUM})\s*({_ANY_MULT})?\s*tokens?{_PER_BATCH}")
             or t.take(rf"batch(?:\s*size)?\s*(?:of|:|=|is)?\s*({NUM})\s*({_ANY_MULT})?\s*tokens?(?![a-z])"))
    if batch:
        suffix = (batch.group(2) or "").lower()
        binary = {"k": 2**10, "m": 2**20}.get(suffix)
        found["batch_tokens"] = _amount(t, batch, "tokens per batch") * (binary / _scale(suffix) if binary else 1)
    for match in t.matches(rf"({NUM})\s*({_ANY_MULT})?\s*(?:个\s*)?(?:training\s+)?(?:tokens?(?![a-z])|トークン|토큰)", 1):
        if re.match(r"\s*(?:sequences?|context|seq)", t.text[match.end():match.end() + 12], re.IGNORECASE):
            continue
        tokens = _amount(t, match, "tokens")
        found["tokens"] = _bounded_tokens(tokens, written_at(t, *match.span()))
        t.mark(*match.span())
        return
    labelled = t.first(rf"(?<![a-z])(?:training\s+)?tokens?\s*(?::|=|of|is)\s*-?({NUM})\s*({_ANY_MULT})?(?![a-z0-9])", 1)
    if labelled:  # 'tokens: 15T'
        found["tokens"] = _amount(t, labelled, "tokens")
        t.mark(*labelled.span())
        return
    # 'train for 1T' / 'for 300B': a B or T amount after 'for' with no other unit is a token count
    bare = t.first(rf"(?<![a-z])for\s+-?({NUM})\s*(b|t|billion|trillion)(?![a-z0-9])"
                   r"(?!\s*(?:-?\s*param|model|llm|dense|moe))", 1)
    if bare:
        found["tokens"] = _amount(t, bare, "tokens")
        t.mark(*bare.span())


SEQ_LENGTH_UNIT = 256
"""'at N tokens' is a sequence length only when N is a multiple of this (4096, 8k); '100000 tokens' is data."""


def _set_seq(t: RequestText, found: dict[str, Any], match) -> None:
    """The sequence length a match writes; a different one read already ('packed to 4096' beside 'seq 2048') is one
    line, not a silent choice."""
    seq = whole_count(t, match, "tokens of sequence")
    if found.get("seq", seq) != seq:
        raise InputError(f"'{written_at(t, *match.span())}' and a sequence of {found['seq']:,} tokens disagree: give "
                         "one length")
    found["seq"] = seq


def read_sequence_in_tokens(t: RequestText, found: dict[str, Any]) -> None:
    """A sequence length written in tokens, read before the training tokens so that it is not taken for
    them: 'at 4096 tokens', 'with 8k tokens' (no per-second, per-batch or per-GPU after it), '32k tokens
    per sequence', '4,096 tokens each'."""
    seq = t.take(rf"{COUNT_PATTERN}[\s-]*tokens?\s*(?:per|/|a|each|in\s+each)\s*(?:sequence|sample|seq|example)s?(?![a-z])")
    if seq is None:  # 'at 4096 tokens': a sequence only when it is a length one (a multiple of 256 tokens)
        at = t.first(rf"(?<![a-z])(?:at|with)\s+{COUNT_PATTERN}[\s-]*tokens?(?![a-z])"
                     r"(?!\s*(?:per|/|a\s|each|of\s+(?:data|text|training))|\s*(?:in|for)\s+total)")
        if at and number(at.group(1)) * (1024 if at.group(2) else 1) % SEQ_LENGTH_UNIT == 0:
            seq = at
            t.mark(*at.span())
    if seq:
        _set_seq(t, found, seq)


def read_sequence_and_batch(t: RequestText, found: dict[str, Any]) -> None:
    """seq ('sequence length 8192', 'seq 4k', '8k context'; k = 1024), mbs ('micro-batch size 2', 'mbs=2')
    and gbs ('global batch 1024', 'gbs=256', '512 sequences per batch')."""
    seq = (t.take(rf"(?:sequence(?:\s*length)?|seq(?:uence)?[\s_-]*len(?:gth)?|seq|context(?:\s*length)?|ctx|"
                  rf"序列长度|上下文)\s*(?:of|:|=|is)?\s*{COUNT_PATTERN}")
           or t.take(rf"{COUNT_PATTERN}[\s-]*(?:tokens?[\s-]*)?(?:context|sequences?(?![\s-]*(?:per|/|a\s|each))|"
                     r"seq(?:uence)?[\s-]*len(?:gth)?|seq)(?![a-z])"))
    if seq:
        _set_seq(t, found, seq)
    mbs = t.take(rf"(?<![a-z])(?:mbs|micro[\s_-]*batch(?:[\s_-]*size)?|{_PER_DEVICE_BATCH})\s*(?:of|:|=|is)?\s*"
                 rf"{COUNT_PATTERN}")
    if mbs:  # before gbs: 'micro-batch size 4' and 'per_device_train_batch_size=4' hold 'batch size 4'
        found["mbs"] = whole_count(t, mbs, "sequences per micro-batch")
    bare = t.first(rf"(?<![a-z])batch(?:[\s_-]*size)?\s*(?:of|:|=|is)?\s*{COUNT_PATTERN}")
    gbs = (t.take(rf"(?:global[\s_-]*batch(?:[\s_-]*size)?|batch(?:[\s_-]*size)?|gbs)\s*(?:of|:|=|is)?\s*{COUNT_PATTERN}"
                  r"(?!\s*(?:thousand|million|billion|trillion|[mbt])?\s*tokens)")
           or t.take(rf"{COUNT_PATTERN}\s*sequences?{_PER_BATCH}"))
    if gbs:
        found["gbs"] = whole_count(t, gbs, "sequences per batch")
        found["_bare_batch"] = bare is not None and bare.start() == gbs.start()
    accumulation = t.take(rf"(?<![a-z])(?:gradient|grad)[\s_-]*accum(?:ulation)?(?:[\s_-]*steps?)?\s*(?:of|:|=|is)?\s*"
                          rf"{COUNT_PATTERN}")
    if accumulation:
        found["_accumulation"] = whole_count(t, accumulation, "gradient accumulation steps")


_PER_DEVICE_BATCH = (r"per[\s_-]*(?:device|gpu)[\s_-]*(?:train[\s_-]*)?batch(?:[\s_-]*size)?"
                     r"|batch[\s_-]*size[\s_-]*per[\s_-]*(?:device|gpu)")
"""The Hugging Face Trainer's per_device_train_batch_size and its plain forms: the micro-batch of each GPU."""


def apply_accumulation(found: dict[str, Any], context: Any = None) -> None:
    """A Hugging Face style batch ('batch size 1, gradient accumulation 8' on N GPUs): the per-device batch (the
    micro-batch, or a bare 'batch size' when accumulation is said) x accumulation x data-parallel GPUs is the
    global batch, as the Trainer makes it; a global batch said as such gives the micro-batch instead. InputError
    when the GPU count is not known or the figures disagree. A follow-up's missing count and sizes are its
    context's (the request it revises)."""
    steps = found.pop("_accumulation", None)
    bare = found.pop("_bare_batch", False)
    if steps is None:
        return

    def given(name: str, default: Any) -> Any:
        value = found.get(name, getattr(context, name, None))
        return default if value is None else value

    model_parallel = given("tp", 1) * given("pp", 1) * given("cp", 1)
    gpus = given("gpus", None)
    if gpus is None:
        raise InputError(f"gradient accumulation {steps} makes the global batch per-device batch x accumulation x "
                         "data-parallel GPUs: give the GPU count (e.g. 'on 8 H100s'), or the global batch instead")
    if gpus % model_parallel:
        raise InputError(f"{gpus} GPUs do not divide into tp x pp x cp = {model_parallel}, so gradient accumulation "
                         f"{steps} has no data-parallel size to multiply: change the GPU count or the sizes")
    replicas = gpus // model_parallel
    if found.get("gbs") is not None and not bare:   # 'global batch 1024, gradient accumulation 4'
        per_device, left = divmod(found["gbs"], steps * replicas)
        if left or not per_device or found.get("mbs") not in (None, per_device):
            raise InputError(f"global batch {found['gbs']} is not gradient accumulation {steps} x {replicas} "
                             f"data-parallel GPUs x {found.get('mbs') or 'a whole'} per-device batch: give two of them")
        found["mbs"] = per_device
        return
    per_device = found.get("mbs") or (found.get("gbs") if bare else None) or 1
    found["mbs"] = per_device
    found["gbs"] = per_device * steps * replicas


def read_epochs(t: RequestText, found: dict[str, Any]) -> None:
    """Epochs over the training tokens ('2 epochs over 50M tokens', '1.5 epochs'): tokens x epochs. Epochs with no
    token count stay unread (the report lists them)."""
    if found.get("tokens") is None:
        return
    epochs = t.take(rf"({NUM})\s*epochs?(?:\s+(?:over|of|on|through))?(?![a-z])")
    if epochs:
        repeats = number(epochs.group(1))
        written = written_at(t, *epochs.span())
        if t.negative_at(epochs.start(1)) or repeats <= 0:
            raise InputError(f"'{written}' is not a number of epochs: write a positive number, e.g. 2 epochs")
        found["tokens"] = _bounded_tokens(found["tokens"] * repeats, written)


def read_money(t: RequestText, found: dict[str, Any]) -> None:
    """price ('$2/GPU-hour', '$2.5 per GPU hour') and budget_usd ('budget $2M', '$500K budget',
    'under $2M', 'no more than 2 million dollars', '预算200万美元')."""
    price = (t.take(rf"(?:(?:at|under|below|for|of|price)\s*:?\s*)?\$\s*({NUM})\s*(?:/|per|an|a)\s*(?:gpu[\s/-]*)?(?:h|hr|hour)(?![a-z])")
             or t.take(rf"({NUM})\s*(?:usd|dollars?|\$)\s*(?:/|per|an|a)\s*(?:gpu[\s-]*)?(?:h|hr|hour)(?![a-z])"))
    if price:
        found["price"] = _positive_price(t, price)
    dollars = rf"(?:\$\s*({NUM})\s*({_ANY_MULT})?(?![0-9])|({NUM})\s*({_ANY_MULT})?\s*(?:usd|dollars|美元|ドル)(?![a-z]))"
    budget = (t.take(rf"(?:budget|预算|予算)\s*(?:of|:|=|is)?\s*(?:under\s*|up\s*to\s*|at\s*most\s*)?{dollars}")
              or t.take(rf"{dollars}\s*(?:budget|or\s*less|max(?:imum)?|total|cap|以内)(?![a-z])")
              or t.take(rf"(?:under|below|at\s*most|no\s*more\s*than|max(?:imum)?|within|up\s*to|spend|for|costs?|with)\s*"
                        rf"(?:of\s*)?{dollars}(?!\s*(?:/|per|an?\s)\s*(?:gpu|h))"))
    if budget:
        group = 1 if budget.group(1) else 3
        found["budget_usd"] = _amount(t, budget, "dollars", group)


def read_goodput(t: RequestText, found: dict[str, Any]) -> None:
    """goodput: '80% goodput', 'goodput 0.95', 'goodput of 90%' (a share of wall-clock time, in (0, 1])."""
    match = (t.take(rf"({NUM})\s*(%)\s*goodput(?![a-z])")
             or t.take(rf"(?<![a-z])goodput\s*(?:of|:|=|is|at)?\s*-?({NUM})\s*(%)?"))
    if match:
        value = number(match.group(1)) / (100 if match.group(2) else 1)
        if t.negative_at(match.start(1)) or not 0 < value <= 1:
            raise InputError(f"'{written_at(t, *match.span())}' is not a goodput: it is the share of wall-clock time "
                             "that trains, e.g. 90% goodput")
        found["goodput"] = value


def _positive_price(t: RequestText, match: re.Match) -> float:
    if t.negative_at(match.start(1)) or number(match.group(1)) <= 0:
        raise InputError(f"'{written_at(t, *match.span())}' is not a price: write e.g. $2/GPU-hour")
    return number(match.group(1))


_DAY_UNITS = {"d": 1.0, "day": 1.0, "days": 1.0, "天": 1.0, "日": 1.0, "일": 1.0, "week": 7.0, "weeks": 7.0,
              "wk": 7.0, "wks": 7.0, "周": 7.0, "週": 7.0, "週間": 7.0, "주": 7.0, "month": 30.0, "months": 30.0,
              "个月": 30.0, "ヶ月": 30.0, "か月": 30.0, "개월": 30.0,
              "h": 1 / 24, "hr": 1 / 24, "hrs": 1 / 24, "hour": 1 / 24, "hours": 1 / 24}


def read_deadline(t: RequestText, found: dict[str, Any]) -> None:
    """deadline_days: 'within 30 days', 'in 4 weeks', 'deadline 30 days', '30 days or less',
    'in a month', '30天内', 'in 12 hours' (a fine-tune's). A month is 30 days."""
    units = r"(days?|d|weeks?|wks?|months?|hours?|hrs?|h)(?![a-z0-9])"
    cue = r"(?:within|in|under|deadline(?:\s*(?:of|is))?|by|less\s*than|at\s*most|no\s*more\s*than|max(?:imum)?|up\s*to|" \
          r"finish(?:ed)?\s*in|done\s*in|take\s*(?:at\s*most|no\s*more\s*than)?)"
    match = (t.take(rf"{cue}\s*:?\s*-?({NUM})\s*{units}")
             or t.take(rf"({NUM})[\s-]*{units}\s*(?:deadline|or\s*less|max(?:imum)?|at\s*most)(?![a-z])")
             or t.take(rf"({NUM})\s*(天|日|일|週間|周|週|주|个月|ヶ月|か月|개월)(?:内|以内|之内|이내)?"))
    if match:
        days = number(match.group(1))
        if t.negative_at(match.start(1)) or days <= 0:
            raise InputError(f"'{written_at(t, *match.span())}' is not a deadline: write e.g. within 30 days")
        found["deadline_days"] = days * _DAY_UNITS[match.group(2).lower()]
        return
    word = t.take(rf"{cue}\s*(?:a|an|one)\s*(hour|day|week|month)(?![a-z])")
    if word:
        found["deadline_days"] = _DAY_UNITS[word.group(1).lower()]
