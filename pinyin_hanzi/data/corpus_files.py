"""A user's corpus files as preparation saw them: the sha256 of their bytes, and the state of each file
(size, modification and change times, inode) when it was hashed.

Preparation reads a user's file twice: once to fingerprint it (the hash decides whether prepared data is up to
date, :func:`pinyin_hanzi.data.corpus.prepare`), then to annotate it. A file rewritten in place meanwhile
(``cp`` truncates it, then writes the same bytes) would give a store of part of the file kept under the whole
file's fingerprint, which every later run would reuse. So the bytes hashed must be the file's whole size, the
file must stay in one state while it is hashed and while it is annotated (:class:`UnchangedLines`), and once
annotated it must still be in the state it was hashed in (:func:`check_unchanged`); otherwise nothing is kept
and the error says so in one line.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pinyin_hanzi.data.inputs import TextLines, check_user_source
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.files import os_error_reason

BLOCK_BYTES = 1 << 20  # read and hashed at a time


@dataclass(frozen=True)
class FileState:
    """What any write, truncation, replacement (a new inode) or restored modification time (the change time
    moves anyway) alters. Times have the clock's resolution (a few ms): two writes within one tick look alike,
    which is why the bytes hashed are counted too."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileState:
        return cls(status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_dev)


def state_of(path: Path) -> FileState | None:
    """The state of the file at ``path`` now; None when there is none to stat."""
    try:
        return FileState.of(os.stat(path))
    except OSError:
        return None


def changed_error(path: Path, was: FileState, now: FileState | None, read: int | None = None) -> DataError:
    """The one line for a corpus file that changed while preparation read it, saying how."""
    if now is None:
        how = "it was removed"
    elif read is not None and read != was.size:
        how = f"{read:,} bytes read of the {was.size:,} it had"
    elif (now.inode, now.device) != (was.inode, was.device):
        how = "it was replaced by another file"
    elif now.size != was.size:
        how = f"its size went from {was.size:,} to {now.size:,} bytes"
    else:
        how = "it was written to"
    return DataError(f"corpus file {path} changed while it was read for preparation ({how}): nothing was kept; "
                     f"prepare again once nothing writes to it")


def file_hash(path: Path) -> tuple[str, FileState]:
    """(sha256 of the file's bytes, its state while they were read). DataError (one line) if it cannot be read,
    or changed while it was read: the bytes read are not its size, or its state is not the same afterwards (by
    its open handle, and by its name: a file renamed over it)."""
    digest, read = hashlib.sha256(), 0
    try:
        with open(path, "rb", buffering=0) as handle:  # read by blocks of a MB: a buffer would add nothing
            before = FileState.of(os.fstat(handle.fileno()))
            while block := handle.read(BLOCK_BYTES):
                digest.update(block)
                read += len(block)
            after = FileState.of(os.fstat(handle.fileno()))
    except OSError as error:
        raise DataError(f"cannot read corpus file {path}: {os_error_reason(error)}") from None
    if read != before.size:
        raise changed_error(path, before, after, read)
    now = state_of(path)
    if after != before or now != before:
        raise changed_error(path, before, now if after == before else after)
    return digest.hexdigest(), before


def files_hash(name: str) -> tuple[str, dict[Path, FileState]]:
    """(sha256, the state of each file) of a user source: the hash of the one file's bytes (as it always was),
    or of each file's name and bytes' hash for a folder or glob. DataError (one line) for a missing, unreadable
    or not regular file (before any work), or one that changed while it was hashed."""
    files = check_user_source(name)
    hashed = {path: file_hash(path) for path in files}
    states = {path: state for path, (_, state) in hashed.items()}
    if len(files) == 1 and Path(name) == files[0]:
        return hashed[files[0]][0], states
    joined = "".join(f"{path}\0{digest}\0" for path, (digest, _) in hashed.items())
    return hashlib.sha256(joined.encode()).hexdigest(), states


@dataclass(frozen=True)
class UnchangedLines(TextLines):
    """:class:`TextLines` of a user's file that must not change while they are read: DataError (one line)
    when the file's state (:class:`FileState`) at the end of the reading, or when the reading
    failed, is not what it was as the reading began. (``cp`` onto a file being read truncates it: the reader
    sees the end of the file early, or a character cut in two.)"""

    def __iter__(self) -> Iterator[str]:
        before = state_of(self.path)
        try:
            yield from super().__iter__()
        except DataError:
            self._check(before)
            raise
        self._check(before)

    def _check(self, before: FileState | None) -> None:
        now = state_of(self.path)
        if before is not None and now != before:
            raise changed_error(self.path, before, now)


def check_unchanged(states: dict[Path, FileState]) -> None:
    """DataError (one line) for the first file not in the state it was hashed in: called once its text has
    been read, so that what was prepared is what the fingerprint describes; and when reading failed, since a
    change explains the failure (a file truncated in the middle of a character reads as one cut short)."""
    for path, state in states.items():
        now = state_of(path)
        if now != state:
            raise changed_error(path, state, now)
