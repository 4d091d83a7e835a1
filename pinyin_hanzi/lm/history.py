"""A user history: the text a user committed, oldest first, kept in a file that survives the process.

An input method converts (``Converter.convert``), the user commits what they meant (the conversion, another
candidate, or a correction), and ``Converter.learn(committed)`` puts that text here; the converter's
:class:`~pinyin_hanzi.lm.history_lm.HistoryLM` counts it and the search prefers it from then on. This module
holds the text alone (no model, no torch), so that a process without a model (the HTTP server, which hands
the history to its model processes) can keep the file too.

The file (``decode.history``, ``translate.py --history FILE``), UTF-8, plain text::

    # pinyin_hanzi history 1
    # one committed clause a line, oldest first; edit freely, or clear it with: translate.py --history FILE --forget
    我们去北京吧
    化石燃料的燃烧

The first line names the format: a file without it (an empty file included) is no history, and loading it is
a DataError (one line) that leaves the file as it is; only a missing file starts an empty history. Lines
starting with ``#`` are comments; other lines are clauses, whitespace at their ends dropped.

Bounded: at most ``max_clauses`` clauses (decode.history_clauses, 100,000 by default) and MAX_CHARACTERS
characters in all (about 6 MB of UTF-8 at most; 100,000 clauses of everyday text take 2.4 MB); past either, the oldest clauses are forgotten first.
A commit is cut into clauses at line ends and after clause punctuation (。！？；，), and a clause into pieces
of at most MAX_CLAUSE characters; only clauses with a hanzi are kept (nothing else is learned).

Saving: the whole file is written to a temporary file beside it, flushed to disk and renamed over it, so a
reader (or a process killed mid-save, ``kill -9`` included) sees the old file or the new one, never half of
one. Learning saves in the background, at most once a :data:`SAVE_DELAY` (a kill loses at most that much);
:meth:`History.save` and the end of the process save what is left. One process at a time owns a history
file (an OS lock, released however the process ends): a second gets an OutputError naming the first.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import threading
import weakref
from collections import deque
from pathlib import Path
from typing import Iterable

from pinyin_hanzi.errors import DataError, OutputError
from pinyin_hanzi.files import hold_lock, open_input, os_error_reason
from pinyin_hanzi.text.pinyin import HANZI_CLASS

HEADER = "# pinyin_hanzi history 1"
COMMENT = ("# one committed clause a line, oldest first; edit freely, or clear it with: "
           "translate.py --history FILE --forget")
MAX_CLAUSES = 100_000  # decode.history_clauses' default
MAX_CHARACTERS = 2_000_000  # all clauses together: about 6 MB of UTF-8 at most
MAX_CLAUSE = 200  # characters: a longer clause is kept in pieces
MAX_FILE_BYTES = 64 * 2**20  # a larger file is no history (and would be read whole)
SAVE_DELAY = 1.0  # seconds: learning saves at most this often
_HANZI = re.compile(f"[{HANZI_CLASS}]")
_CLAUSE_ENDS = re.compile(r"(?<=[。！？；，!?;])|\r\n|[\n\r\u2028\u2029]")


def clauses_of(text: str) -> list[str]:
    """The clauses of committed text as a history keeps them: cut at line ends and after clause
    punctuation, stripped, in pieces of at most MAX_CLAUSE characters, those with a hanzi."""
    pieces = []
    for clause in _CLAUSE_ENDS.split(text):
        clause = clause.strip()
        if len(clause) > MAX_CLAUSE:
            pieces += [clause[start : start + MAX_CLAUSE].strip() for start in range(0, len(clause), MAX_CLAUSE)]
        elif clause:
            pieces.append(clause)
    return [piece for piece in pieces if _HANZI.search(piece)]


def read_file(path: str | Path) -> list[str]:
    """The lines of the history file ``path`` after its header; DataError (one line) for a file that is
    missing, unreadable, too large, not UTF-8 or without the header (the file is left as it is)."""
    with open_input(path, "history file", DataError) as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise DataError(f"history {path} is larger than {MAX_FILE_BYTES // 2**20} MiB: not a history file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"history {path} is damaged: not UTF-8 at byte {error.start}; move it away to start "
                        f"a new one") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != HEADER:
        raise DataError(f"{path} is not a pinyin_hanzi history (its first line is not '{HEADER}'): name another "
                        f"file, or move this one away")
    return lines[1:]


class History:
    """Committed clauses, oldest first, bounded; kept in ``path`` when one is given (loaded here if it exists).

    ``listeners`` are told of each change: ``added(clauses)``, ``removed(clauses)`` (what the bound or
    :meth:`forget` dropped). DataError (one line) for a file that is no history or unreadable, OutputError for
    one another process owns; the file is then left as it is."""

    def __init__(self, path: str | Path | None = None, *, max_clauses: int = MAX_CLAUSES):
        self.path = Path(path) if path else None
        self.max_clauses = max_clauses
        self.clauses: deque[str] = deque()
        self.characters = 0
        self._listeners: list = []
        self._lock = threading.Lock()  # learning (a server's request threads) against saving (the timer's)
        self._timer: threading.Timer | None = None
        self._dirty = False
        self._owner = None
        if self.path is not None:
            self._owner = hold_lock(self.path.with_name(self.path.name + ".lock"), busy=lambda pid: (
                f"history {self.path} is in use by process {pid}: one process at a time learns into a history"))
            if self.path.exists() or self.path.is_symlink():
                self._load()
            _open_histories.add(self)

    def __len__(self) -> int:
        return len(self.clauses)

    def listen(self, listener) -> None:
        """Tell ``listener`` (with ``added`` and ``removed`` methods) of every change from now on, after
        telling it the clauses already here."""
        self._listeners.append(listener)
        if self.clauses:
            listener.added(list(self.clauses))

    # ------------------------------------------------------------------------------------------ changes

    def learn(self, text: str) -> list[str]:
        """Keep committed ``text`` (see :func:`clauses_of`); the oldest clauses go past the bounds. Returns the
        clauses kept."""
        added = clauses_of(text)
        if added:
            self._append(added)
        return added

    def extend(self, clauses: Iterable[str]) -> None:
        """Keep clauses already cut as :func:`clauses_of` cuts them (a file's, another process's)."""
        added = list(clauses)
        if added:
            self._append(added)

    def forget(self, text: str | None = None) -> int:
        """Forget every clause (None), or those holding ``text``. Returns how many were forgotten."""
        with self._lock:
            removed = [clause for clause in self.clauses if text is None or text in clause]
            if removed:
                self.clauses = deque(clause for clause in self.clauses if not (text is None or text in clause))
                self.characters = sum(map(len, self.clauses))
        if removed:
            self._change([], removed)
        return len(removed)

    def _append(self, added: list[str], *, changed: bool = True) -> None:
        """Keep ``added``, drop the oldest past the bounds, and tell the listeners what changed (``changed``
        False: the file's own clauses, being loaded)."""
        with self._lock:
            before = len(self.clauses)
            self.clauses.extend(added)
            self.characters += sum(map(len, added))
            dropped = []
            while self.clauses and (len(self.clauses) > self.max_clauses or self.characters > MAX_CHARACTERS):
                dropped.append(self.clauses.popleft())
                self.characters -= len(dropped[-1])
        # what was dropped came from the front: clauses already here, then (a commit past the bounds alone)
        # the first of those just added, which the listeners never saw
        if changed:
            self._change(added[max(len(dropped) - before, 0):], dropped[:before])

    def _change(self, added: list[str], removed: list[str]) -> None:
        for listener in self._listeners:
            if removed:
                listener.removed(removed)
            if added:
                listener.added(added)
        if self.path is not None:
            self._dirty = True
            self._save_later()

    # ------------------------------------------------------------------------------------------- the file

    def _load(self) -> None:
        lines = read_file(self.path)
        self._append(clauses_of("\n".join(line for line in lines if not line.lstrip().startswith("#"))),
                     changed=False)

    def save(self) -> None:
        """Write the file now if anything changed since it was last written (atomically: see the module).
        OutputError (one line) if it cannot be written; the file then stays as it was."""
        if self.path is None:
            return
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            text = "\n".join([HEADER, COMMENT, *self.clauses]) + "\n"
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())  # the bytes are on disk before the rename makes them the history
            os.replace(temporary, self.path)
        except BaseException as raised:  # failed or interrupted (Ctrl-C): no temporary stays, saved next time
            self._dirty = True
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            if isinstance(raised, OSError):
                raise OutputError(f"cannot save history {self.path}: {os_error_reason(raised)}") from None
            raise

    def _save_later(self) -> None:
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(SAVE_DELAY, self._save_now)
            self._timer.daemon = True
            self._timer.start()

    def _save_now(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self.save()
        except OutputError as error:  # on the timer's thread: told where it cannot be raised, tried again later
            warn(str(error))

    def __del__(self) -> None:  # a converter let go of without close(): what it learned is still saved
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing may escape __del__; the timer's warning has told the user
            pass

    def close(self) -> None:
        """Save what is left and give the file up to other processes."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self.save()
        if self._owner is not None:
            self._owner.close()
            self._owner = None
        _open_histories.discard(self)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


_open_histories: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _save_all() -> None:
    for history in list(_open_histories):
        try:
            history.save()
        except OutputError as error:
            warn(str(error))
