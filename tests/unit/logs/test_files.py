"""FileLogSource: complete lines only, exactly once, from a byte-offset cursor."""

from __future__ import annotations

from airflow_ml_provider.logs.files import FileLogSource, parse_line
from airflow_ml_provider.logs.source import LogLine


def test_partial_lines_wait_until_complete_and_nothing_repeats(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("[rank 0] one\n[rank 1] tw")
    source = FileLogSource(log)
    first = source.read()
    assert first.lines == [LogLine("rank 0", "one")]
    with log.open("a") as handle:
        handle.write("o\n[launcher] three\n")
    second = source.read(first.cursor)
    assert second.lines == [LogLine("rank 1", "two"), LogLine("launcher", "three")]
    assert source.read(second.cursor).lines == []


def test_max_lines_pages_through_a_large_log(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("".join(f"[rank 0] line {i}\n" for i in range(12_345)))
    source, cursor, seen = FileLogSource(log), None, []
    while batch := source.read(cursor, max_lines=1000):
        if not batch.lines:
            break
        seen.extend(line.text for line in batch.lines)
        cursor = batch.cursor
    assert seen == [f"line {i}" for i in range(12_345)]


def test_a_line_longer_than_one_read_is_returned_whole_over_reads(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("x" * (3 << 20) + "\n[rank 0] after\n")
    source, cursor, total = FileLogSource(log), None, 0
    for _ in range(10):
        batch = source.read(cursor)
        total += sum(len(line.text) for line in batch.lines)
        cursor = batch.cursor
        if batch.lines and batch.lines[-1].text == "after":
            break
    assert total == (3 << 20) + len("after")


def test_missing_file_is_an_empty_log_and_unprefixed_lines_are_kept(tmp_path):
    assert FileLogSource(tmp_path / "none.log").read().lines == []
    assert parse_line("plain text") == LogLine("job", "plain text")
    assert parse_line("[rank 3] [nested] x") == LogLine("rank 3", "[nested] x")
