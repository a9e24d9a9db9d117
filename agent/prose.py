"""Text an LLM or a server wrote, made safe to put into a report (Markdown, a terminal, HTML).

The LLM's prose is untrusted: a prompt injection in a model card or a hostile server can make it
write `<script>`, `onerror=` attributes, `javascript:` links, an unclosed `<!--` or code fence that
hides the rest of the report, headings that impersonate the report's own sections (`## Grounding`),
tracking images, or terminal escape sequences. `neutralise` keeps the prose readable as Markdown and
removes each of these:

- control characters (C0 except tab and newline, DEL, C1, bidirectional overrides and isolates) are
  dropped, so no escape sequence (ESC [ ... m, OSC 8 links) reaches a terminal;
- `&`, `<` and `>` are HTML-escaped, so no tag, attribute, comment or autolink survives;
- a Markdown link or image keeps its target only when it is an http(s) URL; an image becomes a link
  (nothing is fetched when the report is opened);
- headings (`# ...` and setext underlines) become bold lines, so only the report has sections;
- a fenced code block becomes an indented one, so no fence is left open for the report to fall into.

`neutralise_line` does the same for a one-line field (an error message, a model name, which the
report quotes in backticks: a backtick becomes an apostrophe).
"""

from __future__ import annotations

import html
import re
import unicodedata

MAX_PROSE_CHARS = 40_000
"""Prose beyond this many characters is cut, and the cut is said."""

_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(\s*([^)\s]*)(?:\s+[^)]*)?\)")
_REFERENCE = re.compile(r"^( {0,3}\[[^\]\n]+\]:)\s*(\S+)(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ANY_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_SAFE_URL = re.compile(r"^https?://[^\s<>\"'`]+$", re.IGNORECASE)


def _strip_controls(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch for ch in text if ch in "\n\t" or (unicodedata.category(ch) != "Cc" and ch not in _BIDI))


def _link(match: re.Match) -> str:
    image, label, url = match.group(1), match.group(2), match.group(3)
    label = label or ("image" if image else "link")
    if _SAFE_URL.match(html.unescape(url)):
        return f"[{label}]({url})"
    return f"{label} (link removed: not an http(s) URL)"


def _reference(line: str) -> str:
    match = _REFERENCE.match(line)
    if match and not _SAFE_URL.match(html.unescape(match.group(2))):
        return f"{match.group(1)} (link removed: not an http(s) URL)"
    return line


def _prose_line(line: str, previous_blank: bool) -> list[str]:
    """One line outside code: headings demoted, links checked, a would-be fence escaped."""
    heading = _HEADING.match(line)
    if heading:
        return [f"**{heading.group(2)}**" if heading.group(2) else ""]
    if _ANY_FENCE.match(line):                 # a fence inside a list item, say: opens nothing
        return ["\\" + line.lstrip()]
    out = [] if previous_blank or not _SETEXT.match(line) else [""]   # a rule, never a heading underline
    return [*out, _reference(_LINK.sub(_link, line))]


def neutralise(text: str | None, max_chars: int = MAX_PROSE_CHARS) -> str:
    """LLM prose -> Markdown with no raw markup, unsafe link, heading, fence or control character.

    A fenced code block becomes an indented one (the fence lines blank), so no fence is left for
    the rest of the report to fall into."""
    if not text:
        return ""
    cut = len(text) > max_chars
    text = html.escape(_strip_controls(text[:max_chars]), quote=False)
    lines: list[str] = []
    fence = None
    for line in text.split("\n"):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence) \
                    and not line.strip().lstrip(fence[0]):
                fence = None
                lines.append("")
            else:
                lines.append("    " + line)
            continue
        if opening:
            fence = opening.group(1)
            lines.append("")
            continue
        lines.extend(_prose_line(line, previous_blank=not lines or not lines[-1].strip()))
    out = "\n".join(lines)
    return out + ("\n\n*(the rest of the LLM's text was cut here)*" if cut else "")


def neutralise_line(text: str | None, max_chars: int = 500) -> str:
    """A one-line field (an error, a name): controls and newlines become spaces, markup is escaped."""
    if text is None:
        return ""
    flat = " ".join(_strip_controls(str(text)[:max_chars]).split()).replace("`", "'")
    return html.escape(flat, quote=False) + ("..." if len(str(text)) > max_chars else "")


def strip_terminal_controls(text: str) -> str:
    """Streamed LLM text for a terminal: control characters removed, so a split escape sequence
    cannot act (the ESC byte is gone), everything else as written."""
    return _strip_controls(text)
