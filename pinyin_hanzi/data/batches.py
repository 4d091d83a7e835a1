"""Examples as id tensors, and length-grouped batches with a token budget; training batches may type a share
of their examples abbreviated (data.abbreviate).

Abbreviation: an example chosen (with probability ``abbreviate``) has each syllable replaced by its prefix
token (``zhong`` -> ``zh*``) with a rate drawn for that example uniformly from (0, 1]. Full-pinyin examples
stay the majority at any share below one half, so full-pinyin accuracy keeps most of its training signal;
the spread of rates covers a syllable or two abbreviated in context (``wo xiang q b j``) up to everything
typed as initials (``bj``, ``wxqbj``). The choice is drawn from (seed, epoch, example index) alone, so a
resumed run abbreviates exactly as the uninterrupted one did, and an example is abbreviated differently in
every epoch. Only syllables are replaced: punctuation, digits and Latin letters stay, also a letter whose
token is a syllable too (the ``o`` and ``n`` of ``Python``), which its target character tells apart.

Length buckets (train.length_bucket N > 0), for a compiled training step: instead of one length a batch, each
example's length is rounded up to a multiple of N and a batch holds examples of one such bucket, padded to
its length, in budget // length rows; a bucket's last batch is filled up with examples from its start. Every
batch of a bucket then has one shape, so torch.compile meets a few shapes in a run, not one per length.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from pinyin_hanzi.data.examples import Example
from pinyin_hanzi.data.store import StoredSplit
from pinyin_hanzi.data.vocab import PAD_ID, SPECIALS, UNK_ID, Vocab
from pinyin_hanzi.text.pinyin import is_hanzi, syllables
from pinyin_hanzi.text.typed_input import PREFIX_TOKENS, prefix_token


def encode_split(examples: Iterable[Example], pinyin_vocab: Vocab, hanzi_vocab: Vocab) -> StoredSplit:
    """Examples encoded into a split held in memory: flat int32 arrays of pinyin ids (one per target
    character) and hanzi ids with their offsets, as the token store lays a split out on disk. Eight bytes a
    token, not a Python object per example: the validation split of a 100M-hanzi corpus is 90,000 of them."""
    sources, targets, offsets = array("i"), array("i"), array("q", [0])
    for example in examples:
        sources.extend(pinyin_vocab.encode(example.tokens))
        targets.extend(hanzi_vocab.encode(example.hanzi))
        offsets.append(len(targets))
    return StoredSplit(np.array(sources, np.int32), np.array(targets, np.int32), np.array(offsets, np.int64))


@dataclass
class Batch:
    source: torch.Tensor  # (b, s) pinyin ids, PAD_ID after the end
    target: torch.Tensor  # (b, t) hanzi ids, PAD_ID after the end; t == s (one character per token)

    @property
    def n_target_tokens(self) -> int:
        return int((self.target != PAD_ID).sum())

    def to(self, device: torch.device) -> "Batch":
        return Batch(self.source.to(device, non_blocking=True), self.target.to(device, non_blocking=True))


def pad(sequences: Sequence[Sequence[int]], width: int = 0) -> torch.Tensor:
    """(b, max(width, max length)) long tensor, right-padded with PAD_ID; the sequences are lists or arrays of
    ids."""
    lengths = [len(sequence) for sequence in sequences]
    if min(lengths) == max(lengths) >= max(width, 1):  # a training batch of one length: no padding to place
        return torch.from_numpy(np.stack(sequences).astype(np.int64, copy=False))
    out = np.full((len(sequences), max(width, *lengths)), PAD_ID, dtype=np.int64)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = sequence
    return torch.from_numpy(out)


def split_batch(split: StoredSplit, indices: Iterable[int], width: int = 0) -> Batch:
    """The examples ``indices`` of a split (stored or :func:`encode_split`), padded into one batch (to at least
    ``width`` tokens)."""
    pairs = split.examples(int(index) for index in indices)
    return Batch(pad([source for source, _ in pairs], width), pad([target for _, target in pairs], width))


def bucketed(lengths: np.ndarray, bucket: int) -> np.ndarray:
    """Each length rounded up to a multiple of ``bucket`` (0: the lengths themselves)."""
    if bucket <= 0:
        return lengths
    return -(-np.asarray(lengths, dtype=np.int64) // bucket) * bucket


def bucket_count(max_len: int, bucket: int) -> int:
    """How many length buckets of ``bucket`` examples of up to ``max_len`` tokens fall into (0: no buckets)."""
    return int(bucketed(max_len, bucket)) // bucket if bucket > 0 else 0


def token_budget_batches(lengths: np.ndarray, copies: np.ndarray | None, batch_tokens: int, seed: int, epoch: int,
                         bucket: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One epoch's batches of examples of similar length, each (rows x longest) <= batch_tokens:
    ``(positions, bounds)``, batch j being ``positions[bounds[j, 0] : bounds[j, 1]]``.

    ``lengths`` (examples,) are the examples' lengths and ``copies`` (examples,) how often the epoch trains on
    each (None: once); a position p stands for one of those times, counted over the examples in order
    (:meth:`BatchStream.example_of`). The examples of each length are shuffled and cut into batches of as
    many rows as fit, and the batches shuffled: a different order every epoch, the same for the same
    (seed, epoch). With ``bucket`` > 0 the examples are grouped by :func:`bucketed` length instead, and each
    group's last batch is filled up to the same rows with positions from the group's start. Memory: four bytes
    per position (and, while one length's positions are drawn, eight per example of that length), so that an
    epoch over a corpus of any size fits."""
    generator = np.random.default_rng([seed, epoch])
    ends = copy_ends(copies) if copies is not None else None
    epoch_positions = len(lengths) if ends is None else int(ends[-1]) if len(ends) else 0
    dtype = np.int32 if epoch_positions < 2**31 else np.int64
    pieces, bounds, total = [], [], 0
    grouped = bucketed(lengths, bucket)
    for length in np.unique(grouped):
        examples = np.flatnonzero(grouped == length)
        if ends is not None:  # each time an example is trained on is a position of its own
            times = copies[examples].astype(np.int64)
            starts = np.repeat(ends[examples] - times, times)
            within = np.arange(len(starts)) - np.repeat(np.cumsum(times) - times, times)
            examples = starts + within
        positions = examples.astype(dtype)
        generator.shuffle(positions)  # in place: the order generator.permutation(examples) gives, without a copy
        rows = max(1, batch_tokens // max(int(length), 1))
        if bucket > 0 and len(positions) % rows:  # one shape a bucket: its last batch filled up from its start
            positions = np.resize(positions, -(-len(positions) // rows) * rows)
        starts = np.arange(0, len(positions), rows)
        bounds.append(np.stack([starts, np.minimum(starts + rows, len(positions))], axis=1) + total)
        pieces.append(positions)
        total += len(positions)
    if not pieces:
        return np.zeros(0, np.int32), np.zeros((0, 2), np.int64)
    bounds = np.concatenate(bounds)
    return np.concatenate(pieces), bounds[generator.permutation(len(bounds))]


def copy_ends(copies: np.ndarray) -> np.ndarray:
    """(examples,) cumulative copies: the position after each example's last time in an epoch, in int32 where the
    epoch's positions fit (four bytes an example, not eight)."""
    total = int(copies.sum(dtype=np.int64))
    return np.cumsum(copies, dtype=np.int32 if total < 2**31 else np.int64)


def prefix_ids(pinyin_vocab: Vocab) -> torch.Tensor:
    """(pinyin vocab,) long: the id of each syllable's prefix token (``zhong`` -> id of ``zh*``), and every
    other id (specials, punctuation, digits, letters, prefix tokens) itself. ValueError if the vocabulary
    lacks the prefix tokens (it has them when prepared with data.abbreviate > 0)."""
    missing = sorted(PREFIX_TOKENS - set(pinyin_vocab.tokens))
    if missing:
        raise ValueError(f"the pinyin vocabulary has no prefix tokens ({', '.join(missing[:3])}, ...)")
    mapping = torch.arange(len(pinyin_vocab))
    for index, token in enumerate(pinyin_vocab.tokens):
        if token in syllables():
            mapping[index] = pinyin_vocab.ids[prefix_token(token)]
    return mapping


def hanzi_ids(hanzi_vocab: Vocab) -> torch.Tensor:
    """(hanzi vocab,) bool: True at hanzi and at <unk> (a character too rare for the vocabulary, read as a
    syllable), False at the other specials and at what passes through (letters, digits, punctuation)."""
    return torch.tensor([is_hanzi(token) if index >= len(SPECIALS) else index == UNK_ID
                         for index, token in enumerate(hanzi_vocab.tokens)])


def training_abbreviations(length: int, abbreviate: float, seed: int, epoch: int, index: int) -> list[int]:
    """The positions of example ``index`` (of ``length`` tokens) typed abbreviated in ``epoch``: none unless
    the example is chosen (probability ``abbreviate``), then each with a rate drawn from (0, 1]. Depends on
    (seed, epoch, index) only, so a resumed run abbreviates as the uninterrupted one; new in every epoch, so
    the network sees each example typed several ways. (Test input is abbreviated by the text alone, the same
    for every engine: :func:`pinyin_hanzi.evaluation.metrics.abbreviated_positions`.) One row of
    :func:`abbreviated`."""
    typed = abbreviated(np.array([length]), length, abbreviate, seed, epoch, np.array([index]))
    return np.flatnonzero(typed[0]).tolist()


def abbreviated(lengths: np.ndarray, width: int, abbreviate: float, seed: int, epoch: int,
                indices: np.ndarray) -> np.ndarray:
    """(rows, width) bool, True at the positions of each example ``indices[row]`` (of ``lengths[row]`` tokens)
    typed abbreviated in ``epoch``, as :func:`training_abbreviations` says, for a whole batch at once: every draw
    is a hash of (seed, epoch, index, position), so no generator is seeded per example (which cost a training
    batch of 65,536 tokens 70 ms of the reader's time) and a draw never depends on the batch it is in."""
    indices = np.asarray(indices, np.uint64)
    chosen = _uniform(seed, epoch, indices, -1) < abbreviate
    rate = 1.0 - _uniform(seed, epoch, indices, -2)  # (0, 1]
    columns = np.arange(width)
    draws = _uniform(seed, epoch, indices[:, None], columns[None, :])
    return chosen[:, None] & (draws < rate[:, None]) & (columns[None, :] < np.asarray(lengths)[:, None])


def _uniform(seed: int, epoch: int, index: np.ndarray, slot) -> np.ndarray:
    """A uniform draw in [0, 1) for each (seed, epoch, index, slot): splitmix64's finaliser over the four mixed
    into one 64-bit key (a counter-based generator, vectorised over ``index`` and ``slot``)."""
    with np.errstate(over="ignore"):
        key = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(epoch) * np.uint64(0xBF58476D1CE4E5B9)
               + index * np.uint64(0x94D049BB133111EB) + (np.asarray(slot) + 3).astype(np.uint64)
               * np.uint64(0xD6E8FEB86659FD93))
        key = (key ^ (key >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        key = (key ^ (key >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        key = key ^ (key >> np.uint64(31))
    return (key >> np.uint64(11)).astype(np.float64) * 2.0**-53


class BatchStream:
    """Endless batches over a training split (a :class:`pinyin_hanzi.data.store.StoredSplit`, memory-mapped),
    epoch after epoch; its position can be saved and restored (``state_dict``) so that a resumed run sees
    exactly the batches the uninterrupted run would have. Each epoch trains on every example as often as
    ``split.copies`` says (the sources' weights).

    With ``abbreviate`` > 0, ``prefix_of`` (:func:`prefix_ids` of the pinyin vocabulary) and ``hanzi_target``
    (:func:`hanzi_ids` of the hanzi vocabulary), that share of the examples of each batch is typed
    abbreviated (see the module docstring and :func:`training_abbreviations`). ``bucket`` > 0: batches of
    length buckets (the module docstring), each padded to its bucket's length."""

    def __init__(self, split, batch_tokens: int, seed: int, *, abbreviate: float = 0.0,
                 prefix_of: torch.Tensor | None = None, hanzi_target: torch.Tensor | None = None, bucket: int = 0):
        if abbreviate > 0 and (prefix_of is None or hanzi_target is None):
            raise ValueError("abbreviating needs prefix_of and hanzi_target (prefix_ids, hanzi_ids)")
        self.split = split
        self.lengths = split.lengths  # uint8 for examples up to 255 tokens: one byte an example
        self.copies = split.read_copies()
        # position -> example: the example whose times trained on end after it
        self._ends = None if self.copies is None else copy_ends(self.copies)
        self.batch_tokens, self.seed, self.bucket = batch_tokens, seed, bucket
        self.abbreviate, self.prefix_of, self.hanzi_target = abbreviate, prefix_of, hanzi_target
        self.epoch, self.position = 0, 0
        self._epoch_batches()

    def _epoch_batches(self) -> None:
        self._positions, self._bounds = token_budget_batches(self.lengths, self.copies, self.batch_tokens, self.seed,
                                                             self.epoch, self.bucket)

    def mean_length(self) -> float:
        """Mean tokens per trained example (each as often as its copies say)."""
        weights = None if self.copies is None else self.copies.astype(np.float64)
        return float(np.average(self.lengths, weights=weights)) if self.lengths.size and (
            weights is None or weights.sum() > 0) else 0.0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._epoch_batches()

    def next_indices(self) -> tuple[int, np.ndarray]:
        """(epoch, positions) of the next batch (the stream moves on); see :meth:`example_of`."""
        if self.position >= len(self._bounds):
            self.epoch, self.position = self.epoch + 1, 0
            self._epoch_batches()
        start, end = self._bounds[self.position]
        self.position += 1
        return self.epoch, self._positions[start:end]

    def example_of(self, positions) -> np.ndarray:
        """The example each position stands for (positions count every time an example is trained on)."""
        positions = np.asarray(positions)
        return positions if self._ends is None else np.searchsorted(self._ends, positions, side="right")

    def n_target_tokens(self, positions) -> int:
        """Target tokens (padding excluded) of the batch of these positions, without building it."""
        return int(self.lengths[self.example_of(positions)].sum(dtype=np.int64))

    def batch(self, epoch: int, positions) -> Batch:
        """The batch of these positions as drawn in ``epoch`` (which decides their abbreviations)."""
        examples = self.example_of(positions)
        width = int(bucketed(self.lengths[examples].max(initial=0), self.bucket))
        batch = split_batch(self.split, examples, width)
        if self.abbreviate <= 0:
            return batch
        typed = torch.from_numpy(abbreviated(self.lengths[examples], batch.source.shape[1], self.abbreviate,
                                             self.seed, epoch, positions))
        typed &= self.hanzi_target[batch.target]  # a Latin o or n stays itself (its target is no hanzi)
        batch.source = torch.where(typed, self.prefix_of[batch.source], batch.source)
        return batch

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.batch(*self.next_indices())
