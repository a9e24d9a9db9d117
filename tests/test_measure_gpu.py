"""benchmarks/measure_gpu.py on CPU with a tiny shape: it runs, and what it writes is a valid eval run file
whose cases the estimator accepts. Skipped where torch is not installed (CI does not install it)."""

import importlib.util
import sys
from pathlib import Path

import pytest

import trainplan
from trainplan.evals.dataset import load_run

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "measure_gpu.py"


def _script():
    spec = importlib.util.spec_from_file_location("measure_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_tiny_cpu_run_writes_a_valid_held_out_run_file(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "measured-h100-sxm-80gb.yaml"
    rc = _script().main(["--device", "cpu", "--tiny", "--gpu", "h100-sxm-80gb", "--warmup", "0", "--steps", "1",
                         "--out", str(out)])
    assert rc == 0
    run = load_run(out)
    assert len(run.cases) == 6     # flash and eager x none, selective, full
    kernels = {(c.request["attention"].value, c.request["recompute"].value) for c in run.cases}
    assert kernels == {(a, r) for a in ("flash", "eager") for r in ("none", "selective", "full")}
    for case in run.cases:
        assert not case.used_for_calibration
        assert case.published["step_s"].value > 0
        assert "peak_memory_gib" not in case.published      # CPU: no CUDA allocator to read
        result = trainplan.estimate(**case.kwargs())
        assert result.config.attention.value == case.request["attention"].value
        assert result.config.fused_kernels is False
        assert result.time.step_s > 0


def test_cpu_timings_never_land_in_evals_runs(capsys):
    pytest.importorskip("torch")
    assert _script().main(["--device", "cpu", "--tiny", "--gpu", "h100-sxm-80gb"]) == 2
    assert "error: CPU timings never go into evals/runs" in capsys.readouterr().err
