"""LogSource over the combined log file the local backend's launcher writes."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_ml_provider.logs.source import LogBatch, LogLine, LogSource

_PREFIXED = re.compile(r"^\[(?P<source>[^\]]+)\] ?(?P<text>.*)$")
_READ_BYTES = 1 << 20


class FileLogSource(LogSource):
    """Lines ``[source] text`` of one file; the cursor is the byte offset after the last whole line,
    so a line still being written is returned only once it is complete."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def location(self) -> str:
        return str(self.path)

    def read(self, cursor: int | None = None, max_lines: int = 5000) -> LogBatch:
        offset = int(cursor or 0)
        try:
            with self.path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read(_READ_BYTES)
        except FileNotFoundError:
            return LogBatch([], offset)
        lines: list[LogLine] = []
        consumed = 0
        while len(lines) < max_lines:
            end = chunk.find(b"\n", consumed)
            if end < 0:
                if consumed == 0 and len(chunk) == _READ_BYTES:  # a line longer than one read: split it
                    lines.append(parse_line(chunk.decode("utf-8", errors="replace")))
                    consumed = len(chunk)
                break
            lines.append(parse_line(chunk[consumed:end].decode("utf-8", errors="replace")))
            consumed = end + 1
        return LogBatch(lines, offset + consumed)


def parse_line(raw: str) -> LogLine:
    match = _PREFIXED.match(raw.rstrip("\r"))
    if match:
        return LogLine(match["source"], match["text"])
    return LogLine("job", raw.rstrip("\r"))
