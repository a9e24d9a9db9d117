"""The rules that read what steers a plan: the objective, the precision, pinned layout sizes and
negations ('no tensor parallelism' -> tp 1, 'not fp8' -> bf16). See agent/request_rules.py for
how rules read a RequestText."""

from __future__ import annotations

import re
from typing import Any

from trainplan.tools.config.engines import ENGINE_PROFILES
from trainplan.tools.core.errors import InputError

from .request_text import RequestText


OBJECTIVES = {
    "cost": r"cheapest|least\s+expensive|lowest[\s-]+(?:cost|price)|min(?:imi[sz]e|imum|imal)?\s+(?:the\s+)?"
            r"(?:total\s+)?(?:cost|spend(?:ing)?|dollars|price|bill)|most\s+(?:cost[\s-]*(?:effective|efficient)|"
            r"economical)|cost[\s-]*(?:optimal|efficient)|least\s+(?:money|cost)|最便宜|成本最低|最低成本|最省钱|最安",
    "time": r"fastest|quickest|as\s+(?:fast|quickly|soon)\s+as\s+possible|asap|shortest\s+(?:time|training|run)|"
            r"min(?:imi[sz]e|imum|imal)?\s+(?:the\s+)?(?:training\s+|wall[\s-]*clock\s+)?(?:time|days|duration)|"
            r"least\s+time|最快|最短时间|最短",
    "throughput": r"(?:max(?:imi[sz]e|imum)?|highest|best|most)\s+(?:the\s+)?(?:throughput|tokens?/s|"
                  r"tokens\s+per\s+second|mfu)",
}
"""Words that choose the search objective (tools/search/driver.py: throughput, time, cost)."""


LIMITS = {
    "seq": r"(?:longest|largest|biggest|max(?:imum)?|most)\s+(?:context(?:\s+(?:length|window))?|sequence(?:\s+length)?"
           r"|seq(?:uence)?[\s-]*len(?:gth)?|tokens?\s+per\s+sequence)",
    "mbs": r"(?:largest|biggest|max(?:imum)?)\s+(?:micro[\s-]*batch(?:[\s-]*size)?|(?:per[\s-]*device\s+)?batch"
           r"(?:[\s-]*size)?)",
    "gpu": r"(?:smallest|cheapest|least\s+expensive|which)\s+(?:catalog\s+)?(?:gpu|card|accelerator)s?",
}
"""How a request asks a limit of tools/search/limits.py: 'longest context', 'largest micro-batch', 'cheapest GPU'."""


def read_limit(t: RequestText, found: dict[str, Any]) -> None:
    """solve: the first limit the request asks (LIMITS)."""
    hits = [(m.start(), name, m) for name, pattern in LIMITS.items()
            for m in [t.first(rf"(?<![a-z])(?:{pattern})(?![a-z])")] if m]
    if hits:
        _, name, match = min(hits, key=lambda h: h[0])
        found["solve"] = name
        t.mark(*match.span())


def read_objective(t: RequestText, found: dict[str, Any]) -> None:
    """objective: 'cheapest' / 'minimise cost' -> cost, 'fastest' -> time, 'max throughput' -> throughput."""
    hits = [(m.start(), name, m) for name, pattern in OBJECTIVES.items()
            for m in [t.first(rf"(?<![a-z])(?:{pattern})(?![a-z])")] if m]
    if hits:
        _, name, match = min(hits, key=lambda h: h[0])
        found["objective"] = name
        t.mark(*match.span())


_NEGATION = (r"(?<![a-z])(?:not|no|without|w/o|don'?t\s+(?:use|want|need)|do\s+not\s+(?:use|want|need)|avoid(?:ing)?|"
             r"never|disable|skip|不用|不要|不使用|不需要|不开|无)(?:\s+(?:use|using|any|the|a|an|with))*\s*")
_DISABLED_AFTER = (r"\s*(?:off|disabled|disallowed|forbidden|prohibited|(?:is\s+|are\s+)?not\s+(?:allowed|permitted|"
                   r"wanted|needed|supported|available)|=\s*(?:off|false|no|none))(?![a-z])")
FEATURES = {
    "tp": (r"tensor[\s-]*parallel(?:ism)?|tp", 1),
    "pp": (r"pipeline(?:[\s-]*parallel(?:ism)?)?|pipelining|pp", 1),
    "cp": (r"context[\s-]*parallel(?:ism)?|cp", 1),
    "ep": (r"expert[\s-]*parallel(?:ism)?|ep", 1),
    "vpp": (r"interleav(?:ing|ed)(?:\s+schedule)?|virtual[\s-]*pipeline(?:[\s-]*stages)?|vpp", 1),
    "zero": (r"zero|optimi[sz]er[\s-]*(?:state[\s-]*)?sharding", 0),
    "recompute": (r"(?:activation[\s-]*|gradient[\s-]*)?(?:recompute|recomputation|checkpointing)", "none"),
    "attention": (r"flash[\s-]*(?:attention|attn)(?![\s-]*(?:v|version)?[\s-]*[0-9])", "eager"),
}
"""Layout features a negation pins off: 'no tensor parallelism' -> tp=1, 'without pipeline' -> pp=1,
'no activation checkpointing' -> recompute=none, 'without flash attention' -> attention=eager."""


def read_negations(t: RequestText, found: dict[str, Any]) -> set[str]:
    """Pins from negations ('no TP', 'without pipeline parallelism', 'TP off'); also returns the negated
    precisions ('not fp8')."""
    negated = set()
    for match in t.matches(rf"{_NEGATION}(fp8|bf16)(?![a-z0-9])", 1):
        negated.add(match.group(1).lower())
        t.mark(*match.span())
    for match in t.matches(rf"(?<![a-z0-9])(fp8|bf16){_DISABLED_AFTER}", 1):
        negated.add(match.group(1).lower())
        t.mark(*match.span())
    for field, (pattern, off) in FEATURES.items():
        match = (t.first(rf"{_NEGATION}(?:{pattern})(?![a-z0-9])")
                 or t.first(rf"(?<![a-z0-9])(?:{pattern}){_DISABLED_AFTER}"))
        if match:
            found[field] = off
            t.mark(*match.span())
    return negated


def read_precision(t: RequestText, found: dict[str, Any], negated: set[str]) -> None:
    """precision: the last of 'fp8' / 'bf16' written; 'not fp8' alone means bf16 (and the reverse)."""
    said = [m for m in t.matches(r"(?<![a-z0-9])(fp8|bf16)(?![a-z0-9])", 1)]
    for match in said:
        t.mark(*match.span())
    if said:
        found["precision"] = said[-1].group(1).lower()
    elif negated and len(negated) == 1:
        found["precision"] = "bf16" if "fp8" in negated else "fp8"


PIN_NAMES = {
    "tp": r"tp|tensor[\s-]*parallel(?:ism|[\s-]*size)?",
    "pp": r"pp|pipeline[\s-]*parallel(?:ism|[\s-]*size)?|pipeline[\s-]*stages",
    "cp": r"cp|context[\s-]*parallel(?:ism|[\s-]*size)?",
    "ep": r"ep|expert[\s-]*parallel(?:ism|[\s-]*size)?",
    "vpp": r"vpp|virtual[\s-]*(?:pipeline[\s-]*)?stages",
    "zero": r"zero(?:[\s_-]*stage)?",
}
"""How each pinned layout size is written: 'TP8', 'tp=8', 'TP size 8', 'tensor parallelism of 8',
'8-way TP', '16 pipeline stages', 'ZeRO-3'."""


def read_pins(t: RequestText, found: dict[str, Any]) -> None:
    for pin, names in PIN_NAMES.items():
        if pin in found:
            continue
        match = (t.take(rf"(?<![a-z0-9])(?:{names})\s*(?:size|degree)?\s*(?:of|[-=:]|is)?\s*([0-9]+)(?![0-9.])", 1)
                 or t.take(rf"(?<![0-9a-z.])([0-9]+)[\s-]*(?:way\s+)?(?:{names})(?![a-z0-9])", 1))
        if match:
            value = int(match.group(1))
            if pin != "zero" and value < 1 or pin == "zero" and value > 3:
                raise InputError(f"'{t.text[match.start():match.end()].strip()}' is not a {pin} size: "
                                 + ("ZeRO stages are 0-3" if pin == "zero" else f"{pin} is at least 1"))
            found[pin] = value
    if "zero" not in found and t.take(r"(?<![a-z])fsdp(?![a-z])"):
        found["zero"] = 3  # FSDP full shard shards weights, gradients and optimizer: ZeRO-3
    recompute = t.take(r"(?<![a-z])(full|selective)[\s-]*(?:activation[\s-]*)?(?:recompute|recomputation|"
                       r"checkpointing)(?![a-z])")
    if recompute and "recompute" not in found:
        found["recompute"] = recompute.group(1).lower()
    # the Hugging Face models' gradient checkpointing reruns each decoder layer whole: full recompute
    layers = t.take(r"(?<![a-z])(?:gradient|activation)[\s_-]*checkpointing(?![a-z])")
    if layers and "recompute" not in found:
        found["recompute"] = "full"


def read_method(t: RequestText, found: dict[str, Any]) -> None:
    """method: 'QLoRA' -> qlora, 'LoRA' -> lora, 'full fine-tuning' -> full; lora_rank: 'rank 64',
    'r=16'; lora_alpha: 'alpha=32'; lora_dropout: 'lora_dropout=0.05' ('dropout 0.05' when LoRA is named);
    lora_targets: 'adapters on attention', 'attention only' -> attention, 'all linear layers' ->
    all-linear, 'q and v', 'q_proj and v_proj', 'query and value projections' -> qv; fine_tuning: 'fine-tune', 'SFT', 'instruction tuning' (a fine-tune, whatever the method)."""
    refused = t.take(rf"{_NEGATION}(?:q?lora|adapters?)(?![a-z])")
    adapters = None if refused else t.take(r"(?<![a-z])(q?lora)(?![a-z])", 1)
    if refused:
        found["method"] = "full"  # 'without LoRA', 'not using QLoRA': every weight trains
    elif adapters:
        found["method"] = adapters.group(1).lower()
    elif t.take(r"(?<![a-z])full[\s-]*(?:parameter[\s-]*)?(?:fine[\s-]*tun(?:e|ed|ing)|finetun(?:e|ed|ing)|s?ft)"
                r"(?![a-z])"):
        found["method"] = "full"
        found["fine_tuning"] = True
    # NF4 base weights are QLoRA's ('QLoRA 4-bit', 'LoRA on a 4-bit base')
    if found.get("method") in (None, "lora", "qlora") and t.take(r"(?<![a-z0-9])(?:4[\s-]*bit|nf4)(?![a-z0-9])"):
        found["method"] = "qlora"
        found["fine_tuning"] = True
    if t.take(r"(?<![a-z])target[\s_-]*modules?\s*[:=]?\s*['\"]?all[\s_-]*linear['\"]?(?![a-z])"):
        found["lora_targets"] = "all-linear"   # PEFT's target_modules="all-linear"
    qv = t.take(r"(?<![a-z])(?:(?:on|to)\s+(?:the\s+)?)?(?:q(?:_proj)?\s*(?:and|,|&|/|\+)\s*v(?:_proj)?|query\s+and\s+value)"
                r"(?:\s+(?:projections?|layers?|modules?|only))*(?![a-z])")
    if qv:
        found["lora_targets"] = "qv"
    targets = None if qv or "lora_targets" in found else (t.take(r"(?<![a-z])(?:adapters?|lora|targets?)\s+(?:on|to|for)\s+(?:the\s+)?(?P<targets>attention"
                      r"(?:\s+(?:projections?|layers?|modules?|weights?))?(?:\s+only)?)(?![a-z])", "targets")
               or t.take(r"(?<![a-z])(?:attention[\s-]+only|(?:on\s+)?(?:all|every)[\s-]+linear"
                         r"(?:\s+(?:layers?|modules?|projections?))?)(?![a-z])"))
    if targets:
        found["lora_targets"] = "attention" if "attention" in targets.group(0).lower() else "all-linear"
    modules = None if "lora_targets" in found else t.take(
        r"(?<![a-z])target[\s_-]*modules?\s*[:=]?\s*\[?\s*['\"]?(?P<list>[a-z_]+_proj(?:[\s,'\"]+[a-z_]+_proj)*)"
        r"[\s'\"]*\]?", "list")
    if modules:   # PEFT's target_modules as a list: the sets trainplan plans
        names = frozenset(re.findall(r"([a-z_]+)_proj", modules.group("list").lower()))
        target = _TARGET_SETS.get(names)
        if target is None:
            raise InputError(f"target_modules {', '.join(sorted(n + '_proj' for n in names))} is not a set trainplan "
                             "plans: q_proj,v_proj (qv), q/k/v/o_proj (attention) or those and gate/up/down_proj "
                             "(all-linear)")
        found["lora_targets"] = target
    rank = (t.take(r"(?<![a-z])(?:(?:(?:lora|adapter)[\s_-]*)?(?:rank|r\s*[=:])\s*(?:of|=|:|is)?)\s*([0-9]+)(?![0-9.])", 1)
            or (t.take(r"(?<![a-z0-9])r([0-9]{1,4})(?![0-9a-z.])", 1)   # 'LoRA r16', as the layout line writes it
                if found.get("method") in ("lora", "qlora") else None))
    if rank:
        value = int(rank.group(1))
        if value < 1:
            raise InputError(f"'{t.text[rank.start():rank.end()].strip()}' is not a LoRA rank: it is at least 1, e.g. 16")
        found["lora_rank"] = value
    alpha = t.take(r"(?<![a-z])(?:lora[\s_-]*)?alpha\s*(?:of|=|:|is)?\s*([0-9]*\.?[0-9]+)(?![0-9.])", 1)
    if alpha:   # PEFT's lora_alpha: 'alpha=32', 'lora_alpha 16'
        value = float(alpha.group(1))
        if value <= 0:
            raise InputError(f"'{t.text[alpha.start():alpha.end()].strip()}' is not a LoRA alpha: it is above 0, "
                             "e.g. 32 (twice the rank)")
        found["lora_alpha"] = value
    # PEFT's lora_dropout: 'lora_dropout=0.05', and 'dropout 0.1' of a LoRA/QLoRA request (a full fine-tune's bare
    # 'dropout' is the model's own, which the planner does not plan: left unread, so the report lists it)
    adapter_words = r"(?:lora[\s_-]*)?" if found.get("method") in ("lora", "qlora") else r"lora[\s_-]*"
    dropout = t.take(rf"(?<![a-z]){adapter_words}dropout\s*(?:of|=|:|is)?\s*([0-9]*\.?[0-9]+)(?![0-9.])", 1)
    if dropout:
        value = float(dropout.group(1))
        if not 0.0 <= value < 1.0:
            raise InputError(f"'{t.text[dropout.start():dropout.end()].strip()}' is not a dropout probability: it is "
                             "from 0 to below 1, e.g. 0.05")
        found["lora_dropout"] = value
    said = t.take(r"(?<![a-z])(?:fine[\s-]*tun(?:e|ed|ing)|finetun(?:e|ed|ing)|sft|instruction[\s-]*tun(?:e|ed|ing)|"
                  r"微调|ファインチューニング)(?![a-z])")
    if said or found.get("method") in ("lora", "qlora"):  # 'without LoRA' alone is no fine-tune
        found["fine_tuning"] = True


_TARGET_SETS = {frozenset({"q", "v"}): "qv", frozenset({"q", "k", "v", "o"}): "attention",
                frozenset({"q", "k", "v", "o", "gate", "up", "down"}): "all-linear"}
"""PEFT's target_modules of a Llama-style model as lora_targets (LoRA on the attention projections, on q and v, or
on every linear layer of the blocks)."""

ENGINES = {profile.name: profile.pattern for profile in ENGINE_PROFILES}
"""How the engines of tools/config/engines.py are written (each profile's pattern, for its `spelled` name)."""


def read_engine(t: RequestText, found: dict[str, Any]) -> None:
    """engine: the one engine the text names ('using DeepSpeed', 'in Megatron-LM'). A refused engine
    ('not DeepSpeed', 'without Megatron') sets nothing: a plan names one engine or none, and the words
    stay unread so that the report lists them. Two engines named: InputError."""
    named: dict[str, re.Match] = {}
    refused: list[tuple[str, re.Match, re.Match]] = []
    for engine, pattern in ENGINES.items():
        for match in t.matches(rf"(?<![a-z0-9])(?:{pattern})(?![a-z0-9])"):
            refusal = re.search(rf"{_NEGATION}$", t.before(match.start(), 40), re.IGNORECASE)
            if refusal:
                refused.append((engine, match, refusal))
            else:
                named.setdefault(engine, match)
    if len(named) > 1:
        raise InputError(f"the request names {len(named)} engines ({', '.join(named)}): name one, "
                         "or pass --engine")
    for engine, match in named.items():
        found["engine"] = engine
        t.mark(*match.span())
        for other, match, refusal in refused:  # 'not DeepSpeed but Megatron': the choice honours the refusal
            if other != engine:
                t.mark(match.start() - len(t.before(match.start(), 40)) + refusal.start(), match.end())


def _read_named(t: RequestText, found: dict[str, Any], field: str, names: dict[str, str], suffix: str = "",
                refused_after: bool = False) -> None:
    """found[field]: the first of `names` (value -> pattern, the more specific first) that the text names and
    does not refuse ('no DualPipe'; with refused_after also 'flash attention off'); a refused mention sets
    nothing and stays unread, so that the report lists it."""
    for name, pattern in names.items():
        for match in t.matches(rf"(?<![a-z0-9])(?:{pattern}){suffix}(?![a-z0-9])"):
            if (re.search(rf"{_NEGATION}$", t.before(match.start(), 40), re.IGNORECASE)
                    or (refused_after and re.match(_DISABLED_AFTER, t.text[match.end():], re.IGNORECASE))):
                continue
            t.mark(*match.span())
            found.setdefault(field, name)


_FLASH = r"flash[\s-]*(?:attention|attn)"
ATTENTION_KERNELS = {
    "eager": r"(?:eager|unfused|naive|vanilla)[\s-]*(?:attention|attn)|attn[\s_-]*implementation\W*eager",
    "flash2": rf"{_FLASH}[\s-]*(?:v|version[\s-]*)?2(?:\.[0-9x]+)?|fa[\s-]*2|sdpa|scaled[\s-]*dot[\s-]*product[\s-]*attention",
    "flash1": rf"{_FLASH}[\s-]*(?:v|version[\s-]*)?1(?:\.[0-9x]+)?|fa[\s-]*1|triton[\s-]*{_FLASH}",
    "flash": rf"{_FLASH}[\s-]*(?:v|version[\s-]*)?3|fa[\s-]*3|cudnn[\s-]*(?:fused[\s-]*)?(?:attention|attn)|"
             rf"(?:te|transformer[\s-]*engine)[\s-]*(?:fused[\s-]*)?(?:attention|attn)|{_FLASH}",
}
"""How the attention kernels of tools/config/contract.py's Attention are written: 'eager attention', 'FlashAttention-2',
'FA2', 'SDPA' (PyTorch's flash backend is FlashAttention-2), 'FlashAttention 1', 'Triton flash attention',
'FlashAttention-3', 'cuDNN attention', 'Transformer Engine attention', and plain 'flash attention' (the GPU's own
fused kernel); the more specific first."""


def read_kernels(t: RequestText, found: dict[str, Any]) -> None:
    """Kernel libraries the Hugging Face stacks load: 'Liger (kernels)' -> its fused RMSNorm, RoPE and SwiGLU
    (fused_kernels) and fused linear cross-entropy (loss_kernel fused_linear); 'Cut Cross-Entropy' -> the fused
    loss alone; 'pure bf16' -> pure_bf16; 'mixed precision' or 'fp32 master' -> pure_bf16 false; packed documents
    ('documents of 300 tokens') -> document_tokens, 'packing' -> packing; '8-bit Adam', 'adamw_bnb_8bit' ->
    optimizer_8bit."""
    if t.take(r"(?<![a-z])liger(?:[\s_-]*kernels?)?(?![a-z])"):
        found.setdefault("fused_kernels", True)
        found.setdefault("loss_kernel", "fused_linear")
    elif t.take(r"(?<![a-z])(?:cut[\s_-]*cross[\s_-]*entropy|cce)(?![a-z])"):
        found.setdefault("loss_kernel", "fused_linear")
    # packed documents: 'documents of 300 tokens', '300-token documents', 'document length 300' (document_tokens);
    # 'packing', 'sample packing', 'packed' alone say only that sequences are packed (packing)
    of_tokens = t.first(r"(?<![a-z])documents?\s+of\s+(?:about\s+|~\s*)?([0-9][0-9,]*)\s*tokens?(?![a-z])", 1)
    if of_tokens and re.search(r"[0-9][0-9.,]*\s*[a-z]?\s*$", t.before(of_tokens.start())):
        of_tokens = None   # '10k documents of 300 tokens' is a data set (request_amounts.read_samples)
    elif of_tokens:
        t.mark(*of_tokens.span())
    documents = (of_tokens
                 or t.take(r"(?<![0-9a-z])([0-9][0-9,]*)[\s-]*tokens?[\s-]+documents?(?![a-z])", 1)
                 or t.take(r"(?<![a-z])(?:mean\s+|average\s+)?document[\s_-]*(?:length|tokens)\s*(?:of|=|:|is)?\s*"
                           r"([0-9][0-9,]*)(?![0-9.])", 1))
    if documents:
        value = int(documents.group(1).replace(",", ""))
        if value < 1:
            raise InputError(f"'{t.text[documents.start():documents.end()].strip()}' is not a document length: it is "
                             "at least 1 token, e.g. 300")
        found["document_tokens"] = value
    packed = t.take(r"(?<![a-z])(?:sample[\s_-]*packing|packing|packed)(?:\s+(?:to|into)\s+([0-9][0-9,]*)\s*(k?)"
                    r"(?:[\s-]*tokens?)?)?(?![a-z0-9])")
    if packed:
        found["packing"] = True
        # 'packed to 4096 (tokens)', 'packing into 8k', 'packing 10k samples of 300 tokens into 4096 (token
        # sequences)': the sequence each pack fills
        into = packed if packed.group(1) else t.take(r"(?<![a-z])into\s+([0-9][0-9,]*)\s*(k?)(?:[\s-]*tokens?)?"
                                                      r"(?:[\s-]*(?:sequences?|packs?))?(?![a-z0-9])")
        if into:   # read before any other length: request_amounts._set_seq refuses a later one that disagrees
            found["seq"] = int(into.group(1).replace(",", "")) * (1024 if into.group(2) else 1)
    # bitsandbytes' 8-bit Adam: '8-bit Adam(W)', '8bit optimizer', 'adamw_8bit', 'adamw_bnb_8bit', 'paged_adamw_8bit'
    if t.take(r"(?<![a-z0-9])(?:optim(?:i[sz]er)?\s*[=:]?\s*)?(?:(?:paged[\s_-]*)?adam(?:w)?[\s_-]*(?:bnb[\s_-]*)?"
              r"8[\s_-]*bit|8[\s_-]*bit[\s_-]*(?:paged[\s_-]*)?(?:adam(?:w)?|optimi[sz]er)(?:[\s_-]*states?)?)"
              r"(?![a-z0-9])"):
        found["optimizer_8bit"] = True
    # 'pure bf16', 'pure bfloat16': every state in bf16 with no fp32 master (pure_bf16)
    if t.take(r"(?<![a-z])pure[\s_-]*(?:bf16|bfloat16)(?![a-z0-9])"):
        found["pure_bf16"] = True
    # 'mixed precision', 'an fp32 master': bf16 compute over fp32 master weights (pure_bf16 false, the CLI's
    # --mixed-precision)
    if t.take(r"(?<![a-z])(?:mixed[\s_-]*precision|(?:(?:keep(?:ing|s)?|with)\s+)?(?:an?\s+)?fp32[\s_-]*master(?:[\s_-]*(?:weights?|copy))?)(?![a-z])"):
        found.setdefault("pure_bf16", False)


def read_attention(t: RequestText, found: dict[str, Any]) -> None:
    """attention: the first kernel the text names, as `estimate --attention` sets it. A refused one
    ('no FlashAttention-2') sets nothing and stays unread; 'without flash attention' is read by
    read_negations (attention=eager)."""
    _read_named(t, found, "attention", ATTENTION_KERNELS, refused_after=True)   # 'flash attention off': eager


SCHEDULES = {
    "dualpipe": r"dual[\s-]*pipe(?:[\s-]*v)?",
    "interleaved": r"interleaved[\s-]*(?:1f1b|one[\s-]*f(?:orward)?[\s-]*one[\s-]*b(?:ackward)?)|interleaved\s+"
                   r"(?:pipeline\s+)?schedule",
    "zb-h1": r"zero[\s-]*bubble(?:[\s-]*(?:h1|schedule|pipeline))?|zb[\s-]*h1",
    "1f1b": r"1f1b|one[\s-]*forward[\s-]*one[\s-]*backward",
    "gpipe": r"gpipe",
}
"""How the pipeline schedules of tools/config/contract.py's Schedule are written ('DualPipe', 'interleaved 1F1B',
'zero bubble', 'ZB-H1', '1F1B', 'GPipe'); the more specific first."""


def read_schedule(t: RequestText, found: dict[str, Any]) -> None:
    """schedule: the first schedule the text names, pinned as `estimate --schedule` pins it. A refused
    one ('no DualPipe') sets nothing and stays unread."""
    _read_named(t, found, "schedule", SCHEDULES, suffix=r"(?:[\s-]+(?:pipeline[\s-]+)?schedule)?")


DISPATCHERS = {
    "deepep": r"deep[\s-]*ep",
    "allgather": r"all[\s-]*gather[\s-]+(?:token[\s-]+)?dispatch(?:er|ing)?",
    "alltoall": r"all[\s-]*to[\s-]*all[\s-]+(?:token[\s-]+)?dispatch(?:er|ing)?",
}
"""How the MoE token dispatchers of tools/core/enums.py's Dispatcher are written: 'DeepEP' (DeepSeek's dispatch and
combine kernels), 'allgather dispatcher', 'all-to-all dispatch'; a plain 'all-to-all' names a collective, not
the dispatcher, and is not read."""


def read_dispatcher(t: RequestText, found: dict[str, Any]) -> None:
    """dispatcher: the first MoE token dispatcher the text names, as `estimate --dispatcher` sets it. A refused one
    ('no DeepEP') sets nothing and stays unread."""
    _read_named(t, found, "dispatcher", DISPATCHERS)
