"""translate.py's input reader (pinyin_hanzi/cli/line_stream.py): lines split as str.splitlines() splits them,
whatever the chunks they arrive in; batches of what has arrived; a bounded line length."""

import os

import pytest

from pinyin_hanzi.cli.line_stream import MAX_LINE_BYTES, line_batches
from pinyin_hanzi.errors import DataError

TEXT = "ni hao\r\nwo men\rxie xie\u2028zai jian\x85\n\nhao\u2029end".encode()


def test_lines_split_as_splitlines_splits_them_however_the_bytes_arrive(tmp_path):
    expected = TEXT.decode().splitlines()
    whole = tmp_path / "whole.txt"
    whole.write_bytes(TEXT)
    assert [line for batch in line_batches(str(whole), 2) for line in batch] == expected
    for cut in range(len(TEXT)):  # every place a chunk can end: inside \r\n, inside U+2028's three bytes
        read_end, write_end = os.pipe()
        os.write(write_end, b"start\n" + TEXT[:cut])  # one read takes it all, and "start" makes a batch
        reader = line_batches(f"/proc/self/fd/{read_end}", 256)
        first = next(reader)  # what has arrived: no waiting for the rest
        os.write(write_end, TEXT[cut:])
        os.close(write_end)
        rest = [line for batch in reader for line in batch]
        os.close(read_end)
        assert first[0] == "start" and first[1:] + rest == expected, cut


def test_a_batch_holds_what_has_arrived_and_a_file_gives_full_batches(tmp_path):
    read_end, write_end = os.pipe()
    os.write(write_end, b"a\nb\n")
    reader = line_batches(f"/proc/self/fd/{read_end}", 256)
    assert next(reader) == ["a", "b"]  # the writer is still there: no waiting for 256 lines
    os.write(write_end, b"c\n")
    assert next(reader) == ["c"]
    os.close(write_end)
    assert list(reader) == []
    os.close(read_end)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"x\n" * 600)
    assert [len(batch) for batch in line_batches(str(lines), 256)] == [256, 256, 88]


def test_a_line_over_the_limit_fails_after_the_lines_before_it(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"first\n" + b"x" * MAX_LINE_BYTES + b"\n")  # exactly the limit: read
    assert [len(line) for batch in line_batches(str(path), 256) for line in batch] == [5, MAX_LINE_BYTES]
    path.write_bytes(b"first\nsecond\n" + b"x" * (MAX_LINE_BYTES + 1))  # one byte more, without a line end
    reader = line_batches(str(path), 256)
    assert next(reader) == ["first", "second"]
    with pytest.raises(DataError, match=r"long.txt: line 3 is longer than 1,048,576 bytes"):
        next(reader)


def test_a_batch_ends_at_its_line_count_or_once_it_holds_max_chars(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{'x' * length}\n" for length in (3, 3, 3, 1, 1, 1, 1, 1)), encoding="utf-8")
    assert [len(batch) for batch in line_batches(str(path), 5, max_chars=5)] == [2, 3, 3]
    assert [len(batch) for batch in line_batches(str(path), 5)] == [5, 3]
