"""The rules that read the names (paths, models, GPUs) and the GPU counts in a plain-language request, one
function per part of it; the amounts with units are agent/request_amounts.py's.

Each rule reads what it understands from a RequestText, marks those characters as read and puts
the values in `found` (the PlanRequest fields). Rules run in the order parse_partial (agent/request.py)
calls them, with agent/request_steering.py's: names first
(paths, models and GPUs, so that the digits inside 'Llama 3 70B' or 'H100' are never read as
counts), then the quantities with units (tokens, batch, sequence, price, budget, deadline), then
GPU counts, then the words that steer the plan (objective, precision, pins, negations), and last
the model read by family and size in any order ('a 70B Llama 3 model'), once the sizes with other
units ('200B tokens') are taken.

A count or an amount that cannot be meant ('-512 H100s', '512.5 H100s', '-15T tokens', '0 GPUs')
raises InputError naming it: a request is never read as something else than it says.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trainplan.tools.hardware import catalog
from trainplan.tools.core import safe_json
from trainplan.tools.hardware.catalog.names import (
    family_mentions, gpu_mentions, key, model_by_family_and_size, split_gpu_name, split_model_name,
)
from trainplan.tools.core.errors import InputError

from .request_text import NUM, STOPWORDS, RequestText, number

MAX_GPUS = 2**20
"""Most GPUs a request may name (1,048,576; the largest published runs use 16,384 to 100,000)."""
_NODE = (r"(?:nodes?|servers?|machines?|hosts?|boxes|dgx(?:[\s-]*[abh]\d{3})?s?|hgx(?:[\s-]*[abh]\d{3})?s?"
         r"|台(?:机器|服务器)?|个?节点|ノード|노드)")
_CLASSIFIER = r"(?:张|块|卡|枚|개|장)"
_GPU_WORD = r"(?:gpus?|accelerators?|cards?|devices?|张卡|块卡|卡)(?![a-z])"
_AT_MOST_BEFORE = (r"(?:up\s+to|at\s+most|no\s+more\s+than|not\s+more\s+than|max(?:imum)?(?:\s+of)?|<=|≤|"
                   r"fewer\s+than|less\s+than|under|最多|不超过|至多)\s*(?:of\s+)?(?:use\s+|using\s+)?$")
_AT_MOST_AFTER = r"\s*(?:at\s+most|max(?:imum)?|or\s+(?:fewer|less)|以内|以下)(?![a-z])"
_AT_LEAST_BEFORE = (r"(?:at\s+least|no\s+fewer\s+than|not\s+fewer\s+than|no\s+less\s+than|min(?:imum)?(?:\s+of)?|"
                    r">=|≥|至少|不少于)\s*(?:of\s+)?(?:use\s+|using\s+)?$")
_AT_LEAST_AFTER = r"\s*(?:at\s+least|min(?:imum)?|or\s+more|以上)(?![a-z])"
EXAMPLE = '"Llama 3 70B on 512 H100s for 15T tokens"'


def written_at(t: RequestText, start: int, end: int) -> str:
    return t.text[start:end].strip()


# --- names --------------------------------------------------------------------------------------------


JSON_PATH_PATTERN = r"(?<![^\s(\"'])((?:[~.]{0,2}/)?[\w./~-]+\.json)(?![\w/])"
"""A path to a JSON file as a request writes it (group 1)."""


def json_paths_in(text: str) -> list[str]:
    """The JSON file paths a text names: the files a user's request asks the tools to open."""
    return [match.group(1) for match in re.finditer(JSON_PATH_PATTERN, text)]


def read_paths(t: RequestText, found: dict[str, Any]) -> None:
    """Paths to JSON files: a GPU file (it holds bf16_tflops) or a model's HF config.json."""
    for match in t.matches(JSON_PATH_PATTERN):
        path = match.group(1)
        field = "gpu" if _is_gpu_file(path) else "model"
        if field not in found:
            found[field] = path
            found.setdefault("_spans", {})[field] = match.span(1)
            t.mark(*match.span(1))


def _is_gpu_file(path: str) -> bool:
    try:  # bounded: a FIFO or /dev/zero named in a request is not read
        data = safe_json.read_file(Path(path).expanduser(), "a GPU file", safe_json.CONFIG)
    except (InputError, OSError, ValueError):
        return False
    return isinstance(data, dict) and "bf16_tflops" in data


def _model_keys() -> dict[str, str]:
    keys = {key(name): name for name in catalog.model_names()}
    keys.update(catalog.MODEL_ALIASES)
    return keys


def read_model_name(t: RequestText, found: dict[str, Any]) -> None:
    """A catalog model name or alias written together ('Llama 3 70B', 'llama3-70b', 'DeepSeek-V3'):
    the longest such name in the text, separators ignored."""
    if "model" in found:
        return
    chars, index = [], []
    for i, ch in enumerate(t.text):
        if ch.isascii() and ch.isalnum():
            chars.append(ch.lower())
            index.append(i)
    norm = "".join(chars)
    best: tuple[int, int, str, int, int] | None = None
    for name_key, name in _model_keys().items():
        start = norm.find(name_key)
        while start >= 0:
            s, e = index[start], index[start + len(name_key) - 1] + 1
            before = t.text[s - 1] if s else " "
            after = t.text[e] if e < len(t.text) else " "
            glued = before.isascii() and before.isalnum()
            if not glued and not (after.isascii() and after.isdigit()) and not t.is_read(s, e):
                candidate = (len(name_key), -s, name, s, e)
                if best is None or candidate > best:
                    best = candidate
                break
            start = norm.find(name_key, start + 1)
    if best:
        found["model"] = best[2]
        t.mark(best[3], best[4])


_SIZE = r"(?<![0-9a-z.])([0-9]+(?:x[0-9]+)?(?:\.[0-9]+)?)\s*(?:b|billion)(?:[\s-]*param(?:eter)?s?)?(?![a-z])"


def read_model_by_family(t: RequestText, found: dict[str, Any]) -> None:
    """A family and a size written apart, in any order: 'a 70B Llama 3 model', 'a 7B Mistral'.
    A family and size the catalog lacks ('Llama 2 13B'), or a named size of no catalog family
    ('Phi-3 14B'), is refused with the catalog's models."""
    if "model" in found:
        return
    sizes = [(m.group(1).lower() + "b", m) for m in t.matches(_SIZE, 1)]
    for family in family_mentions(t.text):
        if t.is_read(family.start, family.end):
            continue
        name, members = model_by_family_and_size(family, [s for s, _ in sizes])
        if name:
            found["model"] = name
            t.mark(family.start, family.end)
            for size, match in sizes:
                if size in name.lower().split("-"):
                    t.mark(*match.span())
            return
        if sizes:
            written = t.text[family.start:family.end].strip() + " " + sizes[0][1].group(0).strip()
            raise unknown_model(written, members)
    for _, size in sizes:  # 'Phi-3 14B', 'a 14B Phi model': the word next to a size names a model
        before = re.search(r"([a-z][\w.-]*)\s*$", t.before(size.start(), 24), re.IGNORECASE)
        after = re.match(r"\s*([a-z][\w.-]*)", t.text[size.end():size.end() + 24], re.IGNORECASE)
        for word, written in ((before, lambda w: f"{w} {size.group(0).strip()}"),
                              (after, lambda w: f"{size.group(0).strip()} {w}")):
            if word and word.group(1).lower() not in STOPWORDS and not t.is_read(*word.span(1)):
                raise unknown_model(written(word.group(1)), [])
    for size, match in sizes:  # 'QLoRA-tune a 70B': a size alone names the catalog's one model of that size
        same_size = [name for name in catalog.model_names() if split_model_name(name).size == size]
        written = " ".join(match.group(0).split())   # one line, as every error is
        if len(same_size) == 1:
            found["model"] = same_size[0]
            found["model_from_size"] = written
            t.mark(*match.span())
            return
        which = (f"the catalog has {len(same_size)}: {', '.join(same_size)}" if same_size
                 else f"no catalog model has that size (known: {', '.join(catalog.model_names())})")
        raise InputError(f"'{written}' alone does not name a model: {which}; write the model, e.g. "
                         f"\"{same_size[0] if same_size else 'llama3-8b'} on 8 H100s\", or a path to its HF config.json")


def unknown_model(written: str, family: list[str]) -> InputError:
    known = f"its family in the catalog: {', '.join(family)}" if family else f"known: {', '.join(catalog.model_names())}"
    return InputError(f"model '{written}' is not in the catalog ({known}); pass a path to its HF config.json, "
                      "written in the request where the model goes: \"./config.json on 512 H100s\"")


PATH_IN_REQUEST = "in a request, write the file's path where the GPU goes: \"Llama 3 70B on 64 x ./my-gpu.json\""


def not_in_catalog(written: str) -> InputError:
    """catalog.unknown_gpu ('not in the catalog', close names, the GPU-file route), for plain language."""
    return InputError(f"{catalog.unknown_gpu(written)} ({PATH_IN_REQUEST})")


def other_part(written: str, same_base: list[str]) -> InputError:
    """A base the catalog has, with a qualifier none of its entries has ('H100 NVL')."""
    others = ", ".join(same_base)
    return InputError(f"gpu '{written}' is not in the catalog: {others} {'is' if len(same_base) == 1 else 'are'} "
                      f"other parts, with their own peak, memory and interconnect; {catalog.GPU_FILE_HINT} "
                      f"({PATH_IN_REQUEST})")


_NOT_THIS = r"(?:instead\s+of|rather\s+than|not|from|than|vs\.?|versus)\s+(?:the\s+|an?\s+)?(?:[0-9]+\s*)?$"


def read_gpu(t: RequestText, found: dict[str, Any]) -> None:
    """The GPU: a catalog entry as people write it (tools/hardware/catalog/names.py), or InputError when the
    written part is not in the catalog ('H100 NVL' without an NVL entry; 'MI300X', 'RTX 9090')."""
    if "gpu" in found:
        return
    mentions = [m for m in gpu_mentions(t.text) if not t.is_read(m.start, m.end)]
    if mentions:
        wanted = [m for m in mentions if not re.search(_NOT_THIS, t.before(m.start), re.IGNORECASE)]
        mention = (wanted or mentions)[0]
        if mention.name is None:
            same_base = [n for n in catalog.gpu_names() if split_gpu_name(n).base == mention.base]
            raise other_part(mention.written, same_base) if same_base else not_in_catalog(mention.written)
        found["gpu"] = mention.name
        found.setdefault("_spans", {})["gpu"] = (mention.start, mention.end)
        t.mark(mention.start, mention.end)
        return
    unknown = _unknown_gpu(t)
    if unknown:
        raise not_in_catalog(unknown)


_BRANDED = (r"(?<![a-z0-9])((?:rtx|gtx|titan|quadro|tesla|radeon|instinct|gaudi|tpu|trainium|inferentia)"
            r"(?:[\s-]*(?:pro|ada|ultra))?(?:[\s-]*[a-z]{0,3}[0-9]+[a-z0-9]*)?|mi[0-9]{2,3}[a-z]*)(?![a-z0-9])")
_CODE = r"(?<![a-z0-9])([a-z]{1,2}[0-9]{2,4}[a-z]{0,2}|[tlap][0-9])s?(?![a-z0-9])"
_NOT_GPU_CODES = re.compile(r"(?:bf|fp|tf|int|tp|pp|cp|ep|dp|sp|vp|mb|gb|tb|pb|sm|nv|fa)[0-9]+|[a-z]{1,2}0+",
                            re.IGNORECASE)
_GPU_CONTEXT_BEFORE = r"(?:[0-9]\s*(?:k\s*)?(?:[x×*]\s*)?|\b(?:on|using|with|of|use|across)\s+(?:the\s+|an?\s+)?)$"
_GPU_CONTEXT_AFTER = rf"\s*(?:{_GPU_WORD}|{_NODE})"


def _unknown_gpu(t: RequestText) -> str | None:
    """A GPU-looking name the catalog lacks: a brand ('RTX 9090', 'MI300X') anywhere, or a code like
    'V100' (or the one-digit T4, P4, A2) where a GPU goes ('8 V100s', 'on V100', 'on a T4', 'V100 GPUs')."""
    branded = t.first(_BRANDED, 1)
    if branded:
        return branded.group(1)
    for match in t.matches(_CODE, 1):
        code = match.group(1)
        if _NOT_GPU_CODES.fullmatch(code):
            continue
        if (re.search(_GPU_CONTEXT_BEFORE, t.before(match.start()), re.IGNORECASE)
                or re.match(_GPU_CONTEXT_AFTER, t.text[match.end():match.end() + 24], re.IGNORECASE)):
            plural = code.endswith("s") and code[-2].isdigit() and not code[0].islower()
            return code[:-1] if plural else code
    return None


# --- counts -------------------------------------------------------------------------------------------

COUNT_PATTERN = rf"({NUM})\s*(k(?![a-z]))?"
"""A count, with an optional binary k: GPU counts are quoted in binary ('16k H100s' = 16,384)."""


def whole_count(t: RequestText, match: re.Match, what: str, group: int = 1, phrase_end: int | None = None) -> int:
    """The whole positive count of a COUNT_PATTERN match at `group` (its k at group + 1); an error quotes
    the text up to phrase_end ('-512 H100s')."""
    start, end = match.span(group)
    k = match.group(group + 1)
    written = written_at(t, start, phrase_end or (match.end(group + 1) if k else end))
    if t.negative_at(start):
        raise InputError(f"'-{written}' is not a number of {what}: write a positive whole number, "
                         f"e.g. {EXAMPLE}")
    value = number(match.group(group)) * (1024 if k else 1)
    if value != int(value):
        raise InputError(f"'{written}' is not a whole number of {what}: write a whole number, e.g. {EXAMPLE}")
    if value <= 0:
        raise InputError(f"'{written}' is not a usable number of {what}: it must be at least 1, e.g. {EXAMPLE}")
    return int(value)


def _gpu_phrase_end(t: RequestText, index: int, gpu_span: tuple[int, int] | None) -> int | None:
    """End of the GPU named right after `index` ('x H100s', '张H100', ' GPUs', 'x ./gpu.json', '张')."""
    lead = re.match(rf"\s*(?:[x×*]\s*)?(?:{_CLASSIFIER}\s*)?", t.text[index:index + 32], re.IGNORECASE)
    at = index + lead.end()
    if gpu_span and at == gpu_span[0]:
        return gpu_span[1]
    word = re.match(rf"(?:(?:nvidia|amd)\s+)?{_GPU_WORD}", t.text[at:at + 24], re.IGNORECASE)
    if word:
        return at + word.end()
    if re.search(_CLASSIFIER + r"\s*$", lead.group(0)):
        return at
    return None


def _bound(t: RequestText, start: int, end: int, words_before: str, words_after: str) -> tuple[bool, int, int]:
    """Whether the count at start:end is a bound, written before it ('up to 512 H100s', 'at least 256') or
    after it ('512 GPUs at most', '256 GPUs or more'), and the span to mark."""
    window = t.before(start, 32)
    before = re.search(words_before, window, re.IGNORECASE)
    if before:
        return True, start - len(window) + before.start(), end
    after = re.match(words_after, t.text[end:end + 24], re.IGNORECASE)
    if after:
        return True, start, end + after.end()
    return False, start, end


def _set_gpus(t: RequestText, found: dict[str, Any], gpus: int, start: int, end: int,
              per_node: int | None = None) -> None:
    if gpus > MAX_GPUS:
        raise InputError(f"'{written_at(t, start, end)}' is {gpus:,} GPUs, more than {MAX_GPUS:,}: check the count")
    at_least, start, end = _bound(t, start, end, _AT_LEAST_BEFORE, _AT_LEAST_AFTER)
    if at_least:
        found["gpus_at_least"] = True  # the search has no lower bound: the plan uses the count (planner says so)
    bound, start, end = _bound(t, start, end, _AT_MOST_BEFORE, _AT_MOST_AFTER)
    found["max_gpus" if bound else "gpus"] = gpus
    if per_node:
        found["gpus_per_node"] = per_node
    t.mark(start, end)


def read_counts(t: RequestText, found: dict[str, Any]) -> None:
    """How many GPUs (_read_count), and the node size when it is stated apart from the count ('512
    H100s, 8 GPUs per node', '4 GPUs/node')."""
    _read_count(t, found)
    if "gpus_per_node" in found:
        return
    per_node = t.take(rf"{COUNT_PATTERN}\s*(?:{_GPU_WORD}\s*)?(?:per|/|a|each|in\s+each|on\s+each|every)\s*{_NODE}(?![a-z])", 1)
    if per_node:
        found["gpus_per_node"] = whole_count(t, per_node, "GPUs per node", 1, per_node.end())


def _read_count(t: RequestText, found: dict[str, Any]) -> None:
    """How many GPUs: nodes x GPUs per node ('64 nodes of 8 H100s', '64台8卡H100', '8 H100s per node,
    64 nodes', '64 x 8 H100'), a count by the GPU ('512 H100s', '16k H100', '512张H100', 'H100 x 512'),
    'N GPUs', 'N nodes' (x the GPU's gpus_per_node), or 'one H100' / 'a single H100' (1). 'up to N' / 'at
    most N' make it max_gpus."""
    span = found.get("_spans", {}).get("gpu")
    nodes_of = rf"{COUNT_PATTERN}\s*(?:[x×*]\s*)?{_NODE}\s*(?:,\s*)?(?:each\s+|每(?:个|台)?(?:节点|机器)?\s*)?" \
               rf"(?:of|with|having|containing|x|×|\*|each\s+with)?\s*(?:each\s+)?{COUNT_PATTERN}"
    for match in t.matches(nodes_of, 1):
        end = _gpu_phrase_end(t, match.end(), span)
        if end is not None:
            per_node = whole_count(t, match, "GPUs per node", 3, end)
            _set_gpus(t, found, whole_count(t, match, "nodes", 1, end) * per_node, match.start(), end, per_node)
            return
    for match in t.matches(COUNT_PATTERN, 1):
        end = _gpu_phrase_end(t, match.end(), span)
        if end is None:
            continue
        per = re.match(rf"\s*(?:per|/|a|each|in\s+each|on\s+each|every)\s*{_NODE}", t.text[end:end + 32],
                       re.IGNORECASE)
        if per:  # '8 H100s per node' with 'N nodes' elsewhere
            nodes = next(t.matches(rf"{COUNT_PATTERN}\s*(?:[x×*]\s*)?{_NODE}(?![a-z])", 1), None)
            if nodes is None or nodes.start() == match.start():
                continue
            per_node = whole_count(t, match, "GPUs per node", 1, end)
            t.mark(end, end + per.end())
            t.mark(*nodes.span())
            _set_gpus(t, found, whole_count(t, nodes, "nodes") * per_node, match.start(1), end, per_node)
            return
        window = t.before(match.start(1), 24)
        product = re.search(rf"{COUNT_PATTERN}\s*[x×*]\s*$", window, re.IGNORECASE)
        if product:  # '64 x 8 H100': 64 nodes of 8
            per_node = whole_count(t, match, "GPUs per node", 1, end)
            nodes = whole_count(t, product, "nodes")
            _set_gpus(t, found, nodes * per_node, match.start(1) - len(window) + product.start(), end, per_node)
            return
        _set_gpus(t, found, whole_count(t, match, "GPUs", 1, end), match.start(1), end)
        return
    if span:  # 'H100 x 512', 'H100: 512', 'H100を512枚'
        after = re.compile(rf"\s*(?:gpus?|cards)?\s*(?:[x×*:]|を|が)\s*{COUNT_PATTERN}\s*{_CLASSIFIER}?",
                           re.IGNORECASE).match(t.text, span[1], span[1] + 48)
        if after and not t.is_read(*after.span(1)):
            _set_gpus(t, found, whole_count(t, after, "GPUs", 1, after.end()), after.start(), after.end())
            return
    count = next(t.matches(rf"{COUNT_PATTERN}\s*(?:[x×*]\s*)?{_GPU_WORD}", 1), None)
    if count:
        _set_gpus(t, found, whole_count(t, count, "GPUs", 1, count.end()), count.start(1), count.end())
        return
    nodes = next(t.matches(rf"{COUNT_PATTERN}\s*(?:[x×*]\s*)?{_NODE}(?![a-z])", 1), None)
    if nodes:
        per_node = catalog.load_gpu(found["gpu"]).gpus_per_node if "gpu" in found else 8
        _set_gpus(t, found, whole_count(t, nodes, "nodes", 1, nodes.end()) * per_node, nodes.start(1), nodes.end())
        return
    if span:  # 'on one RTX 4090', 'two 4090s', 'a pair of A100s' ('one H100 node' is a node, read above or not at all)
        window = t.before(span[0], 24)
        word = re.search(rf"(?<![a-z])({'|'.join(_COUNT_WORDS)})[\s-]+$", window, re.IGNORECASE)
        grouped = re.match(rf"\s*(?:{_NODE}|clusters?|pods?|racks?)(?![a-z])", t.text[span[1]:span[1] + 24],
                           re.IGNORECASE)
        if word:
            count = _COUNT_WORDS[re.sub(r"\s+", " ", word.group(1).lower())]
            nodes = re.match(rf"\s*{_NODE}(?![a-z])", t.text[span[1]:span[1] + 24], re.IGNORECASE)
            if nodes:  # 'two H100 nodes': nodes x the GPU's gpus_per_node
                per_node = catalog.load_gpu(found["gpu"]).gpus_per_node
                _set_gpus(t, found, count * per_node, span[0] - len(window) + word.start(), span[1] + nodes.end(),
                          per_node)
            elif not grouped:
                _set_gpus(t, found, count, span[0] - len(window) + word.start(), span[1])


_COUNT_WORDS = {"one": 1, "a single": 1, "single": 1, "a pair of": 2, "two": 2, "three": 3, "four": 4, "five": 5,
                "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "sixteen": 16,
                "an": 1, "a": 1, "my": 1}
"""GPU counts written as words, right before the GPU ('two 4090s', 'eight H100s'); larger counts are
written in digits. An article or 'my' right before a GPU is one of it ('on a 4090', 'an H100', 'my 24 GB 3090'),
and one node of it before 'node' ('a H100 node': 8)."""
