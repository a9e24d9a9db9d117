"""Model and GPU catalogs: JSON files looked up by name, or any path to such a file.

Models are Hugging Face config.json files (models/*.json); GPUs are figure sheets with sources
(gpus/*.json).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from trainplan.tools.core import file_access, safe_json
from trainplan.tools.core.errors import InputError, unknown_name
from trainplan.tools.hardware.catalog.entries import (GPU_ALIASES, GPUS_DIR, MODEL_ALIASES, MODELS_DIR, _normalise,
                                                      gpu_names, model_names)
from trainplan.tools.hardware.catalog.names import gpu_mentions
from trainplan.tools.hardware.hf import spec_from_config
from trainplan.tools.hardware.specs import GPUSpec, ModelSpec

GPU_FILE_HINT = ("or pass a path to a GPU JSON file with the fields of a catalog entry (bf16_tflops, memory_gib, "
                 "hbm_bandwidth_gb_s, intra_node_bw, inter_node_bw, gpus_per_node, price; see `trainplan catalog --json`)")


def unknown_gpu(name: str) -> InputError:
    """'not in the catalog', with the closest catalog names (by name and alias) and how to pass a GPU file."""
    import difflib

    keys = {_normalise(n): n for n in gpu_names()} | GPU_ALIASES
    close = []
    for key in difflib.get_close_matches(_normalise(name), list(keys), n=6, cutoff=0.5):
        if keys[key] not in close:
            close.append(keys[key])
    hint = f"did you mean {', '.join(close[:3])}? " if close else ""
    return InputError(f"gpu '{name}' is not in the catalog: {hint}known: {', '.join(gpu_names())}; {GPU_FILE_HINT}")


def _gpu_written(name: str) -> str | None:
    """The catalog GPU that a whole name, written as people write it, names ('H100 SXM5', 'A100 40GB',
    'H100 PCIe 80GB'): names.py derives these spellings from the entries' names and aliases."""
    mentions = gpu_mentions(name.strip())
    if len(mentions) == 1 and mentions[0].start == 0 and mentions[0].end == len(name.strip()):
        return mentions[0].name
    return None


MAX_NAME_CHARS = 4096
"""The longest model or GPU name or path read (Linux's PATH_MAX); a path part over 255 characters
(NAME_MAX) is a file that cannot exist."""


def _is(path: Path, kind: str) -> bool:
    """path.is_dir() / is_file() / exists(), False where the path cannot exist (a part over NAME_MAX, a bad byte)."""
    try:
        return path.is_dir() if kind == "dir" else path.is_file() if kind == "file" else path.exists()
    except (OSError, ValueError):
        return False


def _catalog_entry(name: str, directory: Path, aliases: dict[str, str], kind: str, known: list[str]) -> Path | None:
    """The catalog file a name or alias names, or None (no file outside the package is opened)."""
    if _is(directory / f"{name}.json", "file") and "/" not in name and name not in (".", ".."):
        return directory / f"{name}.json"
    key = _normalise(name)
    for known_name in known:
        if _normalise(known_name) == key:
            return directory / f"{known_name}.json"
    if key in aliases:
        return directory / f"{aliases[key]}.json"
    if kind == "gpu":
        written = _gpu_written(name)
        if written:
            return directory / f"{written}.json"
    return None


def _unknown(name: str, kind: str, known: list[str]) -> InputError:
    return unknown_gpu(name) if kind == "gpu" else unknown_name(kind, name, known)


def _resolve(name: str, directory: Path, aliases: dict[str, str], kind: str, known: list[str]) -> Path:
    """A catalog name, an alias, or a path to a JSON file -> the file's path. For a tool call
    (file_access.untrusted_caller) the catalog is looked up first and a path must lie under an
    allowed root; a missing file then reads as an unusable one."""
    if not name or not name.strip():
        raise InputError(f"{kind} is empty: pass a catalog name ({', '.join(known)}) or a path to a JSON file")
    if len(name) > MAX_NAME_CHARS:
        raise InputError(f"{kind} name is over {MAX_NAME_CHARS:,} characters: pass a catalog name or a path to a "
                         "JSON file")
    if file_access.is_untrusted():
        entry = _catalog_entry(name, directory, aliases, kind, known)
        if entry is not None:
            return entry
        if not (name.endswith(".json") or "/" in name):
            raise _unknown(file_access.shown(name), kind, known)
        file_access.require_allowed(name, kind)
        candidate = Path(name).expanduser()
        if _is(candidate, "dir") and _is(candidate / "config.json", "file"):
            return candidate / "config.json"
        if not _is(candidate, "file"):
            raise file_access.unreadable(kind, name, _WHAT[kind])
        return candidate
    candidate = Path(name).expanduser()
    if _is(candidate, "dir"):
        if _is(candidate / "config.json", "file"):
            return candidate / "config.json"
        raise InputError(f"{kind} '{name}' is a directory with no config.json in it: pass the JSON file itself")
    if candidate.suffix == ".json" or "/" in name or _is(candidate, "file"):
        if not _is(candidate, "file"):
            if _is(candidate, "exists"):
                raise InputError(f"{kind} file '{name}' is not a regular file (a FIFO or device): pass a JSON file")
            raise InputError(f"{kind} file '{name}' does not exist: check the path")
        return candidate
    entry = _catalog_entry(name, directory, aliases, kind, known)
    if entry is None:
        raise _unknown(name, kind, known)
    return entry


_WHAT = {"model": "an HF config.json", "gpu": "a GPU JSON file with the fields of a catalog entry"}


def _guarded(name_or_path: str, kind: str, load):
    """load(name) for the user; for a tool call, the path is checked first (outside a cache, so a file
    the user opened earlier is not handed to a tool call from the cache) and any error about a file's
    content becomes file_access.unreadable."""
    if not file_access.is_untrusted():
        return load(name_or_path)
    directory, aliases, known = ((MODELS_DIR, MODEL_ALIASES, model_names()) if kind == "model"
                                 else (GPUS_DIR, GPU_ALIASES, gpu_names()))
    path = _resolve(name_or_path, directory, aliases, kind, known)
    if path.parent == directory:
        return load(name_or_path)
    try:
        return load(name_or_path)
    except Exception:   # whatever the content provoked, none of it is quoted back
        raise file_access.unreadable(kind, name_or_path, _WHAT[kind]) from None


def read_json_object(path: Path, kind: str) -> dict:
    """A JSON object from a UTF-8 file, read within safe_json.CONFIG's limits (size, depth, digits; NaN and
    Infinity, which are not JSON though Python writes them, refused; a FIFO or device is not read)."""
    data = safe_json.read_file(path, f"{kind} file '{path}'", safe_json.CONFIG)
    if not isinstance(data, dict):
        raise InputError(f"{kind} file '{path}' must hold a JSON object, not {type(data).__name__}")
    return data


def model_config(name_or_path: str) -> tuple[str, dict]:
    """The raw HF config.json of a catalog model or a file, with the name to report."""
    path = _resolve(name_or_path, MODELS_DIR, MODEL_ALIASES, "model", model_names())
    # A checkpoint folder's config.json is named after its folder (meta-llama/Llama-3.1-8B/config.json).
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return name, read_json_object(path, "model config")


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog name or a path to an HF config.json -> ModelSpec."""
    return _guarded(name_or_path, "model", _load_model)


load_model.cache_clear = lambda: _load_model.cache_clear()  # type: ignore[attr-defined]


@lru_cache(maxsize=256)
def _load_model(name_or_path: str) -> ModelSpec:
    name, config = model_config(name_or_path)
    return spec_from_config(config, name=name)


def load_gpu(name_or_path: str) -> GPUSpec:
    """A catalog name or a path to a GPU JSON -> GPUSpec."""
    return _guarded(name_or_path, "gpu", _load_gpu)


load_gpu.cache_clear = lambda: _load_gpu.cache_clear()  # type: ignore[attr-defined]


@lru_cache(maxsize=64)
def _load_gpu(name_or_path: str) -> GPUSpec:
    path = _resolve(name_or_path, GPUS_DIR, GPU_ALIASES, "gpu", gpu_names())
    data = read_json_object(path, "gpu")
    data.setdefault("name", path.stem)
    try:
        return GPUSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InputError(f"gpu file '{path}': field '{field}' {first['msg'].lower()}: fix the file") from None
