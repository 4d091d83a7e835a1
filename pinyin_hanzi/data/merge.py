"""Preparation's second stage: annotated parts -> the token store (:mod:`pinyin_hanzi.data.store`).

One part (a single machine's preparation) or several (one shard each) are read from their files, their units
taken in corpus order, and:

1. duplicates are dropped by the md5 of their text: valid/test examples claim their texts first (the first
   occurrence stays), then training examples that repeat neither a held-out one nor an earlier training one;
2. the vocabularies are counted from the training split (each example as often as an epoch trains on it),
   most frequent first, ties by code point, rare characters (``data.min_char_count``) left to ``<unk>``;
3. each split is written as flat arrays of the final ids, block by block, with ``valid.tsv`` / ``test.tsv`` (and
   per source, for a mix) beside them; ``train.tsv`` too on request (``export_train``).

Memory holds a few numbers per example (its key, split, length, source: about 20 bytes) and one unit's tokens at
a time, so a 100M-hanzi corpus merges in a few hundred MB.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pinyin_hanzi.data.examples import SPLITS
from pinyin_hanzi.data.store import SplitWriter, id_dtype
from pinyin_hanzi.data.vocab import SPECIALS, UNK_ID, Vocab

TRAIN, VALID, TEST = range(3)


@dataclass
class UnitSpan:
    """Where one unit's examples and tokens lie in its part."""

    part: int
    first_example: int
    examples: int
    first_token: int


class Merged:
    """The examples of one or more parts (``Part.open`` manifests) in corpus order, with which of them are kept.

    ``spans``: the units in order; per example, in that order: ``keys``, ``splits``, ``lengths``, ``copies``,
    ``hanzi``, ``sources``, and after :meth:`drop_duplicates` ``keep`` and ``duplicate``."""

    def __init__(self, parts: list[dict]):
        self.parts = parts
        order = sorted(((document, chunk, index, first, n, first_token)
                        for index, part in enumerate(parts)
                        for document, chunk, first, n, first_token in part["units"]))
        self.spans = [UnitSpan(index, first, n, first_token) for _, _, index, first, n, first_token in order]
        for name in ("keys", "splits", "lengths", "copies", "hanzi", "sources"):
            setattr(self, name, self._gathered(name))
        self.keep = np.zeros(len(self.keys), bool)
        self.duplicate = np.zeros(len(self.keys), bool)

    def _gathered(self, name: str) -> np.ndarray:
        """One example array of every part, in corpus order: each part's file read once (whole: a few bytes an
        example), its units' pieces put in their places."""
        if len(self.parts) == 1:
            return self.parts[0]["arrays"][name][:]
        gathered = np.empty(sum(span.examples for span in self.spans), self.parts[0]["arrays"][name].dtype)
        placed: list[list[tuple[UnitSpan, int]]] = [[] for _ in self.parts]  # per part: (span, where it goes)
        start = 0
        for span in self.spans:
            placed[span.part].append((span, start))
            start += span.examples
        for part, spans in zip(self.parts, placed):
            values = part["arrays"][name][:]
            for span, start in spans:
                first = span.first_example
                gathered[start : start + span.examples] = values[first : first + span.examples]
        return gathered

    def drop_duplicates(self) -> None:
        """Mark the examples to keep (see the module docstring, 1.); training examples that an epoch would
        train on no time (a weight below 1) are not kept either."""
        held = np.flatnonzero(self.splits != TRAIN)
        _, first = np.unique(self.keys[held], return_index=True)  # first occurrences, in corpus order
        self.keep[held[first]] = True
        train = np.flatnonzero(self.splits == TRAIN)
        fresh = train[~np.isin(self.keys[train], self.keys[held])]
        _, first = np.unique(self.keys[fresh], return_index=True)
        self.keep[fresh[first]] = True
        self.duplicate = ~self.keep
        self.keep &= (self.splits != TRAIN) | (self.copies > 0)

    def unit_blocks(self) -> Iterator[tuple[dict, UnitSpan, slice]]:
        """(part, span, the span's examples as a slice of the merged arrays) of every unit, in order."""
        start = 0
        for span in self.spans:
            yield self.parts[span.part], span, slice(start, start + span.examples)
            start += span.examples

    def token_counts(self, progress: Callable[[int], None]) -> tuple[Counter, Counter]:
        """(pinyin token counts, hanzi counts) over the kept training examples, each counted ``copies`` times."""
        per_part = [(np.zeros(len(p["tokens"])), np.zeros(len(p["chars"]))) for p in self.parts]
        for part, span, rows in self.unit_blocks():
            weights = np.where(self.keep[rows] & (self.splits[rows] == TRAIN), self.copies[rows], 0)
            if weights.any():
                tokens = slice(span.first_token, span.first_token + int(self.lengths[rows].sum(dtype=np.int64)))
                per_token = np.repeat(weights.astype(np.float64), self.lengths[rows])
                pinyin_counts, hanzi_counts = per_part[span.part]
                pinyin_counts += np.bincount(part["arrays"]["source"][tokens], per_token, len(pinyin_counts))
                hanzi_counts += np.bincount(part["arrays"]["target"][tokens], per_token, len(hanzi_counts))
            progress(span.examples)
        pinyin, hanzi = Counter(), Counter()
        for part, (pinyin_counts, hanzi_counts) in zip(self.parts, per_part):
            pinyin.update({t: int(c) for t, c in zip(part["tokens"], pinyin_counts) if c})
            hanzi.update({t: int(c) for t, c in zip(part["chars"], hanzi_counts) if c})
        return pinyin, hanzi


def vocab_from_counts(counts: Counter, min_count: int = 1, extra: tuple[str, ...] = ()) -> Vocab:
    """What :meth:`Vocab.build` makes of the same counts: tokens seen at least ``min_count`` times, most frequent
    first (ties by code point), then the ``extra`` tokens it lacks, in sorted order."""
    kept = sorted((t for t, c in counts.items() if c >= min_count and t not in SPECIALS), key=lambda t: (-counts[t], t))
    return Vocab(list(SPECIALS) + kept + sorted(set(extra) - set(kept) - set(SPECIALS)))


def _id_maps(parts: list[dict], pinyin_vocab: Vocab, hanzi_vocab: Vocab) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per part, (its pinyin ids -> final ids, its hanzi ids -> final ids); a token not in a vocabulary -> <unk>."""
    return [(np.array([pinyin_vocab.ids.get(t, UNK_ID) for t in p["tokens"]] or [0], np.uint32),
             np.array([hanzi_vocab.ids.get(c, UNK_ID) for c in p["chars"]] or [0], np.uint32)) for p in parts]


def write_splits(merged: Merged, folder: Path, pinyin_vocab: Vocab, hanzi_vocab: Vocab,
                 progress: Callable[[int], None]) -> dict[str, int]:
    """Write the kept examples of each split as the store's arrays (see :mod:`pinyin_hanzi.data.store`); the
    number of examples of each split."""
    maps = _id_maps(merged.parts, pinyin_vocab, hanzi_vocab)
    source_dtype, target_dtype = id_dtype(len(pinyin_vocab)), id_dtype(len(hanzi_vocab))
    writers = [SplitWriter(folder, split, source_dtype, target_dtype) for split in SPLITS]
    for part, span, rows in merged.unit_blocks():
        lengths = merged.lengths[rows]
        tokens = slice(span.first_token, span.first_token + int(lengths.sum(dtype=np.int64)))
        pinyin_ids, hanzi_ids = maps[span.part]
        for index, writer in enumerate(writers):
            chosen = merged.keep[rows] & (merged.splits[rows] == index)
            if chosen.any():
                mask = np.repeat(chosen, lengths)
                writer.append(pinyin_ids[part["arrays"]["source"][tokens][mask]],
                              hanzi_ids[part["arrays"]["target"][tokens][mask]], lengths[chosen],
                              merged.copies[rows][chosen] if index == TRAIN else None)
        progress(span.examples)
    return {split: writer.close() for split, writer in zip(SPLITS, writers)}


def tsv_lines(merged: Merged, split: int, *, source: int | None = None, with_copies: bool = False
              ) -> Iterator[str]:
    """``tokens<TAB>hanzi`` lines of the kept examples of ``split`` (of one source, if given), with the text
    as written (also characters too rare for the vocabulary); ``with_copies``: a training example as often as
    an epoch trains on it."""
    for part, span, rows in merged.unit_blocks():
        chosen = merged.keep[rows] & (merged.splits[rows] == split)
        if source is not None:
            chosen &= merged.sources[rows] == source
        if not chosen.any():
            continue
        lengths, tokens, chars = merged.lengths[rows], part["tokens"], part["chars"]
        starts = span.first_token + np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)])
        for row in np.flatnonzero(chosen):
            begin, end = int(starts[row]), int(starts[row] + lengths[row])
            line = (" ".join(tokens[i] for i in part["arrays"]["source"][begin:end]) + "\t"
                    + "".join(chars[i] for i in part["arrays"]["target"][begin:end]) + "\n")
            for _ in range(int(merged.copies[rows][row]) if with_copies else 1):
                yield line
