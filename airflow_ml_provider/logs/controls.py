"""Control characters of job lines made visible, before any line is shown, kept or parsed.

A job's output is not trusted: ``ESC ] 52 ; c ; ... BEL`` (OSC 52) writes the clipboard of a terminal
that shows the task log, ``ESC [ 2 J`` clears it, a carriage return hides the start of a line. Every C0
and C1 control character but tab, and DEL, becomes its ``\\xNN`` escape as text, in a line and in the
strings of a JSON line (where ``\\u001b`` or ``\\r`` would decode to one): a JSON escape of a control
character becomes an escaped backslash followed by ``xNN``, so the parsed string reads ``\\xNN`` too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from airflow_ml_provider.logs.source import LogLine

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# A JSON escape of a control character, after an even run of backslashes (an odd one escapes the last).
_JSON_CONTROL = re.compile(r"(?<!\\)((?:\\\\)*)\\(u00(?:[01][0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])|[bfnr])")
_SHORT = {"b": 0x08, "f": 0x0C, "n": 0x0A, "r": 0x0D}
_TAB = 0x09


def visible(text: str) -> str:
    """``text`` with its control characters (and, in a JSON line, their JSON escapes) as ``\\xNN`` text."""
    if text.startswith("{") and "\\" in text:
        text = _JSON_CONTROL.sub(_json_escape, text)
    if text.isprintable():
        return text
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def visible_lines(lines: Sequence[LogLine]) -> list[LogLine]:
    """``lines`` with source and text made visible; a line without anything to change is kept as it is."""
    return [line if _plain(line) else LogLine(visible(line.source), visible(line.text)) for line in lines]


def _plain(line: LogLine) -> bool:
    text = line.text
    return text.isprintable() and line.source.isprintable() and not (text.startswith("{") and "\\" in text)


def _json_escape(match: re.Match) -> str:
    escape = match.group(2)
    code = _SHORT[escape] if len(escape) == 1 else int(escape[1:], 16)
    if code == _TAB:
        return match.group(0)
    return f"{match.group(1)}\\\\x{code:02x}"
