"""GPU and model names as people write them, derived from the catalog entries themselves: a new
entry (h100-pcie, rtx-4090, mi300x) is found in text with no alias list to update."""

from __future__ import annotations

import pytest

from trainplan.tools.hardware.catalog import gpu_names
from trainplan.tools.hardware.catalog.names import (
    choose_gpu, family_mentions, gpu_mentions, model_by_family_and_size, split_gpu_name,
)

CATALOG = ["a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm-80gb", "h100-pcie", "h100-nvl-94gb", "b200",
           "rtx-4090", "mi300x", "l40s"]
"""A catalog with parts beside the SXM ones, as the practitioners' catalog grows (names only)."""


def names_in(text: str) -> list[str | None]:
    return [m.name for m in gpu_mentions(text, CATALOG)]


@pytest.mark.parametrize(("text", "name"), [
    ("512 H100s", "h100-sxm-80gb"),          # a base alone: the SXM part with the most memory
    ("8xH100", "h100-sxm-80gb"),
    ("H100 SXM5", "h100-sxm-80gb"),
    ("H100-SXM-80GB", "h100-sxm-80gb"),
    ("H100 PCIe", "h100-pcie"),
    ("h100 pci-e", "h100-pcie"),
    ("H100 NVL", "h100-nvl-94gb"),
    ("A100", "a100-sxm-80gb"),
    ("A100 40GB", "a100-sxm-40gb"),
    ("40GB A100s", "a100-sxm-40gb"),
    ("8 A100 40GBs", "a100-sxm-40gb"),       # the plural after the qualifier keeps the qualifier
    ("H100 PCIes", "h100-pcie"),
    ("8 A100s (40GB)", "a100-sxm-40gb"),     # qualifiers in brackets after the plural count too
    ("8 H100s (PCIe)", "h100-pcie"),
    ("8 A100s (for now)", "a100-sxm-80gb"),  # words in brackets that are no qualifier change nothing
    ("A100-SXM4-80GB", "a100-sxm-80gb"),
    ("RTX 4090", "rtx-4090"),
    ("rtx-4090s", "rtx-4090"),
    ("MI300X", "mi300x"),
    ("L40S", "l40s"),
    ("用512张H100训练", "h100-sxm-80gb"),
])
def test_written_names_find_their_entry(text, name):
    assert names_in(text) == [name]


@pytest.mark.parametrize("text", ["A100 24GB", "B200 PCIe", "MI300X SXM"])
def test_qualifiers_no_entry_has_name_nothing(text):
    """A written qualifier no entry of the base has is not dropped: the mention names no entry."""
    assert names_in(text) == [None]


@pytest.mark.parametrize("text", ["on a 100 node cluster", "H1000", "bh100", "fp8 and bf16", "Llama 3 70B"])
def test_words_that_are_not_gpus(text):
    assert names_in(text) == []


def test_split_and_choose():
    entry = split_gpu_name("h100-sxm-80gb")
    assert (entry.base, entry.qualifiers) == ("h100", frozenset({"sxm", "80gb"}))
    assert split_gpu_name("rtx-4090").base == "rtx4090"
    h100s = [split_gpu_name(n) for n in ("h100-pcie", "h100-sxm-80gb")]
    assert choose_gpu(h100s, set()).name == "h100-sxm-80gb"
    assert choose_gpu(h100s, {"pcie"}).name == "h100-pcie"
    assert choose_gpu(h100s, {"nvl"}) is None


def test_the_real_catalog_resolves_every_entry_by_its_own_name():
    for name in gpu_names():
        assert [m.name for m in gpu_mentions(f"8 x {name}")] == [name]


@pytest.mark.parametrize(("text", "name"), [
    ("NVIDIA H100 PCIe 80GB", "h100-pcie-80gb"),
    ("AMD Instinct MI300X", "mi300x"),
    ("GeForce RTX 4090", "rtx-4090"),
    ("64 GB200", "gb200-nvl72"),
])
def test_the_catalog_aliases_are_spellings_too(text, name):
    """Each catalog JSON's 'aliases' are read as spellings (the real catalog, when it has the entry)."""
    if name not in gpu_names():
        pytest.skip(f"{name} is not in the catalog")
    assert [m.name for m in gpu_mentions(text)] == [name]


def test_a_bare_number_is_not_a_gpu_alias():
    assert gpu_mentions("on 4090 GPUs") == []


@pytest.mark.parametrize(("text", "sizes", "model"), [
    ("a 70B Llama 3 model", ["70b"], "llama3-70b"),
    ("Llama 3.1", ["405b"], "llama3-405b"),
    ("a Mistral", [], "mistral-7b"),
    ("Qwen 2.5", ["7b"], "qwen2.5-7b"),
    ("Qwen3", ["8b"], "qwen3-8b"),
    ("Mixtral", ["8x22b"], "mixtral-8x22b"),
    ("Llama 2", ["70b"], None),   # another version of the family is not this one
    ("Llama 3", [], None),        # three sizes: which one is not guessed
])
def test_model_family_and_size(text, sizes, model):
    family = family_mentions(text)[0]
    assert model_by_family_and_size(family, sizes)[0] == model


@pytest.mark.parametrize(("text", "gpu"), [
    ("Llama 3 8B on 8xA100-40G", "a100-sxm-40gb"),   # 'G' for GB, as people write it
    ("Llama 3 8B on 8 A100 40G", "a100-sxm-40gb"),
    ("Llama 3 8B on 8 A100s 40GB", "a100-sxm-40gb"),   # the memory after the plural
    ("Llama 3 8B on 8 H100 80G", "h100-sxm-80gb"),
])
def test_a_memory_size_written_as_g_or_after_the_plural_picks_the_part(text, gpu):
    from trainplan.agent.request import parse_partial

    request = parse_partial(text)
    assert (request.gpu, request.gpus, request.unparsed) == (gpu, 8, None)
