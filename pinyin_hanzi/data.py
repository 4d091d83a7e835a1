"""Examples as id tensors, and length-grouped batches with a token budget."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from pinyin_hanzi.corpus import Example
from pinyin_hanzi.vocab import PAD_ID, Vocab


@dataclass
class EncodedExample:
    source: list[int]  # pinyin token ids, one per target character
    target: list[int]  # hanzi ids


def encode_examples(examples: Sequence[Example], pinyin_vocab: Vocab, hanzi_vocab: Vocab) -> list[EncodedExample]:
    return [EncodedExample(pinyin_vocab.encode(e.tokens), hanzi_vocab.encode(e.hanzi)) for e in examples]


@dataclass
class Batch:
    source: torch.Tensor  # (b, s) pinyin ids, PAD_ID after the end
    target: torch.Tensor  # (b, t) hanzi ids, PAD_ID after the end; t == s (one character per token)

    @property
    def n_target_tokens(self) -> int:
        return int((self.target != PAD_ID).sum())

    def to(self, device: torch.device) -> "Batch":
        return Batch(self.source.to(device, non_blocking=True), self.target.to(device, non_blocking=True))


def pad(sequences: Sequence[Sequence[int]]) -> torch.Tensor:
    """(b, max length) long tensor, right-padded with PAD_ID."""
    out = torch.full((len(sequences), max(len(s) for s in sequences)), PAD_ID, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    return out


def collate(examples: Sequence[EncodedExample]) -> Batch:
    return Batch(pad([e.source for e in examples]), pad([e.target for e in examples]))


def token_budget_batches(lengths: Sequence[int], batch_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Index lists that group examples of similar length so that (rows x longest) <= batch_tokens.

    Examples are shuffled, sorted by length (so ties stay shuffled), cut into batches, and the batches
    shuffled: a different order every epoch, the same for the same (seed, epoch).
    """
    generator = random.Random(seed * 100_003 + epoch)
    order = list(range(len(lengths)))
    generator.shuffle(order)
    order.sort(key=lambda index: lengths[index])
    batches, current, longest = [], [], 0
    for index in order:
        longest_if_added = max(longest, lengths[index])
        if current and longest_if_added * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest_if_added = [], lengths[index]
        current.append(index)
        longest = longest_if_added
    if current:
        batches.append(current)
    generator.shuffle(batches)
    return batches


class BatchStream:
    """Endless batches over the training set, epoch after epoch; its position can be saved and restored
    (``state_dict``) so that a resumed run sees exactly the batches the uninterrupted run would have."""

    def __init__(self, examples: Sequence[EncodedExample], batch_tokens: int, seed: int):
        self.examples = examples
        self.lengths = [len(e.target) for e in examples]
        self.batch_tokens, self.seed = batch_tokens, seed
        self.epoch, self.position = 0, 0
        self._batches = token_budget_batches(self.lengths, batch_tokens, seed, self.epoch)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._batches = token_budget_batches(self.lengths, self.batch_tokens, self.seed, self.epoch)

    def next_indices(self) -> list[int]:
        """The example indices of the next batch (the position moves on)."""
        if self.position >= len(self._batches):
            self.epoch, self.position = self.epoch + 1, 0
            self._batches = token_budget_batches(self.lengths, self.batch_tokens, self.seed, self.epoch)
        indices = self._batches[self.position]
        self.position += 1
        return indices

    def n_target_tokens(self, indices: Sequence[int]) -> int:
        """Target tokens (padding excluded) of the batch of these examples, without building it."""
        return sum(self.lengths[index] for index in indices)

    def batch(self, indices: Sequence[int]) -> Batch:
        return collate([self.examples[index] for index in indices])

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.batch(self.next_indices())
