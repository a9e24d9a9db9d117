"""The offline parser of plain-language planning requests.

    parse_request("Llama 3 70B on 512 H100s for 15T tokens")
    -> PlanRequest(model="llama3-70b", gpu="h100-sxm-80gb", gpus=512, tokens=15e12, ...)

What it reads (case does not matter):

- model: a catalog name or alias from trainplan.tools.catalog ("Llama 3 70B", "llama3-70b",
  "DeepSeek-V3", "GPT-3"), or a path ending in .json;
- gpu and gpus: a count before a GPU name or alias ("512 H100s", "2048 H800", "16k H100",
  "64 x A100 80GB"), "N GPUs" with the name elsewhere, or "N nodes" (x the GPU's gpus_per_node).
  A "k" in a GPU count or a sequence length is 1024 ("16k H100" = 16,384; "seq 4k" = 4096);
- tokens: "15T tokens", "15.6e12 tokens", "300 billion tokens";
- seq: "sequence length 8192", "seq 4k", "8k context", "seq=4096";
- gbs: "global batch 1024", "batch size 512", "gbs=256", or tokens per batch ("4M tokens per
  batch", "batch of 4M tokens"): gbs = tokens / seq, rounded, with K/M read as 2^10/2^20 as
  batch sizes are quoted (4M tokens = 4,194,304; at seq 8192 that is 512 sequences);
- price: "$2/GPU-hour", "$2.5 per GPU hour", "at $2/h";
- budget_usd: "budget $2M", "$500K budget", "under $2M"; deadline_days: "within 30 days",
  "in 4 weeks", "deadline 30 days";
- precision: "fp8" or "bf16";
- pins of the layout: "TP8", "tp=8", "PP 4", "ZeRO-3", "vpp 2", "EP 64", "CP2".

`parse_partial` returns only what the text says (for follow-ups in a chat: "what if I only have
256 GPUs?", "use fp8"); `merge` lays a partial parse over a previous request; `parse_request`
requires a model and the hardware and raises InputError naming what is missing, with an example.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from trainplan.tools import catalog
from trainplan.tools.errors import InputError

EXAMPLE = '"Llama 3 70B on 512 H100s for 15T tokens"'

PINS = ("tp", "pp", "cp", "ep", "vpp", "zero")


class PlanRequest(BaseModel):
    """A planning request in the DESIGN.md vocabulary. None: not given (the planner chooses)."""

    model: str | None = Field(default=None, description="catalog model name or path to an HF config.json")
    gpu: str | None = Field(default=None, description="catalog GPU name or path to a GPU JSON")
    gpus: int | None = Field(default=None, description="total GPUs")
    tokens: float | None = Field(default=None, description="training tokens")
    seq: int | None = Field(default=None, description="sequence length, tokens")
    gbs: int | None = Field(default=None, description="global batch, sequences")
    batch_tokens: float | None = Field(default=None, description="tokens per step as asked (gbs = batch_tokens / seq)")
    price: float | None = Field(default=None, description="dollars per GPU-hour")
    deadline_days: float | None = Field(default=None, description="longest acceptable training time, days")
    budget_usd: float | None = Field(default=None, description="largest acceptable training cost, dollars")
    precision: str | None = Field(default=None, description="bf16 or fp8")
    goodput: float | None = Field(default=None, description="share of wall-clock time that trains")
    tp: int | None = Field(default=None, description="pinned tensor-parallel size")
    pp: int | None = Field(default=None, description="pinned pipeline-parallel size")
    cp: int | None = Field(default=None, description="pinned context-parallel size")
    ep: int | None = Field(default=None, description="pinned expert-parallel size")
    vpp: int | None = Field(default=None, description="pinned virtual pipeline stages per rank")
    zero: int | None = Field(default=None, description="pinned ZeRO stage")

    def given(self) -> dict[str, Any]:
        """The fields that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def missing(self) -> list[str]:
        return [name for name in ("model", "gpu", "gpus") if getattr(self, name) is None]


# --- locating catalog names in free text -------------------------------------------------------------


def _normalised_with_index(text: str) -> tuple[str, list[int]]:
    """Lower-case letters and digits of `text`, and each one's index in `text`."""
    chars, index = [], []
    for i, ch in enumerate(text):
        if ch.isascii() and ch.isalnum():
            chars.append(ch.lower())
            index.append(i)
    return "".join(chars), index


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _find_name(text: str, names: dict[str, str]) -> tuple[str, int, int] | None:
    """The longest catalog key found in `text` at word boundaries: (catalog name, start, end) in `text`."""
    norm, index = _normalised_with_index(text)
    best: tuple[int, int, str, int, int] | None = None
    for key, name in names.items():
        if not key:
            continue
        start = norm.find(key)
        while start >= 0:
            s, e = index[start], index[start + len(key) - 1] + 1
            before = text[s - 1] if s else " "
            after = text[e] if e < len(text) else " "
            glued_count = before in "x×" and s > 1 and text[s - 2].isdigit()  # "8xH100"
            if (not before.isalnum() or glued_count) and not after.isdigit():
                candidate = (len(key), -s, name, s, e)
                if best is None or candidate > best:
                    best = candidate
                break
            start = norm.find(key, start + 1)
    return (best[2], best[3], best[4]) if best else None


def _model_keys() -> dict[str, str]:
    keys = {_key(name): name for name in catalog.model_names()}
    keys.update(catalog.MODEL_ALIASES)
    return keys


def _gpu_keys() -> dict[str, str]:
    keys = {_key(name): name for name in catalog.gpu_names()}
    keys.update(catalog.GPU_ALIASES)
    return keys


# --- numbers ----------------------------------------------------------------------------------------

_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?"
_DECIMAL = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "b": 1e9, "billion": 1e9,
            "t": 1e12, "trillion": 1e12}
_MULT = r"(?:thousand|million|billion|trillion|[kmbt])"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _binary_count(value: str, suffix: str | None) -> int:
    """'16' + 'k' -> 16384: counts of GPUs and sequence lengths read k as 1024."""
    number = _number(value) * (1024 if suffix and suffix.lower() == "k" else 1)
    return int(round(number))


def _scaled(value: str, suffix: str | None) -> float:
    return _number(value) * _DECIMAL.get((suffix or "").lower(), 1.0)


def _search(pattern: str, text: str) -> re.Match | None:
    return re.search(pattern, text, re.IGNORECASE)


def parse_partial(text: str) -> PlanRequest:
    """Every field the text states, and nothing else."""
    found: dict[str, Any] = {}
    model_path = _search(r"(?<![\w/.~-])((?:[~.]?/)?[\w./~-]+\.json)\b", text)
    if model_path:
        found["model"] = model_path.group(1)
    else:
        model = _find_name(text, _model_keys())
        if model:
            found["model"] = model[0]
    gpu = _find_name(text, _gpu_keys())
    rest = text
    if gpu:
        name, start, end = gpu
        found["gpu"] = name
        count = re.search(rf"({_NUM})\s*(k)?\s*(?:[x×*]\s*)?(?:nvidia\s+)?$", text[:start], re.IGNORECASE)
        if count and not re.search(r"[\w.$]$", text[:count.start()]):
            found["gpus"] = _binary_count(count.group(1), count.group(2))
        else:
            after = re.match(rf"\s*(?:gpus?|cards)?\s*(?:[x×*:]\s*)({_NUM})\s*(k)?\b", text[end:], re.IGNORECASE)
            if after:
                found["gpus"] = _binary_count(after.group(1), after.group(2))
        rest = text[:start] + " " + text[end:]
    if "gpus" not in found:
        count = _search(rf"\b({_NUM})\s*(k)?\s*(?:gpus?|accelerators|cards)\b", rest)
        nodes = _search(rf"\b({_NUM})\s*(?:nodes?|servers?|machines?|hosts?)\b", rest)
        if count:
            found["gpus"] = _binary_count(count.group(1), count.group(2))
        elif nodes:
            per_node = catalog.load_gpu(found["gpu"]).gpus_per_node if "gpu" in found else 8
            found["gpus"] = int(_number(nodes.group(1))) * per_node

    batch_tokens = (_search(rf"\b({_NUM})\s*({_MULT})?\s*tokens?\s*(?:per|/|a|each)\s*(?:global\s*)?"
                            r"(?:batch|step|iteration)", text)
                    or _search(rf"\bbatch(?:\s*size)?\s*(?:of|:|=|is)?\s*({_NUM})\s*({_MULT})?\s*tokens\b", text))
    if batch_tokens:
        suffix = (batch_tokens.group(2) or "").lower()
        binary = {"k": 2**10, "m": 2**20}.get(suffix)
        found["batch_tokens"] = _number(batch_tokens.group(1)) * (binary or _DECIMAL.get(suffix, 1.0))
    tokens = [m for m in re.finditer(rf"\b({_NUM})\s*({_MULT})?\s*tokens\b", text, re.IGNORECASE)
              if not (batch_tokens and m.start() == batch_tokens.start())
              and not re.match(r"\s*(?:per|/|a|each)\s*(?:global\s*)?(?:batch|step|iteration)", text[m.end():],
                               re.IGNORECASE)
              and not re.search(r"batch(?:\s*size)?\s*(?:of|:|=|is)?\s*$", text[:m.start()], re.IGNORECASE)
              and not re.match(r"\s*(?:sequences?|context|seq)", text[m.end():], re.IGNORECASE)]
    if tokens:
        found["tokens"] = _scaled(tokens[0].group(1), tokens[0].group(2))

    seq = (_search(rf"\b(?:sequence(?:\s*length)?|seq(?:uence)?[\s_-]*len(?:gth)?|seq|context(?:\s*length)?|"
                   rf"ctx)\s*(?:of|:|=|is)?\s*({_NUM})\s*(k)?\b", text)
           or _search(rf"\b({_NUM})\s*(k)?[\s-]*(?:tokens?[\s-]*)?(?:context|sequences?|seq(?:uence)?[\s-]*len(?:gth)?|"
                      r"seq)\b", text))
    if seq:
        found["seq"] = _binary_count(seq.group(1), seq.group(2))

    gbs = (_search(rf"\b(?:global[\s_-]*batch(?:[\s_-]*size)?|batch[\s_-]*size|gbs)\s*(?:of|:|=|is)?\s*({_NUM})\s*(k)?"
                   r"(?!\s*(?:thousand|million|billion|trillion|[mbt])?\s*tokens)\b", text)
           or _search(rf"\b({_NUM})\s*(k)?\s*sequences?\s*(?:per|/|a|each)\s*(?:global\s*)?(?:batch|step)", text))
    if gbs:
        found["gbs"] = _binary_count(gbs.group(1), gbs.group(2))

    price = (_search(rf"\$\s*({_NUM})\s*(?:/|per|an|a)\s*(?:gpu[\s-]*)?(?:h|hr|hour)\b", text)
             or _search(rf"({_NUM})\s*(?:usd|dollars?)\s*(?:/|per|an|a)\s*(?:gpu[\s-]*)?(?:h|hr|hour)\b", text))
    if price:
        found["price"] = _number(price.group(1))

    budget = (_search(rf"\bbudget\s*(?:of|:|=|is)?\s*(?:under\s*|up\s*to\s*)?\$?\s*({_NUM})\s*({_MULT})?\b", text)
              or _search(rf"\$\s*({_NUM})\s*({_MULT})?\s*(?:budget|or\s*less|max(?:imum)?|total|cap)\b", text)
              or _search(rf"\b(?:under|below|at\s*most|no\s*more\s*than|max(?:imum)?|within|up\s*to)\s*\$\s*({_NUM})"
                         rf"(?![\d.,])\s*({_MULT})?\b(?!\s*(?:/|per|an?\s)\s*(?:gpu|h))", text))
    if budget:
        found["budget_usd"] = _scaled(budget.group(1), budget.group(2))

    deadline = (_search(rf"\b(?:within|in|under|deadline(?:\s*of)?|by|less\s*than|at\s*most|no\s*more\s*than|"
                        rf"max(?:imum)?)\s*:?\s*({_NUM})\s*(days?|d|weeks?|wks?|months?)\b", text)
                or _search(rf"\b({_NUM})[\s-]*(days?|weeks?|months?)\s*(?:deadline|or\s*less|max(?:imum)?)\b", text))
    if deadline:
        unit = deadline.group(2).lower()
        factor = 7.0 if unit.startswith("w") else 30.0 if unit.startswith("mo") else 1.0
        found["deadline_days"] = _number(deadline.group(1)) * factor

    precision = re.findall(r"(?<![a-z0-9])(fp8|bf16)(?![a-z0-9])", text, re.IGNORECASE)
    if precision:
        found["precision"] = precision[-1].lower()

    for pin in PINS:
        label = r"zero(?:[\s_-]*stage)?" if pin == "zero" else pin
        match = _search(rf"(?<![a-z0-9]){label}\s*[-=:]?\s*(\d+)(?![\d.])", text)
        if match:
            found[pin] = int(match.group(1))

    return PlanRequest(**found)


def merge(previous: PlanRequest, update: PlanRequest) -> PlanRequest:
    """`previous` with every field `update` sets; a new seq or batch size recomputes gbs."""
    data = previous.model_dump()
    given = update.given()
    if "seq" in given and "gbs" not in given and previous.batch_tokens is None:
        data["gbs"] = None  # the old gbs was for the old seq; the default rule chooses again
    if "batch_tokens" in given and "gbs" not in given:
        data["gbs"] = None
    if "gbs" in given:
        data["batch_tokens"] = None
    if "gpu" in given and "gpus" not in given and previous.gpu and previous.gpus:
        data["gpus"] = previous.gpus
    data.update(given)
    return PlanRequest(**data)


def require_complete(request: PlanRequest) -> PlanRequest:
    """InputError naming what is missing (model, GPU type, GPU count), with an example."""
    missing = request.missing()
    if not missing:
        return request
    needs = []
    if "model" in missing:
        needs.append(f"a model (one of {', '.join(catalog.model_names())}, or a path to an HF config.json)")
    if "gpu" in missing and "gpus" in missing:
        needs.append("the hardware: how many GPUs of which type (e.g. 512 H100s)")
    elif "gpu" in missing:
        needs.append(f"the GPU type (one of {', '.join(catalog.gpu_names())})")
    elif "gpus" in missing:
        needs.append("how many GPUs (e.g. 512 H100s)")
    raise InputError(f"the request needs {' and '.join(needs)}: e.g. {EXAMPLE}")


def parse_request(text: str) -> PlanRequest:
    """A complete request: model, gpu and gpus are required (InputError otherwise)."""
    request = parse_partial(text)
    require_complete(request)
    if request.gpus is not None and request.gpus <= 0:
        raise InputError(f"gpus={request.gpus} must be a positive number of GPUs: e.g. {EXAMPLE}")
    return request


def resolve_gbs(request: PlanRequest, seq: int) -> tuple[int | None, str | None]:
    """gbs from a tokens-per-batch request: (gbs, how it was read); (request.gbs, None) otherwise."""
    if request.gbs is not None or request.batch_tokens is None:
        return request.gbs, None
    exact = request.batch_tokens / seq
    gbs = max(1, int(round(exact)))
    how = f"{request.batch_tokens:,.0f} tokens per batch / seq {seq} = {gbs} sequences"
    if gbs != exact:
        how = f"{request.batch_tokens:,.0f} tokens per batch / seq {seq} = {exact:.1f}, rounded to {gbs} sequences"
    return gbs, how
