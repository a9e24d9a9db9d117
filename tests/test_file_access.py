"""Tool calls (the LLM's, an MCP client's) open model and GPU files only under the allowed roots, and
an error never quotes a file's content nor tells a missing file from an unreadable one."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from trainplan.tools.hardware import catalog
from trainplan.tools.core import file_access
from trainplan.tools.hardware.catalog.entries import MODELS_DIR
from trainplan.tools.core.errors import InputError
from trainplan.agent.registry import dispatch

SECRET = "TOKEN-7f3a9c"


@pytest.fixture
def inside(tmp_path, monkeypatch):
    """A working directory (the allowed root) and a folder outside it."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(file_access.DATA_DIRS_ENV, raising=False)
    return work, outside


def _describe(model: str) -> dict:
    return dispatch("describe_model", {"model": model})


def test_a_path_outside_the_roots_is_refused_the_same_whether_it_exists_or_not(inside):
    _, outside = inside
    present = outside / "config.json"
    present.write_text(json.dumps({"model_type": "llama", "secret": SECRET}))
    errors = [_describe(str(present))["error"], _describe(str(outside / "absent.json"))["error"]]
    assert all("may open only files under the working directory" in e for e in errors)
    assert errors[0].replace(str(present), "X") == errors[1].replace(str(outside / "absent.json"), "X")
    assert SECRET not in errors[0]


def test_a_file_inside_the_root_that_is_not_a_config_quotes_none_of_it(inside):
    work, _ = inside
    (work / "bad.json").write_text(json.dumps({"model_type": SECRET, "hidden_size": SECRET}))
    (work / "notjson.json").write_text(f"{SECRET} {{")
    (work / "unreadable.json").write_text("{}")
    os.chmod(work / "unreadable.json", 0)
    errors = [_describe(name)["error"] for name in ("bad.json", "notjson.json", "unreadable.json", "missing.json")]
    assert all(SECRET not in e for e in errors)
    shapes = {e.split("'")[0] + e.split("'")[2] for e in errors}
    assert len(shapes) == 1, errors      # one message for malformed, unreadable and missing
    assert "cannot be used" in errors[0]


def test_a_real_config_inside_the_root_or_a_data_folder_is_read(inside, monkeypatch):
    work, outside = inside
    shutil.copy(MODELS_DIR / "llama3-8b.json", work / "mine.json")
    assert _describe("mine.json")["params"]["total"] == _describe("llama3-8b")["params"]["total"]
    shutil.copy(MODELS_DIR / "llama3-8b.json", outside / "theirs.json")
    assert "error" in _describe(str(outside / "theirs.json"))
    monkeypatch.setenv(file_access.DATA_DIRS_ENV, str(outside))
    assert "error" not in _describe(str(outside / "theirs.json"))


def test_a_symlink_out_of_the_root_is_refused(inside):
    work, outside = inside
    shutil.copy(MODELS_DIR / "llama3-8b.json", outside / "target.json")
    (work / "link.json").symlink_to(outside / "target.json")
    assert "may open only files under" in _describe("link.json")["error"]
    assert "may open only files under" in _describe("../outside/target.json")["error"]


def test_the_catalog_is_always_available_and_a_file_the_user_opened_is_not_served_from_the_cache(inside):
    _, outside = inside
    shutil.copy(MODELS_DIR / "llama3-8b.json", outside / "cached.json")
    path = str(outside / "cached.json")
    assert catalog.load_model(path).num_layers == 32      # the user's own call opens any file
    assert "may open only files under" in _describe(path)["error"]
    assert _describe("Llama-3-8B")["model"] == "llama3-8b"
    gpu = dispatch("estimate_cost", {"step_s": 1.0, "gbs": 8, "seq": 1024, "gpus": 8, "tokens": "1B",
                                     "gpu": str(outside / "gpu.json")})
    assert "gpu '" in gpu["error"] and "may open only files under" in gpu["error"]


def test_files_the_user_named_stay_open_to_the_tools(inside):
    _, outside = inside
    shutil.copy(MODELS_DIR / "llama3-8b.json", outside / "named.json")
    path = str(outside / "named.json")
    with file_access.user_named_files([path]):
        assert "error" not in _describe(path)
    assert "error" in _describe(path)


def test_require_allowed_is_a_no_op_for_the_user_and_refuses_for_a_tool_call(inside):
    file_access.require_allowed("/etc/passwd", "model")
    with file_access.untrusted_caller(), pytest.raises(InputError, match="may open only files under"):
        file_access.require_allowed("/etc/passwd", "model")
    with file_access.untrusted_caller(), pytest.raises(InputError):
        catalog.load_gpu("/etc/passwd")


def test_a_refused_name_is_quoted_printable_and_bounded(inside):
    error = _describe("/tmp/\x1b[31m" + "a" * 500 + ".json")["error"]
    assert "\x1b" not in error and len(error) < 600


def test_mcp_calls_are_tool_calls(inside):
    from trainplan.cli_mcp import result_text

    _, outside = inside
    (outside / "leak.json").write_text(json.dumps({"model_type": SECRET}))
    text, is_error = result_text("describe_model", {"model": str(outside / "leak.json")})
    assert is_error and SECRET not in text and "may open only files under" in text
