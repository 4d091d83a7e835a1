"""Preparation's first stage: corpus lines -> annotated examples, in units of work spread over processes.

The sources' documents are cut into :class:`Unit` s of a few thousand lines, in a fixed order that depends on the
text alone. Each unit is annotated on its own (pypinyin, the slow part) by :func:`annotate`, in as many worker
processes as asked, and the results are taken back in unit order: so the output is the same bytes for one worker
or many. A :class:`Part` collects the results on disk (its ids are the part's own, its examples not yet
deduplicated); :mod:`pinyin_hanzi.data.merge` turns one part, or the parts that several machines annotated (one
shard each, ``--shard i/n``), into the token store.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pypinyin import load_phrases_dict

from pinyin_hanzi.data.examples import SPLITS, copies, line_examples, split_of, text_digest
from pinyin_hanzi.data.sources import Document
from pinyin_hanzi.data.store import FileReader
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.files import os_error_reason
from pinyin_hanzi.text.pinyin import is_hanzi, phrase_readings

UNIT_CHARACTERS = 200_000  # a unit of work: lines of one document up to about this much text
UNIT_LINES = 5_000  # ... or this many lines (a phrase table's entries are short)
_EXAMPLE_ARRAYS = {"lengths": np.uint16, "splits": np.uint8, "keys": np.uint64, "copies": np.uint8,
                   "hanzi": np.uint16, "sources": np.uint16}
_PART_ARRAYS = {"source": np.uint32, "target": np.uint32, **_EXAMPLE_ARRAYS}  # the files of a part
_MANIFEST_TYPES = {"fingerprint": dict, "shard": list, "converted": dict, "tokens": list, "chars": list,
                   "units": list, "examples": int, "token_count": int, "lines": dict, "skipped": dict}
_CHECK_BLOCK = 1 << 22  # ids read at a time when a part is checked: 16 MB, whatever its size


@dataclass
class Unit:
    """Lines of one document: the ``chunk``-th piece of document ``document`` (counted over all sources)."""

    document: int
    chunk: int
    source: int  # index of the source in data.sources
    kind: str
    split: str  # the document's fixed split, or "" (by the hash of each example)
    weight: float
    lines: list
    size: int  # characters (or phrase entries), for the progress bar


@dataclass
class Annotated:
    """What :func:`annotate` makes of a unit: its examples, their tokens as ids into the unit's own lists of
    distinct tokens (``tokens`` pinyin, ``chars`` hanzi), one value per example in each of :data:`_EXAMPLE_ARRAYS`
    (the example's length, split index, dedup key, copies, hanzi count, source index) and what was skipped."""

    document: int
    chunk: int
    source: int
    tokens: list[str]
    chars: list[str]
    source_ids: np.ndarray
    target_ids: np.ndarray
    arrays: dict[str, np.ndarray]
    lines: int
    skipped: Counter = field(default_factory=Counter)


def units(documents: Iterable[tuple[int, int, Document, float]], shard: tuple[int, int] = (0, 1)) -> Iterator[Unit]:
    """The units of ``documents`` ((document index, source index, document, weight), in order), cut by
    :data:`UNIT_CHARACTERS` and :data:`UNIT_LINES`; with ``shard`` (i, n) only the documents whose index is i
    modulo n (a machine's share)."""
    for number, source, document, weight in documents:
        if number % shard[1] != shard[0]:
            continue
        chunk, lines, size = 0, [], 0
        for line in document.lines:
            lines.append(line)
            size += len(line) if isinstance(line, str) else 1
            if size >= UNIT_CHARACTERS or len(lines) >= UNIT_LINES:
                yield Unit(number, chunk, source, document.kind, document.split, weight, lines, size)
                chunk, lines, size = chunk + 1, [], 0
        if lines or chunk == 0:
            yield Unit(number, chunk, source, document.kind, document.split, weight, lines, size)


def annotate(unit: Unit, max_len: int, held_out) -> Annotated:
    """Annotate one unit (see :class:`Annotated`); ``held_out`` has valid_per_mille and test_per_mille."""
    skipped: Counter = Counter()
    examples = [example for line in unit.lines for example in line_examples(unit.kind, line, max_len, skipped)]
    texts = [example.hanzi for example in examples]
    digests = [text_digest(text) for text in texts]
    splits = [unit.split or split_of(text, held_out, digest) for text, digest in zip(texts, digests)]
    # Ids by whole lists (dict.fromkeys keeps the first-seen order), not a dict lookup per token in a loop.
    tokens = [token for example in examples for token in example.tokens]
    characters = "".join(texts)
    token_list, char_list = list(dict.fromkeys(tokens)), list(dict.fromkeys(characters))
    arrays = {
        "lengths": np.fromiter(map(len, texts), np.uint16, len(texts)),
        "splits": np.array([SPLITS.index(split) for split in splits], np.uint8),
        "keys": np.frombuffer(b"".join(digest[:8] for digest in digests), ">u8").astype(np.uint64),
        "copies": np.array([copies(text, unit.weight) if split == "train" else 1
                            for text, split in zip(texts, splits)], np.uint8),
        "hanzi": np.array([sum(map(is_hanzi, text)) for text in texts], np.uint16),
        "sources": np.full(len(texts), unit.source, np.uint16),
    }
    return Annotated(unit.document, unit.chunk, unit.source, token_list, char_list,
                     _ids(tokens, token_list), _ids(characters, char_list), arrays, len(unit.lines), skipped)


def _ids(items, distinct: list[str]) -> np.ndarray:
    """Each of ``items`` as its index in ``distinct``."""
    index = {item: number for number, item in enumerate(distinct)}
    return np.fromiter(map(index.__getitem__, items), np.uint32, len(items))


# ------------------------------------------------------------------------------------------ the workers

_WORKER: dict = {}


def _start_worker(phrases: dict | None, max_len: int, held_out) -> None:
    """A worker process's setup: pypinyin reads the phrase table's readings (for good: the process only
    annotates), and the settings every unit needs."""
    if phrases:
        load_phrases_dict(phrases)
    _WORKER.update(max_len=max_len, held_out=held_out)


def _annotate_in_worker(unit: Unit) -> Annotated:
    return annotate(unit, _WORKER["max_len"], _WORKER["held_out"])


def annotated_in_order(work: Iterable[Unit], *, workers: int, max_len: int, held_out, phrases: dict | None
                       ) -> Iterator[Annotated]:
    """:func:`annotate` of every unit of ``work``, in order, over ``workers`` processes (1: this one). At most
    two units a worker are read ahead, so that memory holds a few units, whatever the corpus's size."""
    if workers <= 1:
        with phrase_readings(phrases or {}):
            for unit in work:
                yield annotate(unit, max_len, held_out)
        return
    context = multiprocessing.get_context("spawn" if os.name != "posix" else "forkserver")
    with context.Pool(workers, initializer=_start_worker, initargs=(phrases, max_len, held_out)) as pool:
        pending: deque = deque()
        for unit in work:
            pending.append(pool.apply_async(_annotate_in_worker, (unit,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


# --------------------------------------------------------------------------------------------- the part

class Part:
    """Annotated units gathered on disk, in unit order: every example's tokens as ids into the part's own
    vocabularies (``tokens``, ``chars``: first seen, first numbered), one value per example in each of the
    example arrays, and per unit (document, chunk, first example, examples, first token). Written by
    :meth:`add`, closed by :meth:`finish` (which writes ``part.json`` last: a part without it is incomplete);
    read back with :meth:`open`."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._files = {name: open(folder / f"{name}.bin", "wb") for name in ("source", "target", *_EXAMPLE_ARRAYS)}
        self.tokens: dict[str, int] = {}
        self.chars: dict[str, int] = {}
        self.units: list[list[int]] = []
        self.examples = self.token_count = 0
        self.lines: Counter = Counter()  # per source index
        self.skipped: dict[int, Counter] = {}

    def add(self, result: Annotated) -> None:
        token_map = np.array([self.tokens.setdefault(t, len(self.tokens)) for t in result.tokens] or [0], np.uint32)
        char_map = np.array([self.chars.setdefault(c, len(self.chars)) for c in result.chars] or [0], np.uint32)
        token_map[result.source_ids].tofile(self._files["source"])
        char_map[result.target_ids].tofile(self._files["target"])
        for name, values in result.arrays.items():
            values.tofile(self._files[name])
        n = len(result.arrays["lengths"])
        self.units.append([result.document, result.chunk, self.examples, n, self.token_count])
        self.examples += n
        self.token_count += len(result.source_ids)
        self.lines[result.source] += result.lines
        self.skipped.setdefault(result.source, Counter()).update(result.skipped)

    def finish(self, fingerprint: dict, shard: tuple[int, int], converted: dict[str, int]) -> None:
        for handle in self._files.values():
            handle.close()
        manifest = {"fingerprint": fingerprint, "shard": list(shard), "converted": converted,
                    "tokens": list(self.tokens), "chars": list(self.chars), "units": self.units,
                    "examples": self.examples, "token_count": self.token_count,
                    "lines": {str(k): v for k, v in self.lines.items()},
                    "skipped": {str(k): dict(v) for k, v in self.skipped.items()}}
        (self.folder / "part.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")

    @staticmethod
    def open(folder: Path) -> dict:
        """A finished part (:func:`read_manifest`; its files are not checked again, see :func:`check_part`): its
        manifest, with "folder", and its arrays under "arrays" (source, target and the example arrays), each a
        :class:`FileArray`."""
        manifest = read_manifest(folder)
        manifest["folder"] = folder
        manifest["arrays"] = {name: FileArray(folder / f"{name}.bin", dtype) for name, dtype in _PART_ARRAYS.items()}
        return manifest


def read_manifest(folder: Path) -> dict:
    """A finished part's ``part.json``. DataError (one line naming the part and what is wrong) when it has none
    (:meth:`Part.finish` writes it last) or it is not the JSON that :meth:`Part.finish` writes."""
    path = folder / "part.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"part {folder} is incomplete: it has no part.json, which its preparation writes "
                        f"last") from None
    except OSError as error:
        raise DataError(f"cannot read {path}: {os_error_reason(error)}") from None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested past the parser's depth
        raise DataError(f"part {folder} is damaged: its part.json is not JSON") from None
    problem = _manifest_problem(manifest)
    if problem:
        raise DataError(f"part {folder} is damaged: {problem}")
    return manifest


def check_part(folder: Path) -> dict:
    """:func:`read_manifest`, and the part's files checked against it (a part from elsewhere, before a merge
    reads it): DataError (one line) also when a file does not hold the values part.json lists (cut short, or
    longer), the examples' lengths do not add up to its tokens, or a token id is beyond its vocabularies."""
    manifest = read_manifest(folder)
    problem = _files_problem(folder, manifest)
    if problem:
        raise DataError(f"part {folder} is damaged: {problem}")
    return manifest


def _manifest_problem(manifest) -> str | None:
    """What in a parsed part.json is not as :meth:`Part.finish` writes it, or None."""
    if not isinstance(manifest, dict):
        return "its part.json holds no object"
    for key, kind in _MANIFEST_TYPES.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest[key], bool):
            return f"its part.json has no {key!r} ({kind.__name__})"
    units = manifest["units"]
    if not (all(isinstance(unit, list) and len(unit) == 5 and all(map(_is_count, unit)) for unit in units)
            and _is_count(manifest["examples"]) and _is_count(manifest["token_count"])):
        return "its part.json's units or counts are not counts"
    firsts = np.cumsum([0] + [unit[3] for unit in units]).tolist()  # each unit's examples follow the last's
    if [unit[2] for unit in units] != firsts[:-1] or firsts[-1] != manifest["examples"]:
        return "its part.json's units do not cover its examples one after another"
    skipped = manifest["skipped"].values()
    counts = [*manifest["lines"].values(), *manifest["converted"].values(),
              *(count for reasons in skipped if isinstance(reasons, dict) for count in reasons.values())]
    names = manifest["tokens"] + manifest["chars"]
    if not (all(isinstance(name, str) for name in names) and all(map(_is_count, counts))
            and all(isinstance(reasons, dict) for reasons in skipped)
            and all(key.isdigit() for key in (*manifest["lines"], *manifest["skipped"]))):
        return "its part.json's vocabularies or line counts are not strings and counts"
    return None


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _files_problem(folder: Path, manifest: dict) -> str | None:
    """Which of a part's files does not hold what its part.json lists (cut short, or longer), or None."""
    for name, dtype in _PART_ARRAYS.items():
        values = manifest["token_count"] if name in ("source", "target") else manifest["examples"]
        expected = values * np.dtype(dtype).itemsize
        try:
            size = (folder / f"{name}.bin").stat().st_size
        except OSError as error:
            return f"{name}.bin: {os_error_reason(error)}"
        if size != expected:
            return (f"{name}.bin holds {size:,} bytes where part.json lists {values:,} values, {expected:,} bytes "
                    f"({'cut short' if size < expected else 'too long'})")
    lengths = np.fromfile(folder / "lengths.bin", np.uint16)
    starts = np.cumsum(np.concatenate([[0], lengths]), dtype=np.int64)  # where each example's tokens start
    units = manifest["units"]
    if starts[-1] != manifest["token_count"] or starts[[unit[2] for unit in units]].tolist() != [
            unit[4] for unit in units]:
        return "the lengths in lengths.bin do not add up to the tokens part.json lists"
    for name, vocabulary in (("source", "tokens"), ("target", "chars")):
        if _largest(folder / f"{name}.bin") >= len(manifest[vocabulary]):
            return f"{name}.bin holds ids beyond the {len(manifest[vocabulary]):,} {vocabulary} of part.json"
    return None


def _largest(path: Path) -> int:
    """The largest uint32 in a file (-1 when empty), read a block at a time."""
    largest, total = -1, path.stat().st_size // 4
    with FileReader(path, np.uint32) as reader:
        for start in range(0, total, _CHECK_BLOCK):
            largest = max(largest, int(reader.read(start, min(start + _CHECK_BLOCK, total)).max()))
    return largest


class FileArray:
    """A 1-D array in a file, read a slice at a time, neither mapped nor held open: the pages of a mapped file
    stay in the process's memory (RSS) once read, and the merge reads a part's tokens (8 bytes each, 0.8 GB
    for 100M hanzi) from end to end, twice; and a mapping keeps its file open, so the eight arrays of each of
    1,000 parts would pass the usual limit of 1,024 open files (``ulimit -n``)."""

    def __init__(self, path: Path, dtype):
        self.path, self.dtype = path, np.dtype(dtype)
        self._length = path.stat().st_size // self.dtype.itemsize

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, where: slice) -> np.ndarray:
        start, stop, step = where.indices(self._length)
        if step != 1:
            raise IndexError("a FileArray is read by contiguous slices")
        with FileReader(self.path, self.dtype) as reader:
            return reader.read(start, max(stop, start))


def annotate_into(part: Part, work: Iterable[Unit], *, workers: int, max_len: int, held_out,
                  phrases: dict | None, progress: Callable[[int], None]) -> None:
    """Annotate ``work`` into ``part``; ``progress(size)`` after each unit."""
    sizes: deque = deque()

    def counted(source: Iterable[Unit]) -> Iterator[Unit]:
        for unit in source:
            sizes.append(unit.size)
            yield unit

    for result in annotated_in_order(counted(work), workers=workers, max_len=max_len, held_out=held_out,
                                     phrases=phrases):
        part.add(result)
        progress(sizes.popleft())
