"""Output folders: one process at a time (an OS lock), checked writable before long work starts, and an
OSError on a write told in words. Input files: regular files (or, where a tool can take a stream, pipes),
read with a bound on their size or on the length of a line, so that no input makes a tool wait forever or
fill the memory (``/dev/zero``, a FIFO that no process writes to).

The locks are ``flock`` locks on a lock file: the operating system releases them when the process ends,
however it ends (``kill -9`` included), so a crashed run never leaves a folder locked. The lock file stays
(removing it would let a third process lock a file the second is about to lock); it holds the pid of the
last owner, for the message a second process gets.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

from pinyin_hanzi.errors import OutputError, PinyinHanziError

try:
    import fcntl
except ImportError:  # Windows has no flock: there, folders are not locked
    fcntl = None

_REASONS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


def os_error_reason(error: OSError) -> str:
    """What an OSError means, in a few words: ``disk full``, ``read-only file system``, ..."""
    return _REASONS.get(error.errno) or (error.strerror or str(error) or type(error).__name__).lower()


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words: ``a regular file``, ``a character device``, ..."""
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode)
                else "not a regular file")


def open_input(path: str | os.PathLike, what: str, error: type[PinyinHanziError], *, pipes: bool = False,
               why: str = "") -> BinaryIO:
    """``path`` opened for reading, in binary. ``error`` (one line naming ``what``, "corpus file") if it is
    missing, unreadable, a directory, or anything but a regular file; with ``pipes``, a named pipe is taken
    too (``--config <(...)``, read as it is written), and one that no process writes to reads as empty
    instead of waiting forever. ``why`` ends the message for other kinds of file (why a file is needed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as problem:
        raise error(f"cannot read {what} {path}: {os_error_reason(problem)}") from None
    if stat.S_ISDIR(mode):
        raise error(f"cannot read {what} {path}: it is a directory")
    fifo = pipes and stat.S_ISFIFO(mode)
    if not (stat.S_ISREG(mode) or fifo):
        raise error(f"{what} {path} is {file_kind(mode)}, not a regular file{why}")
    try:  # a FIFO opened without O_NONBLOCK would wait for a writer, for ever if none comes
        descriptor = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if fifo else 0))
    except OSError as problem:
        raise error(f"cannot read {what} {path}: {os_error_reason(problem)}") from None
    if fifo:  # then wait for the writer's data as a pipe does (with no writer at all: end of file)
        os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def bounded_lines(handle: BinaryIO, limit: int, too_long: Callable[[int], PinyinHanziError]) -> Iterator[bytes]:
    """The lines of ``handle`` (each with its ``\n``), read one at a time; ``too_long(line number)`` is raised
    for a line of more than ``limit`` bytes, before more of it is read (``/dev/zero`` has no line end)."""
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            raise too_long(number)
        yield line


def check_writable(directory: str | Path, what: str) -> None:
    """Create ``directory`` if needed and write (then remove) a file in it. OutputError naming ``what``
    ("checkpoint folder") if that fails: a read-only or full disk is found before the work, not at its end."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-") as probe:
            probe.write(b"x")
            probe.flush()
    except OSError as error:
        raise OutputError(f"cannot write to the {what} {directory}: {os_error_reason(error)}") from None


def _holder(path: Path) -> str:
    """The pid the lock file names; its owner writes it just after locking, so wait a moment for it."""
    for _ in range(20):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            text = ""
        if text.isdigit():
            return text
        time.sleep(0.05)
    return "unknown"


def hold_lock(path: str | Path, *, busy: Callable[[str], str] | None = None,
              wait: Callable[[str], None] | None = None) -> TextIO:
    """Take an exclusive lock on the file ``path`` (created if needed) and return the open lock file: the
    lock is held until it is closed (or the process ends).

    If another process holds it: without ``wait``, OutputError(``busy(pid)``); with it, call ``wait(pid)``
    (to say why nothing happens) and block until the other process is done."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # "a+": never truncate the owner's pid before locking
    try:
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(path)
                if wait is None:
                    raise OutputError(busy(holder) if busy else f"{path} is locked by process {holder}") from None
                wait(holder)
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
    except BaseException:
        handle.close()
        raise
    return handle


@contextmanager
def locked(path: str | Path, *, busy: Callable[[str], str] | None = None,
           wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` for the block: see :func:`hold_lock`."""
    with hold_lock(path, busy=busy, wait=wait):
        yield  # closing the file releases the lock
