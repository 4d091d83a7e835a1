"""The token store: prepared splits as flat arrays of token ids, opened memory-mapped.

As nanoGPT's ``train.bin`` and fairseq's memory-mapped indexed datasets do, each split is one data file per
side plus an offsets index, so that training reads examples straight from disk and its memory does not grow
with the corpus. Passes over a whole split and a batch's examples are read from the files, not through the
mapping (see :meth:`StoredSplit.examples`): a mapped page once read stays in the process's memory.

    <split>.source.bin   pinyin token ids of every example, one after another (uint16, or uint32 if needed)
    <split>.target.bin   hanzi ids, one per pinyin token, in the same places
    <split>.offsets.bin  int64, examples + 1 entries: example i is [offsets[i], offsets[i + 1])
    train.copies.bin     uint8, one per training example: how often an epoch trains on it (data.sources' weights)

beside the vocabularies (``pinyin_vocab.txt``, ``hanzi_vocab.txt``), human-readable ``valid.tsv`` /
``test.tsv`` (per source too) and ``stats.json``, whose ``store`` entry lists the arrays' types and sizes.

The store is checked as it is opened, so that damage that keeps the files' sizes (a disk error, a copy cut
short and padded, an edit) is one DataError naming the file instead of an IndexError deep in training, or
worse, training on wrong examples: the vocabularies and stats.json against the hashes preparation recorded
(:func:`integrity_hashes`; a store prepared before them has none and gets the other checks), the types and
sizes stats.json lists, and, the first time a split is opened, its values (:meth:`TokenStore.split`).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pinyin_hanzi.data.vocab import UNK_ID, Vocab, load_vocab
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.files import os_error_reason

STORE_SPLITS = ("train", "valid", "test")
INTEGRITY_KEY = "integrity"  # stats.json's entry of hashes (see integrity_hashes)
VOCAB_FILES = {"source": "pinyin_vocab.txt", "target": "hanzi_vocab.txt"}
CHECK_BLOCK = 1 << 20  # items read at a time by the checks: a few MB whatever the store's size (faster than larger)
PREPARE_AGAIN = "delete {folder} and prepare the data again (python train.py --config CONFIG --prepare-only)"


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned type that holds every id of a vocabulary of this size."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def split_files(split: str) -> tuple[str, ...]:
    return (f"{split}.source.bin", f"{split}.target.bin", f"{split}.offsets.bin") + (
        ("train.copies.bin",) if split == "train" else ())


class SplitWriter:
    """Appends examples to a split's files (see the module docstring); :meth:`close` writes the offsets."""

    def __init__(self, folder: Path, split: str, source_dtype: np.dtype, target_dtype: np.dtype):
        self.split, self.source_dtype, self.target_dtype = split, source_dtype, target_dtype
        self._source = open(folder / f"{split}.source.bin", "wb")
        self._target = open(folder / f"{split}.target.bin", "wb")
        self._copies = open(folder / "train.copies.bin", "wb") if split == "train" else None
        self._offsets_path = folder / f"{split}.offsets.bin"
        self._lengths: list[np.ndarray] = []

    def append(self, source: np.ndarray, target: np.ndarray, lengths: np.ndarray,
               copies: np.ndarray | None = None) -> None:
        """Examples given flat: ``source``/``target`` (tokens,) ids, ``lengths`` (examples,); ``copies``
        (examples,) for the training split."""
        source.astype(self.source_dtype, copy=False).tofile(self._source)
        target.astype(self.target_dtype, copy=False).tofile(self._target)
        self._lengths.append(lengths.astype(np.int64, copy=False))
        if self._copies is not None:
            copies.astype(np.uint8, copy=False).tofile(self._copies)

    def close(self) -> int:
        """Flush and close the files; the number of examples written."""
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        offsets.tofile(self._offsets_path)
        for handle in (self._source, self._target, self._copies):
            if handle is not None:
                handle.close()
        return len(lengths)


@dataclass
class StoredSplit:
    """One split of a token store, memory-mapped: ``source`` and ``target`` (tokens,), ``offsets``
    (examples + 1,), and for the training split ``copies`` (examples,)."""

    source: np.ndarray
    target: np.ndarray
    offsets: np.ndarray
    copies: np.ndarray | None = None
    offsets_path: Path | None = None  # the offsets' file, read for :attr:`lengths` without mapping it whole
    # Where the ids are read in other vocabularies than the store's (a run resumed or initialised from a
    # checkpoint keeps that checkpoint's ids): store id -> id, applied as examples are read.
    source_map: np.ndarray | None = None
    target_map: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """(examples,) tokens of each example (a new array each call), in the narrowest unsigned type that holds
        them (uint8 for examples of data.max_len: one byte an example). From the offsets' file read a block at
        a time, not through the mapping: pages of a mapped file stay in the process's memory."""
        if self.offsets_path is None:
            return _narrowest(np.diff(np.asarray(self.offsets)))
        lengths, block = np.zeros(len(self), np.uint8), 1 << 20
        with open(self.offsets_path, "rb") as handle:
            previous = np.fromfile(handle, np.int64, 1)
            for start in range(0, len(self), block):
                chunk = np.fromfile(handle, np.int64, min(block, len(self) - start))
                piece = _narrowest(np.diff(np.concatenate([previous, chunk])))
                if piece.dtype.itemsize > lengths.dtype.itemsize:
                    lengths = lengths.astype(piece.dtype)
                lengths[start : start + len(chunk)] = piece
                previous = chunk[-1:]
        return lengths

    def read_copies(self) -> np.ndarray | None:
        """(examples,) uint8: how often an epoch trains on each example, read from the file (not through the
        mapping); None where there are none or every example counts once (no array to keep then)."""
        if self.copies is None:
            return None
        copies = _read(self.copies, 0, len(self.copies))
        return None if copies.size and copies.min() == copies.max() == 1 else copies

    def example(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, target ids) of example ``index`` (see :meth:`examples`)."""
        return self.examples([index])[0]

    def examples(self, indices: Iterable[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(source ids, target ids) of each example. A split on disk is read from its files (:class:`FileReader`),
        not through its mapping: a mapped page read stays in the process's memory, and at random places (a batch's
        examples) every read maps a large part of the file around it, so the memory would grow towards the
        store's size as training goes on."""
        if not isinstance(self.source, np.memmap):
            pairs = []
            for index in indices:
                start, end = int(self.offsets[index]), int(self.offsets[index + 1])
                pairs.append((self.source[start:end], self.target[start:end]))
        else:
            with (FileReader.of(self.offsets) as offsets, FileReader.of(self.source) as source,
                  FileReader.of(self.target) as target):
                pairs = []
                for index in indices:
                    start, end = offsets.read(index, index + 2)
                    pairs.append((source.read(start, end), target.read(start, end)))
        return [(_mapped(source, self.source_map), _mapped(target, self.target_map)) for source, target in pairs]

    def in_vocabs(self, store_vocabs: tuple[Vocab, Vocab], vocabs: tuple[Vocab, Vocab]) -> StoredSplit:
        """This split read in ``vocabs`` (pinyin, hanzi) instead of the store's ``store_vocabs``: a token the
        other vocabulary lacks reads as <unk>. The same split where the vocabularies are the same."""
        maps = [None if store.tokens == other.tokens else
                np.array([other.ids.get(token, UNK_ID) for token in store.tokens], np.int64)
                for store, other in zip(store_vocabs, vocabs)]
        return replace(self, source_map=maps[0], target_map=maps[1])

    def blocks(self, side: str = "target", block: int = 1 << 16
               ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The split ``block`` examples at a time, as counting reads it: (ids of ``side`` (source or target),
        one example after another; the examples' lengths; how often each counts (its copies, else 1))."""
        ids, id_map = (self.source, self.source_map) if side == "source" else (self.target, self.target_map)
        for begin in range(0, len(self), block):
            end = min(begin + block, len(self))
            offsets = _read(self.offsets, begin, end + 1)
            weights = np.ones(end - begin, np.int64) if self.copies is None else _read(self.copies, begin, end)
            yield _mapped(_read(ids, int(offsets[0]), int(offsets[-1])), id_map), np.diff(offsets), weights


def split_problem(name: str, split: StoredSplit, examples: int, vocab_sizes: tuple[int, int]
                  ) -> tuple[str, str] | None:
    """(file, what is wrong) for the first damage found in split ``name``, else None: its arrays' lengths
    against each other and ``examples``; offsets from 0, never decreasing, ending at the split's last token
    (so none is negative or past the end); source and target ids of real tokens (from <unk>'s id) below the
    ``vocab_sizes`` (pinyin, hanzi); copies of at least 1. Vectorised, read :data:`CHECK_BLOCK` items at a
    time from the files (not through the mapping, whose pages would stay in memory)."""
    tokens = len(split.source)
    if len(split.offsets) != examples + 1:
        return f"{name}.offsets.bin", f"{len(split.offsets):,} offsets for {examples:,} examples (stats.json)"
    if len(split.target) != tokens:
        return f"{name}.target.bin", f"{len(split.target):,} ids for the {tokens:,} of {name}.source.bin"
    if split.copies is not None and len(split.copies) != examples:
        return "train.copies.bin", f"{len(split.copies):,} counts for {examples:,} examples"
    problems = ((f"{name}.offsets.bin", _offsets_problem(split.offsets, tokens)),
                (f"{name}.source.bin", _ids_problem(split.source, vocab_sizes[0], "pinyin_vocab.txt")),
                (f"{name}.target.bin", _ids_problem(split.target, vocab_sizes[1], "hanzi_vocab.txt")),
                ("train.copies.bin", _copies_problem(split.copies)))
    return next(((file, why) for file, why in problems if why is not None), None)


def _pieces(array: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(start, ``array[start:start + CHECK_BLOCK]``) over the whole array, read from its file."""
    for start in range(0, len(array), CHECK_BLOCK):
        yield start, _read(array, start, min(start + CHECK_BLOCK, len(array)))


def _offsets_problem(offsets: np.ndarray, tokens: int) -> str | None:
    previous = 0
    for start, piece in _pieces(offsets):
        first_wrong = start == 0 and piece[0] != 0
        if first_wrong or piece[0] < previous or (piece[1:] < piece[:-1]).any():  # where: only once found
            return _offsets_said(piece, start, previous, tokens)
        previous = piece[-1]
    if previous != tokens:
        return f"the last offset is {int(previous):,}, not the split's {tokens:,} tokens"
    return None


def _offsets_said(piece: np.ndarray, start: int, previous: int, tokens: int) -> str:
    """What is wrong with a ``piece`` of offsets that falls somewhere (``previous``: the offset before it)."""
    outside = (piece < 0) | (piece > tokens)
    if outside.any():  # say the one that is wrong, not the good one after it, which falls from it
        at = int(np.argmax(outside))
        return f"offset {start + at:,} is {int(piece[at]):,}, outside 0..{tokens:,} (the split's tokens)"
    if start == 0 and piece[0] != 0:
        return f"the first offset is {int(piece[0]):,}, not 0"
    at = int(np.argmax(np.diff(piece, prepend=previous) < 0))
    before = int(piece[at - 1]) if at else int(previous)
    return f"offset {start + at:,} is {int(piece[at]):,}, below the {before:,} before it"


def _ids_problem(ids: np.ndarray, vocab_size: int, vocab_file: str) -> str | None:
    for start, piece in _pieces(ids):
        if piece.min() < UNK_ID or piece.max() >= vocab_size:
            at = int(np.argmax((piece < UNK_ID) | (piece >= vocab_size)))
            return (f"id {int(piece[at]):,} at token {start + at:,}, outside {UNK_ID}..{vocab_size - 1}: "
                    f"{vocab_file} has {vocab_size:,} tokens")
    return None


def _copies_problem(copies: np.ndarray | None) -> str | None:
    for start, piece in _pieces(copies if copies is not None else np.zeros(0, np.uint8)):
        if piece.min() < 1:
            return f"example {start + int(np.argmax(piece < 1)):,} is trained on 0 times an epoch"
    return None


def _read(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    """``array[start:stop]``, read from the file where ``array`` maps one: a pass over a whole split (counting)
    through the mapping would leave every page it read in the process's memory (RSS)."""
    if isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap) and stop > start:
        with FileReader.of(array) as reader:
            return reader.read(start, stop)
    return np.asarray(array[start:stop])


class FileReader:
    """Ranges of an array stored in a file (``dtype`` items from byte ``offset``) read with ``os.pread`` (a seek
    and a read on Windows, which lacks it), not through a mapping: ``read(start, stop)`` is ``array[start:stop]``,
    a new array."""

    def __init__(self, path: str | Path, dtype, offset: int = 0):
        self.path, self.dtype, self.offset = path, np.dtype(dtype), offset

    @classmethod
    def of(cls, array: np.memmap) -> FileReader:
        """A reader of the file a memory-mapped array maps."""
        return cls(array.filename, array.dtype, array.offset)

    def __enter__(self) -> FileReader:
        self.file = open(self.path, "rb", buffering=0)  # noqa: SIM115 (closed by __exit__)
        return self

    def __exit__(self, *exception) -> None:
        self.file.close()

    def read(self, start: int, stop: int) -> np.ndarray:
        if _PREAD is not None:  # one system call, not two: a training batch reads three ranges an example
            data = _PREAD(self.file.fileno(), (stop - start) * self.dtype.itemsize,
                          self.offset + start * self.dtype.itemsize)
            return np.frombuffer(bytearray(data), self.dtype, len(data) // self.dtype.itemsize)
        self.file.seek(self.offset + start * self.dtype.itemsize)
        array = np.empty(stop - start, self.dtype)
        read = self.file.readinto(memoryview(array).cast("B"))  # short only at the file's end
        return array[: read // self.dtype.itemsize]


_PREAD = getattr(os, "pread", None)  # POSIX; Windows lacks it


def _narrowest(lengths: np.ndarray) -> np.ndarray:
    """Non-negative lengths in the narrowest of uint8, uint16, uint32 and int64 that holds them."""
    largest = int(lengths.max()) if lengths.size else 0
    dtype = next((t for t in (np.uint8, np.uint16, np.uint32) if largest <= np.iinfo(t).max), np.int64)
    return lengths.astype(dtype)


def _mapped(ids: np.ndarray, id_map: np.ndarray | None) -> np.ndarray:
    return ids if id_map is None else id_map[ids]


def integrity_hashes(folder: str | Path, stats: dict) -> dict[str, str]:
    """What preparation records in stats.json under :data:`INTEGRITY_KEY` and :class:`TokenStore` verifies:
    the sha256 (16 hex digits) of each vocabulary file, and of ``stats`` itself without that entry and
    ``seconds`` (the one entry in which two preparations of the same data differ). A character swapped in a
    vocabulary keeps every size; the store's ids would then name the wrong characters."""
    hashes = {name: _file_digest(Path(folder) / name) for name in VOCAB_FILES.values()}
    kept = {key: value for key, value in stats.items() if key not in (INTEGRITY_KEY, "seconds")}
    canonical = json.dumps(kept, sort_keys=True, ensure_ascii=False)  # the same for any layout of the file
    hashes["stats.json"] = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return hashes


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _reason(error: OSError) -> str:
    return "missing" if isinstance(error, FileNotFoundError) else os_error_reason(error)


class TokenStore:
    """A prepared-data folder's token store and vocabularies (see the module docstring). Opening it checks
    the vocabularies and stats.json; :meth:`split` checks a split's files the first time it opens it. Damage
    is a DataError (one line) naming the file and saying to prepare the data again."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        try:
            stats = json.loads((self.folder / "stats.json").read_text(encoding="utf-8"))
            self.layout = stats["store"]
        except (OSError, ValueError, KeyError, TypeError):
            raise DataError(f"{self.folder} holds no token store: prepare the data first "
                            f"(python train.py --config CONFIG --prepare-only)") from None
        self._check_hashes(stats)
        self.pinyin_vocab: Vocab = self._vocab(VOCAB_FILES["source"])
        self.hanzi_vocab: Vocab = self._vocab(VOCAB_FILES["target"])
        self._check_layout()
        self._checked: set[str] = set()  # the splits whose files were checked (once per store opened)

    def damaged(self, file: str, why: str) -> DataError:
        """The error for damage found in ``file`` of this store (one line: the file, why, what to do)."""
        return DataError(f"{self.folder / file} is damaged ({why}): {PREPARE_AGAIN.format(folder=self.folder)}")

    def _check_hashes(self, stats: dict) -> None:
        recorded = stats.get(INTEGRITY_KEY)
        if recorded is None:  # prepared before the hashes were recorded: the other checks still apply
            return
        try:
            found = integrity_hashes(self.folder, stats)
        except OSError as error:
            raise self.damaged(Path(error.filename or "").name or "stats.json", _reason(error)) from None
        if not isinstance(recorded, dict):
            raise self.damaged("stats.json", f"its {INTEGRITY_KEY} entry is no table of hashes")
        for name, digest in found.items():
            if recorded.get(name) != digest:
                where = "it" if name == "stats.json" else "stats.json"
                raise self.damaged(name, f"its content hash is {digest}, not {recorded.get(name)} as {where} "
                                         f"recorded when the data was prepared")

    def _vocab(self, name: str) -> Vocab:
        try:
            return load_vocab(self.folder / name)
        except OSError as error:
            raise self.damaged(name, _reason(error)) from None
        except UnicodeDecodeError as error:
            raise self.damaged(name, f"not UTF-8 at byte {error.start}") from None
        except ValueError as error:  # no specials first, a token twice
            raise self.damaged(name, str(error)) from None

    def _check_layout(self) -> None:
        """stats.json's ``store`` entry: the id types a preparation writes for these vocabularies (an unknown
        type would reach np.memmap), and a count of examples for each split it names."""
        for side, vocab in (("source", self.pinyin_vocab), ("target", self.hanzi_vocab)):
            found, expected = self.layout.get(f"{side}_dtype"), str(id_dtype(len(vocab)))
            if found != expected:
                raise self.damaged("stats.json", f"store.{side}_dtype is {found!r}, not {expected}, the type of the "
                                                 f"ids of {VOCAB_FILES[side]}'s {len(vocab):,} tokens")
        examples = self.layout.get("examples")
        if not (isinstance(examples, dict) and set(examples) <= set(STORE_SPLITS) and all(
                type(count) is int and count >= 0 for count in examples.values())):
            raise self.damaged("stats.json", "store.examples is no count of examples per split")
        files = self.layout.get("files", {})  # (absent in a store prepared before it was written)
        if not (isinstance(files, dict) and all(type(size) is int for size in files.values())):
            raise self.damaged("stats.json", "store.files is no table of file sizes")

    def split(self, name: str, *, pinyin_vocab: Vocab | None = None, hanzi_vocab: Vocab | None = None
              ) -> StoredSplit:
        """The split ``name`` (train, valid or test), memory-mapped (nothing is read until it is used); its ids
        in ``pinyin_vocab`` / ``hanzi_vocab`` where given (a model's), else in the store's. The first time a
        split is opened its files are checked (:func:`split_problem`; for 100M tokens 0.3-0.5 s in the page
        cache, under 1 s from disk: bench/store_check.py): a DataError names a damaged one."""
        if name not in self.layout["examples"]:
            raise DataError(f"{self.folder} has no {name} split in its token store")
        split = StoredSplit(self._mapped(f"{name}.source.bin", self.layout["source_dtype"]),
                            self._mapped(f"{name}.target.bin", self.layout["target_dtype"]),
                            self._mapped(f"{name}.offsets.bin", np.int64),
                            self._mapped("train.copies.bin", np.uint8) if name == "train" else None,
                            self.folder / f"{name}.offsets.bin")
        if name not in self._checked:
            problem = split_problem(name, split, self.layout["examples"][name],
                                    (len(self.pinyin_vocab), len(self.hanzi_vocab)))
            if problem is not None:
                raise self.damaged(*problem)
            self._checked.add(name)
        return split.in_vocabs((self.pinyin_vocab, self.hanzi_vocab),
                               (pinyin_vocab or self.pinyin_vocab, hanzi_vocab or self.hanzi_vocab))

    def _mapped(self, file: str, dtype) -> np.ndarray:
        """``file`` mapped as an array of ``dtype``; damaged unless it has the size stats.json lists (where it
        lists sizes) and a whole number of items."""
        path, dtype = self.folder / file, np.dtype(dtype)
        try:
            size = path.stat().st_size
        except OSError as error:
            raise self.damaged(file, _reason(error)) from None
        recorded = self.layout.get("files", {}).get(file, size)
        if size != recorded or size % dtype.itemsize:
            raise self.damaged(file, f"{size:,} bytes, not {recorded:,}" if size != recorded else
                               f"{size:,} bytes, no whole number of {dtype} items")
        if size == 0:  # np.memmap refuses an empty file
            return np.zeros(0, dtype)
        return np.memmap(path, dtype=dtype, mode="r")

    def texts(self, name: str, *, with_copies: bool = False, block: int = 1 << 16) -> Iterator[tuple[list[str], str]]:
        """(pinyin tokens, hanzi text) of every example of split ``name``, in order, read ``block`` examples at
        a time; ``with_copies``: each training example as often as an epoch trains on it. Characters too rare
        for the hanzi vocabulary read as ``<unk>``."""
        split = self.split(name)
        pinyin, hanzi = self.pinyin_vocab.tokens, self.hanzi_vocab.tokens
        for begin in range(0, len(split), block):
            end = min(begin + block, len(split))
            offsets = split.offsets[begin : end + 1]
            sources = split.source[offsets[0] : offsets[-1]].tolist()
            targets = split.target[offsets[0] : offsets[-1]].tolist()
            repeats = split.copies[begin:end].tolist() if with_copies and split.copies is not None else None
            for row in range(end - begin):
                start, stop = offsets[row] - offsets[0], offsets[row + 1] - offsets[0]
                example = ([pinyin[i] for i in sources[start:stop]], "".join(hanzi[i] for i in targets[start:stop]))
                for _ in range(repeats[row] if repeats is not None else 1):
                    yield example
