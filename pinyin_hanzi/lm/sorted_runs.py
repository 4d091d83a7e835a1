"""Counting more distinct keys than memory holds: sorted runs spilled to disk and merged in chunks.

A :class:`SpillingCounter` adds up (keys, counts) pairs as they come. While it holds fewer than its budget of
keys it works in memory, as a plain sort-and-sum would; past the budget it writes what it holds, sorted and
summed, to a run file and starts again. :meth:`SpillingCounter.chunks` then gives the total, sorted and
distinct, a chunk at a time: the one in-memory array, or the runs merged k-way, each run read a chunk at a
time, so that memory stays near the budget however many keys there are.

Runs are raw files of int64 (key, count) pairs, read with ``np.fromfile`` through a file handle, not
memory-mapped: the pages of a mapped file stay in the process's memory (RSS) once read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

Chunk = tuple[np.ndarray, ...]  # (keys, counts) or (keys, column, column, ...): int64 arrays of one length


def add_up(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys sorted, each one's counts added up) of any (keys, counts), int64."""
    order = np.argsort(keys, kind="stable")
    keys, counts = keys[order], np.asarray(counts, np.int64)[order]
    if len(keys) == 0:
        return keys.astype(np.int64), counts
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts].astype(np.int64), np.add.reduceat(counts, starts)


class RunWriter:
    """A run file written a chunk at a time: ``columns`` int64 columns of sorted rows, stored row by row."""

    def __init__(self, path: Path, columns: int = 2):
        self.path, self.columns, self.rows = path, columns, 0
        self._handle = open(path, "wb")  # noqa: SIM115 (open across appends; closed by close())

    def append(self, *columns: np.ndarray) -> None:
        np.stack([np.asarray(column, np.int64) for column in columns], axis=1).tofile(self._handle)
        self.rows += len(columns[0])

    def close(self) -> Path:
        self._handle.close()
        return self.path


def read_run(path: Path, columns: int = 2, chunk: int = 1 << 20) -> Iterator[Chunk]:
    """The columns of a run file, ``chunk`` rows at a time."""
    with open(path, "rb") as handle:
        while True:
            rows = np.fromfile(handle, np.int64, chunk * columns).reshape(-1, columns)
            if len(rows) == 0:
                return
            yield tuple(np.ascontiguousarray(rows[:, column]) for column in range(columns))


class _RunReader:
    """One run being merged: the rows read but not yet taken, refilled ``chunk`` rows at a time."""

    def __init__(self, path: Path, chunk: int):
        self._chunks, self.exhausted = read_run(path, 2, chunk), False
        self.keys = self.counts = np.zeros(0, np.int64)

    def fill(self) -> None:
        if len(self.keys) == 0 and not self.exhausted:
            try:
                self.keys, self.counts = next(self._chunks)
            except StopIteration:
                self.exhausted = True

    def take_up_to(self, bound: int) -> tuple[np.ndarray, np.ndarray]:
        cut = int(np.searchsorted(self.keys, bound, side="right"))
        taken = self.keys[:cut], self.counts[:cut]
        self.keys, self.counts = self.keys[cut:], self.counts[cut:]
        return taken


def merge_runs(paths: list[Path], chunk: int, progress: Callable[[int], object] | None = None
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The runs' counts added up, sorted and distinct, a chunk at a time: each round takes from every run the
    rows up to the smallest last key of the chunks in hand (no run holds a smaller key further on), so a
    round holds at most ``chunk`` rows per run. ``progress``: called with the rows each round took."""
    readers = [_RunReader(path, chunk) for path in paths]
    while True:
        for reader in readers:
            reader.fill()
        live = [reader for reader in readers if len(reader.keys)]
        if not live:
            return
        # A run whose rows in hand may be followed by more bounds the round by its last key in hand.
        bound = min((int(reader.keys[-1]) for reader in live if not reader.exhausted), default=None)
        if bound is None:
            bound = max(int(reader.keys[-1]) for reader in live)
        parts = [reader.take_up_to(bound) for reader in live]
        if progress is not None:
            progress(sum(len(keys) for keys, _ in parts))
        yield add_up(np.concatenate([keys for keys, _ in parts]), np.concatenate([counts for _, counts in parts]))


class SpillingCounter:
    """Counts of int64 keys added up in memory up to ``budget`` keys held, spilled to sorted runs in
    ``folder`` beyond that (see the module docstring)."""

    def __init__(self, folder: Path, budget: int):
        self.folder, self.budget = folder, budget
        self.runs: list[Path] = []
        self.spilled_rows = 0
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._held, self._is_summed = 0, True  # _is_summed: the pending part is one, summed and sorted

    @property
    def spilled(self) -> bool:
        return bool(self.runs)

    @property
    def rows(self) -> int:
        """The rows :meth:`chunks` reads: those of the runs and those held."""
        return self.spilled_rows + self._held

    def add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self._pending.append((np.asarray(keys, np.int64), np.asarray(counts, np.int64)))
        self._held, self._is_summed = self._held + len(keys), False
        if self._held > self.budget:
            keys, counts = self._summed()
            if len(keys) > self.budget // 2:  # too many distinct keys to keep: a run of its own
                self._spill(keys, counts)

    def _summed(self) -> tuple[np.ndarray, np.ndarray]:
        """The pending parts added up, kept as the one pending part."""
        if not self._is_summed:
            keys, counts = add_up(np.concatenate([keys for keys, _ in self._pending]),
                                  np.concatenate([counts for _, counts in self._pending]))
            self._pending, self._held, self._is_summed = [(keys, counts)], len(keys), True
        return self._pending[0] if self._pending else (np.zeros(0, np.int64), np.zeros(0, np.int64))

    def _spill(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        writer = RunWriter(self.folder / f"run-{len(self.runs)}.bin")
        writer.append(keys, counts)
        self.runs.append(writer.close())
        self.spilled_rows += len(keys)
        self._pending, self._held, self._is_summed = [], 0, True

    def in_memory(self) -> tuple[np.ndarray, np.ndarray]:
        """All the counts (keys sorted and distinct), where nothing was spilled."""
        assert not self.runs
        return self._summed()

    def chunks(self, chunk: int | None = None, progress: Callable[[int], object] | None = None
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All the counts, keys sorted and distinct, in chunks (runs merged ``chunk`` rows per run at a time;
        by default half the budget shared among the runs). ``progress``: called with the rows read."""
        if not self.runs:
            rows = self._held
            keys, counts = self.in_memory()
            if progress is not None:
                progress(rows)
            yield keys, counts
            return
        if self._held:
            self._spill(*self._summed())
        yield from merge_runs(self.runs, chunk or max(8, self.budget // (2 * len(self.runs))), progress)


def whole_groups(chunks: Iterable[Chunk], divisor: int) -> Iterator[Chunk]:
    """Sorted chunks cut again so that the rows of one group (key // divisor) are never split between two:
    the rows of a chunk's last group wait for the next chunk."""
    held: Chunk | None = None
    for chunk in chunks:
        if held is not None:
            chunk = tuple(np.concatenate(pair) for pair in zip(held, chunk))
        if len(chunk[0]) == 0:
            held = chunk
            continue
        groups = chunk[0] // divisor
        cut = int(np.searchsorted(groups, groups[-1], side="left"))
        held = tuple(column[cut:] for column in chunk)
        if cut:
            yield tuple(column[:cut] for column in chunk)
    if held is not None and len(held[0]):
        yield held
