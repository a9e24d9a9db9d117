"""Signs and symbols in plain-language requests (issue 21 item 5): a minus sign, U+2212, or a figure, en or em
dash before a number makes it negative, and a negative is refused with one line, never read as its positive;
hyphens inside names and ranges keep working; a tail that the length cut drops is reported, not lost."""

from __future__ import annotations


from cli_inprocess import run_cli as in_process
import pytest

from trainplan.agent.request import parse_partial
from trainplan.agent.request_text import MAX_CHARS
from trainplan.tools.core.errors import InputError

BASE = "Llama 3 70B on 512 H100s for 15T tokens"


@pytest.mark.parametrize("tail, written", [
    ("at -$2 per GPU-hour", "-$2"),          # was $2.00
    ("at $-2 per GPU-hour", "$-2"),
    ("TP -8", "TP -8"),                       # was a pin of TP 8
    ("TP=-8", "TP=-8"),
    ("tp: \u22128", "tp: -8"),                # U+2212 MINUS SIGN
    ("PP \u20134", "PP -4"),                  # U+2013 EN DASH
    ("ZeRO \u20123", "ZeRO -3"),              # U+2012 FIGURE DASH
    ("budget -$2M", "budget -$2M"),
    ("seq -4096", "seq -4096"),
    ("global batch \u22121024", "batch -1024"),
    ("mbs -1, vpp -2", "mbs -1"),
    ("-8 TP", "-8 TP"),
])
def test_a_negative_number_is_refused_naming_it(tail, written):
    with pytest.raises(InputError, match="is negative") as refusal:
        parse_partial(f"{BASE}, {tail}")
    assert written in str(refusal.value) and "drop the minus sign" in str(refusal.value)


@pytest.mark.parametrize("dash", ["-", "\u2212", "\u2012", "\u2013", "\u2014"])
def test_a_dash_before_a_count_is_a_minus_sign(dash):
    with pytest.raises(InputError, match="'-512 H100s' is not a number of GPUs"):
        parse_partial(f"Llama 3 70B on {dash}512 H100s")
    with pytest.raises(InputError, match="'-15T tokens' is negative"):
        parse_partial(f"Llama 3 70B on 512 H100s for {dash}15T tokens")


@pytest.mark.parametrize("text, fields", [
    ("Llama-3 70B on 512 H100-80GB", {"model": "llama3-70b", "gpus": 512}),
    ("Llama\u20113 70B on 512 H100\u201180GB", {"model": "llama3-70b", "gpus": 512}),   # non-breaking hyphens
    ("Qwen3-30B-A3B on 64 H100s", {"model": "qwen3-30b-a3b", "gpus": 64}),
    ("gpt-3 on 1024 A100s", {"model": "gpt3-175b", "gpus": 1024}),
    ("Llama 3 70B on 512 H100s, ZeRO-3, TP-8, ZB-H1", {"zero": 3, "tp": 8, "schedule": "zb-h1"}),
    ("Llama 3 70B on 512 H100s \u2014 cheapest", {"objective": "cost"}),   # a spaced em dash is punctuation
    ("- Llama 3 70B on 512 H100s", {"gpus": 512}),                          # a bullet
])
def test_hyphens_inside_names_and_punctuation_dashes_still_read(text, fields):
    request = parse_partial(text)
    assert {k: getattr(request, k) for k in fields} == fields, request


@pytest.mark.parametrize("dash", ["-", "\u2013"])
def test_a_range_is_no_negative(dash):
    request = parse_partial(f"Llama 3 70B on 8{dash}16 H100s")
    assert request.gpus == 16 and request.unparsed == ["8"]   # the range's start is listed as not understood


def test_the_cli_refuses_a_negative_price_in_one_line():
    result = in_process("plan", "--backend", "offline",
                             f"{BASE} at -$2 per GPU-hour")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: '"), result.stderr
    assert "-$2" in lines[0] and not result.stdout


def test_a_tail_that_nfkc_pushes_past_the_cut_is_reported():
    """U+FDFA is one character that NFKC writes as 18: a request under MAX_CHARS as typed grows past it."""
    ligatures = "\ufdfa" * ((MAX_CHARS - 200) // 18 + 20)
    text = f"Llama 3 70B on 512 H100s {ligatures} for 15T tokens, cheapest"
    assert len(text) <= MAX_CHARS
    request = parse_partial(text)
    assert request.gpus == 512 and request.tokens is None, "the cut tail was not read"
    cut = request.unparsed[-1]
    assert cut.startswith("(not read: the last ") and f"past the {MAX_CHARS:,}-character limit" in cut
    assert "for 15T tokens, cheapest" in cut


def test_a_request_within_the_cut_reports_no_cut():
    assert parse_partial(BASE).unparsed is None


from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CUES = ["TP", "tp=", "PP", "pp:", "EP", "CP", "vpp", "mbs", "ZeRO", "seq", "global batch", "budget", "at",
        "within", "for", "goodput", "on", ""]
MINUS_SIGNS = ["-", "\u2212", "\u2012", "\u2013", "\u2014", "\u2010", "\u2011"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CUES), st.sampled_from(["", " ", "  "]), st.sampled_from(MINUS_SIGNS),
       st.sampled_from(["", "$"]), st.integers(min_value=1, max_value=10**6),
       st.sampled_from(["", " GPUs", " H100s", "T tokens", " days", "%", "M", " per GPU-hour"]))
def test_any_minus_against_a_number_is_refused_never_read_as_positive(cue, space, minus, dollar, value, unit):
    """Whatever cue, sign character, currency and unit: a request with a negative number is refused ('TP-8'
    with no space is a hyphen, as 'ZeRO-3' is: the other property)."""
    assume(space or not cue[-1:].isalnum())
    with pytest.raises(InputError):
        parse_partial(f"{BASE}, {cue}{space}{minus}{dollar}{value}{unit}")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["Llama", "GPT", "H100", "Qwen3", "ZeRO", "A3B", "8"]), st.sampled_from(MINUS_SIGNS),
       st.integers(min_value=1, max_value=999))
def test_a_hyphen_after_a_letter_or_digit_is_never_a_sign(word, hyphen, value):
    """'Llama-3', 'H100-80', 'ZeRO-3', '8-16': parsed or refused for what the words say, never as negative."""
    try:
        parse_partial(f"{BASE}, {word}{hyphen}{value}")
    except InputError as refusal:
        assert "is negative" not in str(refusal)
