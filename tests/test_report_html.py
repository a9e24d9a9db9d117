"""`trainplan plan --html`: a self-contained page whose charts are matplotlib SVG (memory, step time,
pipeline timeline, GPU-count tradeoffs), which loads nothing, runs nothing, and holds no markup from
the LLM."""

from __future__ import annotations

from html.parser import HTMLParser

from cli_inprocess import run_cli as in_process
import pytest

pytest.importorskip("matplotlib")

from trainplan.agent.planner import plan  # noqa: E402
from trainplan.agent.prose import neutralise  # noqa: E402
from trainplan.agent.report_html import to_html  # noqa: E402

SMALL = "Llama 3 8B on 64 H100s for 100B tokens, seq 4096, gbs 256, pp 4"


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attributes, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes.extend(attrs)

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def report():
    return plan(SMALL, backend="offline")


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


def test_the_page_draws_memory_time_and_the_timeline(report):
    page = parse(to_html(report))
    assert report.tradeoffs          # a plan that states its tokens has a GPU-count table
    assert page.tags.count("svg") == 4 and page.tags.count("figure") == 4
    captions = " ".join(page.text)
    for caption in ("Memory per GPU", "Step time by part", "Pipeline timeline", "GPU count against days and dollars"):
        assert caption in captions
    for row in report.tradeoffs:
        assert f"{row['gpus']:,} GPUs, MFU {row['mfu']:.0%}" in captions
    assert ("http-equiv", "Content-Security-Policy") in page.attributes
    assert "script" not in page.tags and "img" not in page.tags and "link" not in page.tags
    assert "table" in page.tags and report.layout in captions      # the full report follows the charts
    assert len(report.timeline.bars) == report.timeline.mermaid_events > 0


def test_the_pages_charts_carry_the_reports_numbers(report):
    text = to_html(report)
    memory = report.recommended["memory_gib"]
    assert f"capacity {memory['capacity']:.2f}" in text and f"activations {memory['activations']:.2f}" in text


def test_no_markup_from_the_llm_reaches_the_page(report):
    hostile = report.model_copy(update={
        "backend": "openai", "llm_status": "submitted", "llm_model": "m",
        "rationale": neutralise("<script>alert(1)</script>\n[x](javascript:alert(1))\n<img src=x onerror=alert(1)>")})
    page = parse(to_html(hostile))
    assert "script" not in page.tags and "img" not in page.tags
    assert not any(value and value.lower().startswith("javascript") for _, value in page.attributes)
    assert not any(name.startswith("on") for name, _ in page.attributes)


def test_cli_writes_the_page(tmp_path):
    out = tmp_path / "plan.html"
    result = in_process("plan", SMALL, "--html", str(out))
    assert result.returncode == 0, result.stderr
    assert parse(out.read_text()).tags.count("svg") == 4
