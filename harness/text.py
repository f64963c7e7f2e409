"""Text a target controls, made safe to store and show: bounded in size, control characters escaped.

Note [Target text]
------------------
An exception message, a returned type's name or a frame name comes from the target's code, and
the suite copies it into findings, console lines, Markdown and HTML reports.  A hostile or broken
target can put anything there: ANSI escape sequences that rewrite a terminal, BEL, NUL, carriage
returns that overwrite a console line, bidirectional overrides that reorder what a reader sees, or
a megabyte of text.  Two functions fix that at the source (the check of a case, before a finding
is written) and again where reports render (records can come from elsewhere):

* :func:`bounded` cuts a text past :data:`MAX_MESSAGE_CHARS` characters and says so in a note
  with the full length, so two texts that differ only past the cut still differ;
* :func:`printable` escapes every control character except newline and tab (C0, DEL, C1, the
  bidirectional controls) as ``\\xNN`` / ``\\uNNNN``, which is what Python's ``repr`` would
  show; the text stays readable and one line stays one line.
"""

from __future__ import annotations

import re

__all__ = ["MAX_MESSAGE_CHARS", "bounded", "printable", "safe_text"]

# characters of a target's message kept in a finding (the rest is cut with a note)
MAX_MESSAGE_CHARS = 64 * 1024

# C0 controls but newline and tab, DEL, C1 controls, and the bidirectional and zero-width formatting
# characters (U+200B..U+200F, U+202A..U+202E, U+2066..U+2069) that change what a reader sees
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with its control characters escaped (newline and tab kept): see Note [Target text]."""
    return _CONTROL.sub(_escape, str(text))


def bounded(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text``, or its first ``limit`` characters and a note giving the full length."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f" ... [cut by kernel-oracle: {len(text)} characters, the first {limit} kept]"


def safe_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """:func:`printable` of :func:`bounded`: a target's text as findings and reports keep it."""
    return printable(bounded(text, limit))
