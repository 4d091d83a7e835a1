"""Output folders: one process at a time (an OS lock), checked writable before long work starts, and an
OSError on a write told in words.

The locks are ``flock`` locks on a lock file: the operating system releases them when the process ends,
however it ends (``kill -9`` included), so a crashed run never leaves a folder locked. The lock file stays
(removing it would let a third process lock a file the second is about to lock); it holds the pid of the
last owner, for the message a second process gets.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pinyin_hanzi.errors import OutputError

try:
    import fcntl
except ImportError:  # Windows has no flock: there, folders are not locked
    fcntl = None

_REASONS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied"}


def os_error_reason(error: OSError) -> str:
    """What an OSError means, in a few words: ``disk full``, ``read-only file system``, ..."""
    return _REASONS.get(error.errno) or (error.strerror or str(error) or type(error).__name__).lower()


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


@contextmanager
def locked(path: str | Path, *, busy: Callable[[str], str] | None = None,
           wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if needed) for the block.

    If another process holds it: without ``wait``, OutputError(``busy(pid)``); with it, call ``wait(pid)``
    (to say why nothing happens) and block until the other process is done."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:  # "a+": never truncate the owner's pid before locking
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
        yield  # closing the file releases the lock
