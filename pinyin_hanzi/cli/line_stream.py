"""The lines translate.py converts from a file or standard input, read as they arrive.

A pipe, a FIFO or a terminal delivers lines as a writer writes them: each batch holds the lines that have
arrived, up to the batch size, so the first output comes when the first line does, not when 256 lines or
the end of the input have. A regular file is always ready and gives full batches. A line is at most
:data:`MAX_LINE_BYTES` long, so that input without line ends (``/dev/zero``, a binary file) ends in one line
of error instead of filling memory; a directory or a block device is refused before anything is read.

Lines end as :meth:`str.splitlines` ends them (``\\n``, ``\\r\\n``, a lone ``\\r``, U+2028, U+0085, ...). The
split happens on the bytes, before decoding: in UTF-8 no byte of another character can look like one of
these, and an invalid line can then be reported with its number.
"""

from __future__ import annotations

import os
import re
import select
import stat
import sys
from collections import deque
from collections.abc import Iterator

from pinyin_hanzi.errors import DataError

MAX_LINE_BYTES = 1 << 20  # 1 MiB: far above any typed line (the shipped model converts ~1.4 KB of pinyin a second)
STDIN_NAME = "standard input"
_READ_BYTES = 1 << 16
# The UTF-8 bytes of every line end str.splitlines() knows; "\r\n" first, so that it counts as one.
_LINE_END = re.compile(rb"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e]|\xc2\x85|\xe2\x80[\xa8\xa9]")
_REFUSED_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"))


def check_input(name: str) -> None:
    """DataError (one line) if the input ``name`` ('-': standard input) cannot be streamed: an empty name,
    missing, standard input closed, a directory or a block device. Never opens it: opening a FIFO would wait
    for its writer."""
    if name == "-":
        if sys.stdin is None:  # started with `<&-`: fd 0 may since belong to another file
            raise DataError("cannot read input: standard input is closed")
        _check_kind(os.fstat(sys.stdin.fileno()).st_mode, STDIN_NAME)
        return
    if not name:  # os.stat("") would report a name nobody typed as missing; standard input is '-', never ""
        raise DataError("the input file name is empty: name a file, or '-' for standard input")
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise DataError(f"input file not found: {name}") from None
    except (OSError, ValueError) as error:
        raise DataError(f"cannot read input file {name}: {getattr(error, 'strerror', None) or error}") from None
    _check_kind(mode, f"input file {name}")


def _check_kind(mode: int, what: str) -> None:
    for test, kind in _REFUSED_KINDS:
        if test(mode):
            raise DataError(f"cannot read {what}: it is {kind}, not a file of text lines")


def line_batches(name: str, batch_size: int, max_chars: int | None = None) -> Iterator[list[str]]:
    """Batches of the lines of ``name`` ('-': standard input), without their line ends, each batch as soon as
    it has a line and the input has no more ready, of at most ``batch_size`` lines and (where given) about
    ``max_chars`` characters (a batch that reaches it ends with the line that did). DataError (one line) for
    an input :func:`check_input` refuses or that cannot be read, a line that is not UTF-8 or longer than
    MAX_LINE_BYTES: raised once every line before that one has been given out, so that their output is not
    lost."""
    check_input(name)
    if name == "-":
        yield from _LineReader(sys.stdin.fileno(), STDIN_NAME).batches(batch_size, max_chars)
        return
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError as error:
        raise DataError(f"cannot read input file {name}: {error.strerror}") from None
    try:
        yield from _LineReader(fd, name).batches(batch_size, max_chars)
    finally:
        os.close(fd)


class _LineReader:
    """Whole lines of a file descriptor, read in chunks as they arrive (os.read returns what a pipe holds)."""

    def __init__(self, fd: int, name: str):
        self.fd, self.name = fd, name
        self.pending = bytearray()  # bytes read that do not yet end in a line end
        self.lines: deque[str] = deque()  # lines read, not yet given out
        self.count = 0  # lines read so far
        self.ended = False
        self.failure: DataError | None = None  # what ended the input early, raised once the lines before it are out
        self.after_cr = False  # the last chunk ended in "\r": a "\n" starting the next one belongs to it

    def batches(self, size: int, max_chars: int | None = None) -> Iterator[list[str]]:
        while True:
            while not self.lines and not self.ended:
                self._read()
            if not self.lines:
                if self.failure is not None:
                    raise self.failure
                return
            batch: list[str] = []
            chars = 0
            while len(batch) < size and (max_chars is None or chars < max_chars):
                if self.lines:
                    batch.append(self.lines.popleft())
                    chars += len(batch[-1])
                elif self.ended or not self._ready():
                    break
                else:
                    self._read()
            yield batch

    def _ready(self) -> bool:
        """Whether a read would return at once (always, for a regular file)."""
        try:
            return bool(select.select([self.fd], [], [], 0)[0])
        except (OSError, ValueError):  # a descriptor select cannot watch: read, and wait if need be
            return True

    def _read(self) -> None:
        try:
            self._read_lines()
        except DataError as error:
            self.failure, self.ended = error, True

    def _read_lines(self) -> None:
        try:
            chunk = os.read(self.fd, _READ_BYTES)
        except OSError as error:
            raise DataError(f"cannot read {self.name}: {error.strerror or error}") from None
        if not chunk:
            self.ended = True
            if self.pending:
                self._add(bytes(self.pending))
                self.pending.clear()
            return
        if self.after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self.pending += chunk
        start = 0
        for end in _LINE_END.finditer(self.pending):
            self._add(bytes(self.pending[start : end.start()]))
            start = end.end()
        self.after_cr = start == len(self.pending) and self.pending.endswith(b"\r")
        del self.pending[:start]
        if len(self.pending) > MAX_LINE_BYTES:  # the line being read is too long already
            raise _too_long(self.name, self.count + 1)

    def _add(self, raw: bytes) -> None:
        self.count += 1
        if len(raw) > MAX_LINE_BYTES:
            raise _too_long(self.name, self.count)
        try:
            self.lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise DataError(f"{self.name}: line {self.count} is not valid UTF-8") from None


def _too_long(name: str, number: int) -> DataError:
    return DataError(f"{name}: line {number} is longer than {MAX_LINE_BYTES:,} bytes, the most translate.py reads "
                     f"as one line: split the text into lines")
