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
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pinyin_hanzi.data.vocab import UNK_ID, Vocab, load_vocab
from pinyin_hanzi.errors import DataError

STORE_SPLITS = ("train", "valid", "test")


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


def _read(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    """``array[start:stop]``, read from the file where ``array`` maps one: a pass over a whole split (counting)
    through the mapping would leave every page it read in the process's memory (RSS)."""
    if isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap) and stop > start:
        with FileReader.of(array) as reader:
            return reader.read(start, stop)
    return np.asarray(array[start:stop])


class FileReader:
    """Ranges of an array stored in a file (``dtype`` items from byte ``offset``) read with a seek and a read,
    not through a mapping: ``read(start, stop)`` is ``array[start:stop]``, a new array. (A seek and a read
    rather than ``os.pread``, which Windows lacks.)"""

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
        self.file.seek(self.offset + start * self.dtype.itemsize)
        array = np.empty(stop - start, self.dtype)
        read = self.file.readinto(memoryview(array).cast("B"))  # short only at the file's end
        return array[: read // self.dtype.itemsize]


def _narrowest(lengths: np.ndarray) -> np.ndarray:
    """Non-negative lengths in the narrowest of uint8, uint16, uint32 and int64 that holds them."""
    largest = int(lengths.max()) if lengths.size else 0
    dtype = next((t for t in (np.uint8, np.uint16, np.uint32) if largest <= np.iinfo(t).max), np.int64)
    return lengths.astype(dtype)


def _mapped(ids: np.ndarray, id_map: np.ndarray | None) -> np.ndarray:
    return ids if id_map is None else id_map[ids]


class TokenStore:
    """A prepared-data folder's token store and vocabularies (see the module docstring)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        try:
            stats = json.loads((self.folder / "stats.json").read_text(encoding="utf-8"))
            self.layout = stats["store"]
        except (OSError, ValueError, KeyError, TypeError):
            raise DataError(f"{self.folder} holds no token store: prepare the data first "
                            f"(python train.py --config CONFIG --prepare-only)") from None
        self.pinyin_vocab: Vocab = load_vocab(self.folder / "pinyin_vocab.txt")
        self.hanzi_vocab: Vocab = load_vocab(self.folder / "hanzi_vocab.txt")

    def split(self, name: str, *, pinyin_vocab: Vocab | None = None, hanzi_vocab: Vocab | None = None
              ) -> StoredSplit:
        """The split ``name`` (train, valid or test), memory-mapped (nothing is read until it is used); its ids
        in ``pinyin_vocab`` / ``hanzi_vocab`` where given (a model's), else in the store's."""
        if name not in self.layout.get("examples", {}):
            raise DataError(f"{self.folder} has no {name} split in its token store")

        def mapped(file: str, dtype) -> np.ndarray:
            path = self.folder / file
            if path.stat().st_size == 0:  # np.memmap refuses an empty file
                return np.zeros(0, dtype)
            return np.memmap(path, dtype=dtype, mode="r")

        split = StoredSplit(mapped(f"{name}.source.bin", self.layout["source_dtype"]),
                            mapped(f"{name}.target.bin", self.layout["target_dtype"]),
                            mapped(f"{name}.offsets.bin", np.int64),
                            mapped("train.copies.bin", np.uint8) if name == "train" else None,
                            self.folder / f"{name}.offsets.bin")
        if len(split) != self.layout["examples"][name] or split.offsets[-1] != len(split.source):
            raise DataError(f"the token store in {self.folder} is damaged ({name} split): prepare it again "
                            f"(python train.py --config CONFIG --prepare-only, after deleting the folder)")
        return split.in_vocabs((self.pinyin_vocab, self.hanzi_vocab),
                               (pinyin_vocab or self.pinyin_vocab, hanzi_vocab or self.hanzi_vocab))

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
