"""The catalog's entries as files: where they live, their names, and the spellings their JSON lists
(tools/hardware/catalog/__init__.py loads and validates them; names.py reads names as people write them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CATALOG_DIR = Path(__file__).parent
MODELS_DIR = CATALOG_DIR / "models"
GPUS_DIR = CATALOG_DIR / "gpus"

# Spellings people write, normalised (lower case, no spaces, dots, underscores or hyphens).
MODEL_ALIASES = {
    "llama38b": "llama3-8b",
    "llama318b": "llama3-8b",
    "llama370b": "llama3-70b",
    "llama3170b": "llama3-70b",
    "llama3405b": "llama3-405b",
    "llama31405b": "llama3-405b",
    "deepseekv3": "deepseek-v3",
    "dsv3": "deepseek-v3",
    "gpt3": "gpt3-175b",
    "gpt3175b": "gpt3-175b",
    "llama8b": "llama3-8b",
    "llama70b": "llama3-70b",
    "llama405b": "llama3-405b",
    "deepseekv3671b": "deepseek-v3",
}


def _normalise(name: str) -> str:
    return re.sub(r"[\s._\-/]+", "", name.lower())


def _gpu_aliases() -> dict[str, str]:
    """Normalised alias -> catalog name, from each GPU JSON's 'aliases' (the one place they are written)."""
    aliases = {}
    for path in sorted(GPUS_DIR.glob("*.json")):
        for alias in json.loads(path.read_text()).get("aliases", []):
            aliases.setdefault(_normalise(alias), path.stem)
    return aliases


GPU_ALIASES = _gpu_aliases()
"""Spellings people write for catalog GPUs (normalised: lower case, no spaces, dots, underscores or
hyphens) -> catalog name; plain-language parsing matches these too."""
def model_names() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def gpu_names() -> list[str]:
    return sorted(p.stem for p in GPUS_DIR.glob("*.json"))




def gpu_memory_gib(name: str) -> float | None:
    """The memory_gib a catalog GPU entry states, or None when `name` is no catalog file."""
    path = GPUS_DIR / f"{name}.json"
    if not path.is_file():
        return None
    memory = json.loads(path.read_text()).get("memory_gib")
    return float(memory) if isinstance(memory, (int, float)) else None
