"""Catalog names as people write them, derived from the catalog's own entries (no alias lists).

GPUs. An entry's name is parts joined by '-': a base and qualifiers. A qualifier is a form factor
(sxm, pcie, nvl) or a memory size ('80gb'); every other part belongs to the base. So
'h100-sxm-80gb' is the base h100 with {sxm, 80gb}, 'h100-pcie' is h100 with {pcie}, 'rtx-4090'
is the base rtx4090 and 'mi300x' the base mi300x. People write the base with some qualifiers
next to it, in any order: 'H100', 'H100 SXM5', 'H100 PCIe', 'A100 40GB', '80GB A100',
'A100-SXM4-80GB', '8xH100'. A mention names the entry of its base whose qualifiers include every
written one. With none written it names the SXM part with the most memory, which is what 'H100'
or 'A100' alone means in training papers. Written qualifiers that no entry of the base has
('H100 NVL' when the catalog has no NVL entry) name nothing: callers refuse, and never substitute
a part with a different peak or interconnect.

Models. An entry's name is a family with its version ('llama3', 'qwen2.5', 'mistral'), a size
('70b', '8x7b') and variants ('a3b', 'lite'). `model_by_family_and_size` reads a family and a
size written apart and in any order ('a 70B Llama 3 model', 'a 7B Mistral').
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from trainplan.tools.hardware.catalog.entries import GPU_ALIASES, gpu_memory_gib, gpu_names, model_names

_FORM_FACTORS = ("sxm", "pcie", "nvl")
_QUALIFIER_PART = re.compile(r"(?:sxm\d?|pcie|nvl|\d{2,3}gb)")
_SEP = r"[\s_-]*"
QUALIFIER = r"(?:sxm\d?|pci[\s-]?e(?:xpress)?|nvl|\d{2,3}\s*g(?:i?b)?)"
"""A qualifier as written in text (case-insensitive): 'SXM5', 'PCIe', 'PCI-E', 'NVL', '80 GB', '80GiB', '80G'."""
_LATE_MEMORY = r"\d{2,3}\s*g(?:i?b)?"
"""A memory size after the plural ('A100s 40GB'), the one qualifier read there."""


def key(name: str) -> str:
    """Lower-case letters and digits only: 'Llama-3 70B' -> 'llama370b'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def canonical_qualifier(written: str) -> str:
    """'SXM5' -> 'sxm', 'PCI-E' -> 'pcie', '80 GiB' -> '80gb', 'NVL' -> 'nvl'."""
    q = key(written)
    if q.startswith("sxm"):
        return "sxm"
    if q.startswith("pci"):
        return "pcie"
    memory = re.fullmatch(r"(\d+)g(?:i?b)?", q)
    return f"{memory.group(1)}gb" if memory else q


@dataclass(frozen=True)
class GpuEntry:
    """A catalog GPU name split into its base and qualifiers."""

    name: str
    base: str
    base_parts: tuple[str, ...]
    qualifiers: frozenset[str]

    @property
    def memory_gb(self) -> int:
        sizes = [int(q[:-2]) for q in self.qualifiers if q.endswith("gb")]
        return max(sizes, default=0)


def split_gpu_name(name: str) -> GpuEntry:
    parts = [p for p in name.lower().split("-") if p]
    quals = [p for p in parts if _QUALIFIER_PART.fullmatch(p)]
    base_parts = tuple(p for p in parts if p not in quals) or tuple(parts)
    return GpuEntry(name=name, base="".join(base_parts), base_parts=base_parts,
                    qualifiers=frozenset(canonical_qualifier(q) for q in quals))


def _memory_fits(entry: GpuEntry, written_gb: int) -> bool:
    """A written memory size fits an entry named with it, or, when the name states none, the
    entry's catalog memory within 5% ('80GB' and 79.6 GiB usable)."""
    if entry.memory_gb:
        return entry.memory_gb == written_gb
    capacity = gpu_memory_gib(entry.name)
    if capacity is None:  # not a catalog file (a name list given by a caller): no memory known
        return False
    return abs(capacity - written_gb) <= 0.05 * written_gb


def _has(entry: GpuEntry, qualifier: str) -> bool:
    if qualifier.endswith("gb") and qualifier[:-2].isdigit():
        return _memory_fits(entry, int(qualifier[:-2]))
    return qualifier in entry.qualifiers


def choose_gpu(entries: list[GpuEntry], written: set[str]) -> GpuEntry | None:
    """The entry (all of one base) whose qualifiers include every written one: with several, the
    SXM part, then the most memory, then the shortest name; None when no entry has them all."""
    matching = [e for e in entries if all(_has(e, q) for q in written)]
    if not matching:
        return None
    return min(matching, key=lambda e: ("sxm" not in e.qualifiers, -e.memory_gb, len(e.qualifiers), e.name))


@dataclass(frozen=True)
class GpuMention:
    """A GPU named in text: the catalog entry (None: the catalog has no such part), as written."""

    name: str | None
    written: str
    start: int
    end: int
    base: str


_BRAND = r"(?:(?:nvidia|amd|geforce|instinct|tesla)[\s_-]*)*"
"""Vendor and line words written before a GPU ('NVIDIA H100', 'AMD Instinct MI300X'): part of the mention."""


def _alias_pattern(alias: str) -> str:
    """A normalised alias ('rtx4090', 'h100pcie') as a pattern that admits a separator where a word of
    two or more letters meets digits ('RTX 4090', 'H100 PCIe'), but not inside a code like 'a100'."""
    runs = re.findall(r"[a-z]+|[0-9]+", alias)
    out = re.escape(runs[0])
    for previous, run in zip(runs, runs[1:]):
        letters = previous if previous.isalpha() else run
        out += (_SEP if len(letters) >= 2 else "") + re.escape(run)
    return out


@lru_cache(maxsize=8)
def _gpu_index(names: tuple[str, ...], aliases: tuple[tuple[str, str], ...]
               ) -> tuple[dict[str, list[GpuEntry]], dict[str, str], re.Pattern]:
    """Entries by base (an alias that is not a base is a group of its one entry), the group of each
    spelling (normalised), and the pattern that finds mentions."""
    groups: dict[str, list[GpuEntry]] = {}
    entries = {}
    for name in names:
        entry = entries[name] = split_gpu_name(name)
        groups.setdefault(entry.base, []).append(entry)
    spelling = {}  # pattern -> group
    for entry in entries.values():
        spelling[_SEP.join(re.escape(p) for p in entry.base_parts)] = entry.base
    for alias, name in aliases:
        if name in entries and alias not in groups and not alias.isdigit():
            groups.setdefault(alias, [entries[name]])
            spelling.setdefault(_alias_pattern(alias), alias)
    alternatives = "|".join(sorted(spelling, key=len, reverse=True))
    # A base starts a word (or follows a count glued with x: '8xH100') and ends one, save for a plural
    # 's' or glued qualifiers ('H100SXM', 'A100-80GB'); the plural may follow the qualifiers ('A100 40GBs'),
    # and qualifiers may follow it in brackets ('A100s (40GB)').
    pattern = re.compile(
        rf"(?P<pre>(?<![a-z0-9])\d{{2,3}}\s*gi?b\s+)?(?P<brand>(?<![a-z0-9]){_BRAND})?"
        rf"(?:(?<![a-z0-9])|(?<=[0-9][x×]))(?P<base>{alternatives})"
        rf"(?P<post>(?:{_SEP}{QUALIFIER}(?=s?(?![a-z0-9])))*)(?P<plural>s?)(?![a-z0-9])"
        rf"(?P<paren>\s*\(\s*{QUALIFIER}(?:[\s,/]+{QUALIFIER})*\s*\))?"
        rf"(?P<late>(?<=s)[\s_-]+{_LATE_MEMORY}(?![a-z0-9]))?", re.IGNORECASE)
    return groups, {key(p.replace(_SEP, "")): g for p, g in spelling.items()}, pattern


def gpu_mentions(text: str, names: list[str] | None = None) -> list[GpuMention]:
    """Every GPU mentioned in `text`, in order, each resolved to a catalog entry or None. With the
    real catalog (names None) each entry's JSON 'aliases' are spellings too."""
    aliases = tuple(sorted(GPU_ALIASES.items())) if names is None else ()
    groups, group_of, pattern = _gpu_index(tuple(names if names is not None else gpu_names()), aliases)
    out = []
    for match in pattern.finditer(text):
        group = group_of[key(match.group("base"))]
        paren = (match.group("paren") or "") + (match.group("late") or "")
        written_quals = {canonical_qualifier(q) for q in re.findall(
            QUALIFIER, " ".join((match.group("pre") or "", match.group("post"), paren)), re.IGNORECASE)}
        chosen = choose_gpu(groups[group], written_quals)
        written = (text[match.start():match.end("post")] + (" " + paren.strip() if paren else "")).strip()
        out.append(GpuMention(name=chosen.name if chosen else None, written=written, start=match.start(),
                              end=match.end(), base=group))
    out.extend(_bare_number_mentions(text, aliases, out))
    return sorted(out, key=lambda m: m.start)


_BARE_NUMBER_GPU = (r"(?<![0-9a-z.,$£€])(?P<base>{alias})s(?![a-z0-9])"
                    r"|(?<![a-z0-9])(?:an?|one|single|my|[0-9]{{1,3}}\s*x?)\s+(?P<size>[0-9]+\s*gb\s+)?(?P<single>{alias})"
                    r"(?![a-z0-9])")
"""An alias that is a bare number ('4090') names a GPU only in the plural ('two 4090s') or after an article,
'my' or a count, with its memory or not ('a 4090', 'a 24 GB 4090', 'my 4090', '1 4090', '2x 3090'); '4090 GPUs'
is a count, and '4090 steps', 'a 4090-token sequence' or '$4090' stay numbers."""


def _bare_number_mentions(text: str, aliases: tuple[tuple[str, str], ...],
                          found: list[GpuMention]) -> list[GpuMention]:
    out = []
    for alias, name in aliases:
        if not alias.isdigit():
            continue
        for match in re.finditer(_BARE_NUMBER_GPU.format(alias=re.escape(alias)), text, re.IGNORECASE):
            if any(m.start < match.end() and match.start() < m.end for m in found):
                continue  # inside a mention already read ('RTX 4090s')
            entry = split_gpu_name(name)
            written = match.group("base") or match.group("single")
            if match.group("single") and re.match(r"\s*-?\s*(?:tokens?|steps?|seq)", text[match.end():], re.I):
                continue   # 'a 4090-token sequence'
            start = match.start("base") if match.group("base") else match.start("size" if match.group("size") else
                                                                                   "single")
            out.append(GpuMention(name=name, written=written, start=start, end=match.end(), base=entry.base))
    return out


# --- models ------------------------------------------------------------------------------------------

_SIZE_PART = re.compile(r"\d+(?:\.\d+)?b|\d+x\d+(?:\.\d+)?b")


@dataclass(frozen=True)
class ModelEntry:
    """A catalog model name split into family letters, version, size and variants."""

    name: str
    letters: str
    version: str
    size: str | None

    @property
    def family(self) -> str:
        return self.letters + self.version


def split_model_name(name: str) -> ModelEntry:
    parts = name.lower().split("-")
    head = re.fullmatch(r"([a-z]+)(\d+(?:\.\d+)?)?", parts[0])
    letters, version = (head.group(1), head.group(2) or "") if head else (parts[0], "")
    size = next((p for p in parts[1:] if _SIZE_PART.fullmatch(p)), None)
    return ModelEntry(name=name, letters=letters, version=version, size=size)


def _version_fits(catalog_version: str, written: str | None) -> bool:
    """'3' fits '3', '3.1' and '3.3' (a point release of the same architecture) and an unwritten one."""
    if not written:
        return True
    return written == catalog_version or written.startswith(catalog_version + ".")


@dataclass(frozen=True)
class FamilyMention:
    letters: str
    version: str | None
    start: int
    end: int


def family_mentions(text: str, names: list[str] | None = None) -> list[FamilyMention]:
    """Model families written in `text` ('Llama 3', 'llama-3.1', 'Mistral', 'Qwen2.5'), in order."""
    entries = [split_model_name(n) for n in (names if names is not None else model_names())]
    letters = sorted({e.letters for e in entries}, key=len, reverse=True)
    pattern = re.compile(rf"(?<![a-z0-9])({'|'.join(map(re.escape, letters))})(?:[\s_-]*(\d+(?:\.\d+)?)"
                         r"(?![\d.]*\s*(?:b|x\d|billion)(?![a-z])))?(?![a-z])", re.IGNORECASE)
    return [FamilyMention(m.group(1).lower(), m.group(2), m.start(), m.end()) for m in pattern.finditer(text)]


def model_by_family_and_size(family: FamilyMention, sizes: list[str],
                             names: list[str] | None = None) -> tuple[str | None, list[str]]:
    """(the catalog model of this family with one of the written sizes, the family's catalog members of
    any version).

    sizes are written sizes normalised like catalog parts ('70b', '8x7b'). With no size written, a
    family with one member in the catalog names it ('a Mistral model')."""
    family_members = [e for e in (split_model_name(n) for n in (names if names is not None else model_names()))
                      if e.letters == family.letters]
    members = [e for e in family_members if _version_fits(e.version, family.version)]
    matches = [e for e in members if e.size in sizes]
    everyone = [e.name for e in family_members]
    if len(matches) == 1:
        return matches[0].name, everyone
    if not sizes and len(members) == 1:
        return members[0].name, everyone
    return None, everyone
