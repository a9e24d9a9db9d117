"""The EngineProfile registry (tools/config/engines.py) is the one list of engines: every other list derives
from it, and no other source file spells the engines out by hand."""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path

import pytest

from trainplan.tools.config.engines import (ADAPTER_ENGINE, ADAPTER_FALLBACK, DEFAULT_ENGINE, ENGINE_LIST, ENGINE_PROFILES,
                                            ENGINE_REFUSALS, ENGINES, LAUNCH_FALLBACK, PLAN_ENGINES, runs, spoken)

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_FILES = {ROOT / "tools/config/engines.py", ROOT / "tools/config/engine_refusals.py"}
SOURCE_DIRS = ("tools", "agent", "prompts", "trainplan", "evals")


@pytest.mark.parametrize("profile", ENGINE_PROFILES, ids=lambda p: p.name)
def test_every_engine_has_an_exporter_that_imports_and_is_called_by_export(profile):
    from trainplan.tools.engines import EXPORTERS, Engine

    module, function = profile.exporter.split(":")
    exporter = getattr(import_module(module), function)
    assert callable(exporter) and EXPORTERS[Engine(profile.name)] is exporter
    assert module == f"trainplan.tools.engines.{profile.name}"


def test_the_engine_enum_names_the_registry_engines_in_order():
    from trainplan.tools.engines import Engine

    assert [e.value for e in Engine] == list(ENGINES) == [p.name for p in ENGINE_PROFILES]
    assert len(set(ENGINES)) == len(ENGINES)


def test_the_planner_engines_are_the_registry_flags():
    from trainplan.agent import offline_plan, planner

    assert (planner.DEFAULT_ENGINE, offline_plan.ADAPTER_ENGINE) == (DEFAULT_ENGINE, ADAPTER_ENGINE) == ("megatron", "axolotl")
    assert planner.LAUNCH_FALLBACK == LAUNCH_FALLBACK == ("torchtitan", "deepspeed", "accelerate", "trl")
    assert offline_plan.PLAN_ENGINES == PLAN_ENGINES == ("megatron", "torchtitan")
    assert DEFAULT_ENGINE not in LAUNCH_FALLBACK
    assert offline_plan.ADAPTER_FALLBACK == ADAPTER_FALLBACK == ("deepspeed", "accelerate", "trl")
    assert ADAPTER_ENGINE not in ADAPTER_FALLBACK


def test_each_engine_refusal_is_its_own():
    assert set(ENGINE_REFUSALS) == set(ENGINES)
    for engine, refusals in ENGINE_REFUSALS.items():
        assert refusals and all(r.engine == engine for r in refusals)


def test_the_request_reads_each_engine_as_its_makers_spell_it():
    from trainplan.agent.request_steering import ENGINES as PATTERNS

    assert list(PATTERNS) == list(ENGINES)
    for profile in ENGINE_PROFILES:
        assert re.fullmatch(PATTERNS[profile.name], profile.spelled.lower()), profile.spelled


def test_descriptions_list_the_registry_engines():
    from trainplan.agent.report import Launch
    from trainplan.tools.config.contract import SearchOptions
    from trainplan.tools.engines.common import ExportResult

    assert spoken(["a", "b", "c"]) == "a, b or c" and spoken(["a"]) == "a"
    assert ENGINE_LIST == "megatron, deepspeed, torchtitan, accelerate, axolotl, llamafactory or trl"
    assert ExportResult.model_fields["engine"].description == Launch.model_fields["engine"].description == ENGINE_LIST
    assert ENGINE_LIST in SearchOptions.model_fields["engine"].description


def _lines_naming_engines(text: str, least: int):
    words = [re.compile(rf"(?<![a-z0-9_]){re.escape(name)}(?![a-z0-9_])", re.IGNORECASE) for name in ENGINES]
    for number, line in enumerate(text.splitlines(), 1):
        if sum(bool(word.search(line)) for word in words) >= least:
            yield number, line


def test_the_check_finds_a_hand_written_list():
    assert [n for n, _ in _lines_naming_engines('x = ("megatron", "DeepSpeed", "torchtitan", "trl")\ny = 1', 4)] == [1]
    assert not list(_lines_naming_engines("megatron, deepspeed or torchtitan", 4))


def test_no_source_file_lists_the_engines_by_hand():
    """A line naming four or more engines outside the registry is a hand-written list: derive it instead."""
    assert all((ROOT / folder).is_dir() for folder in SOURCE_DIRS)
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for folder in SOURCE_DIRS for path in sorted((ROOT / folder).rglob("*"))
             if path.suffix in (".py", ".j2") and path not in REGISTRY_FILES
             for number, line in _lines_naming_engines(path.read_text(), 4)]
    assert not found, "hand-written engine lists:\n" + "\n".join(found)


def test_only_megatron_selects_recompute_modules():
    from trainplan.tools.config.engines import selects_recompute_modules

    assert [p.name for p in ENGINE_PROFILES if p.recompute_modules] == ["megatron"]
    assert selects_recompute_modules(None) and not selects_recompute_modules("axolotl")


@pytest.mark.parametrize("engine", [p.name for p in ENGINE_PROFILES if not p.recompute_modules])
def test_engines_that_checkpoint_whole_layers_refuse_module_recompute_in_one_line(engine):
    """Selective recompute of chosen modules is Megatron-Core's --recompute-modules: an export for an engine without
    it refuses, where the attention core alone (FlashAttention recomputes it anyway) and full recompute pass that
    rule."""
    from trainplan.tools.config.layout import resolve_config
    from trainplan.tools.engines import export
    from trainplan.tools.engines.common import ExportError
    from trainplan.tools.engines.support import knobs_of
    from trainplan.tools.hardware.catalog import load_model

    model = load_model("llama3-8b")
    modules = resolve_config(model, 8, recompute="selective", recompute_modules="layernorm,mlp")
    with pytest.raises(ExportError, match=f"{engine} checkpoints whole layers or nothing") as refused:
        export(engine, model, modules, model_ref="llama3-8b")
    assert "\n" not in str(refused.value)
    rule = next(r for r in ENGINE_REFUSALS[engine] if "whole layers" in r.message(model, knobs_of(modules)))
    for passing in (dict(recompute="selective"), dict(recompute="full"), dict(recompute="none")):
        assert not rule.refuses(model, knobs_of(resolve_config(model, 8, **passing)))


def test_a_search_for_an_engine_without_module_recompute_never_picks_modules():
    import trainplan
    from trainplan.tools.core.errors import InputError

    job = dict(model="llama3-8b", gpu="rtx-4090", gpus=1, method="qlora", seq=2048, gbs=16)
    unpinned = trainplan.search(**job).candidates
    assert any(c["config"]["recompute_modules"] not in (None, ["core_attn"]) for c in unpinned)
    for engine in ("axolotl", "trl", "deepspeed"):
        candidates = trainplan.search(**job, engine=engine).candidates
        assert candidates and all(c["config"]["recompute_modules"] in (None, ["core_attn"]) for c in candidates)
    with pytest.raises(InputError, match="axolotl checkpoints whole layers or nothing"):
        trainplan.search(**job, engine="axolotl", recompute_modules="layernorm,mlp")


def test_no_feasible_hint_looks_past_the_engines_refusals():
    """The engine's refusals come first, so they outnumber the rest; the hint is what rejected the layouts it runs."""
    from trainplan.tools.search.explain import no_feasible_hint
    from trainplan.tools.search.space import R_ENGINE, R_MEMORY

    hint = no_feasible_hint({R_ENGINE: 456, R_MEMORY: 108})
    assert f"{R_ENGINE}, 456; of the layouts it runs, most rejected: {R_MEMORY}, 108" in hint
    assert "shorter seq" in hint and "\n" not in hint
    assert "another engine" in no_feasible_hint({R_ENGINE: 10})


def test_no_engine_runs_adapters_model_parallel_so_no_memory_hint_proposes_it():
    """tools/perf/memory_hints.py gives a LoRA/QLoRA layout no tp, pp or cp hint because no registry engine runs
    PEFT's adapters model-parallel; an engine that starts to must change that hint too."""
    from trainplan.tools.config.layout import resolve_config
    from trainplan.tools.engines.support import knobs_of
    from trainplan.tools.hardware.catalog import load_model
    from trainplan.tools.perf.memory_hints import memory_fixes

    model = load_model("llama3-8b")
    for split in (dict(tp=2), dict(pp=2), dict(cp=2)):
        knobs = knobs_of(resolve_config(model, 8, gbs=16, method="lora", seq=4096, **split))
        assert not any(bool(runs(engine, model, knobs)) for engine in ENGINES), split
    for component in ("weights", "activations", "gradients"):
        hints = memory_fixes(component, {"method": "qlora", "zero": 3, "recompute": "full"})
        assert not any("tp" in hint or "cp" in hint for hint in hints), hints
