"""The project's input error: bad names, malformed files, sizes that do not divide.

A layout that is valid but does not fit is *not* an error; it is a result with ``fits: false``.
"""

from __future__ import annotations

import difflib


class InputError(ValueError):
    """Invalid input. The message is one line that says what is wrong and how to fix it."""


def unknown_name(kind: str, name: str, known: list[str]) -> InputError:
    """An InputError for an unknown catalog name, listing the close matches."""
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return InputError(
        f"unknown {kind} '{name}': {hint}known: {', '.join(known)} (or pass a path to a JSON file)"
    )
