"""Launch settings for the engines people use, from one resolved layout.

    export(engine, model, cfg, *, model_ref) -> ExportResult(engine, filename_suggestion, content, format, notes)

`cfg` is a ParallelConfig as layout.resolve_config returns it. Each engine module says how the contract's (tools/config/contract.py)
vocabulary maps onto the engine's own settings and refuses, with one ExportError line, what the engine
cannot express. Every file closes the batch identity global = micro x data-parallel x accumulation.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from importlib import import_module

from trainplan.tools.hardware.specs import ModelSpec
from trainplan.tools.config.contract import ParallelConfig
from trainplan.tools.config.engines import ENGINE_PROFILES, PROFILES
from trainplan.tools.engines.common import Batch, ExportError, ExportResult, batch_of
from trainplan.tools.engines.megatron import parse_args_text


Engine = Enum("Engine", [(profile.name, profile.name) for profile in ENGINE_PROFILES], type=str, module=__name__,
              qualname="Engine")
Engine.__doc__ = ("Training engine to write launch settings for: the names of tools/config/engines.py ENGINE_PROFILES, "
                  "each profile's description saying what its launch settings are.")


def _imported(exporter: str) -> Callable[..., ExportResult]:
    """The function a registry "module:function" string names."""
    module, function = exporter.split(":")
    return getattr(import_module(module), function)


EXPORTERS = {Engine(profile.name): _imported(profile.exporter) for profile in ENGINE_PROFILES}
"""Engine -> exporter taking (model, cfg, model_ref=), and gpus_per_node= where its profile's
export_needs_node_size (tools/config/engines.py)."""


def export(engine: Engine | str, model: ModelSpec, cfg: ParallelConfig, *, model_ref: str,
           gpus_per_node: int = 8) -> ExportResult:
    """The engine's launch settings for a resolved layout; ExportError when the engine cannot express it."""
    try:
        engine = Engine(engine)
    except ValueError:
        known = ", ".join(e.value for e in Engine)
        raise ExportError(f"engine='{engine}' is not one of: {known}") from None
    if PROFILES[engine.value].export_needs_node_size:
        return EXPORTERS[engine](model, cfg, model_ref=model_ref, gpus_per_node=gpus_per_node)
    return EXPORTERS[engine](model, cfg, model_ref=model_ref)


__all__ = ["Batch", "Engine", "ExportError", "ExportResult", "batch_of", "export", "parse_args_text"]
