"""Vocabularies: token <-> id, with the special tokens at fixed ids, built from the training split only."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)  # fixed ids, the same in both vocabularies


class Vocab:
    """Token <-> id. The four special tokens always have ids 0-3."""

    def __init__(self, tokens: Sequence[str]):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}")
        self.tokens = list(tokens)
        self.ids = {token: index for index, token in enumerate(self.tokens)}
        if len(self.ids) != len(self.tokens):
            raise ValueError("a vocabulary must not repeat a token")

    @classmethod
    def build(cls, sequences: Iterable[Iterable[str]], min_count: int = 1) -> "Vocab":
        """Tokens seen at least ``min_count`` times, most frequent first (ties by code point)."""
        counts = Counter(token for sequence in sequences for token in sequence)
        kept = sorted((t for t, c in counts.items() if c >= min_count and t not in SPECIALS),
                      key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + kept)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.ids

    def encode(self, tokens: Iterable[str]) -> list[int]:
        return [self.ids.get(token, UNK_ID) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[index] for index in ids]


def build_vocabs(train: Sequence, min_char_count: int = 1, extra_pinyin: Iterable[str] = ()
                 ) -> tuple["Vocab", "Vocab"]:
    """(pinyin vocabulary, hanzi vocabulary), from the training split only. ``extra_pinyin`` (the prefix
    tokens, when training abbreviates) are added to the pinyin vocabulary after the tokens of the split, in
    sorted order, those it already holds once."""
    pinyin_vocab = Vocab.build(example.tokens for example in train)
    added = sorted(set(extra_pinyin) - set(pinyin_vocab.tokens))
    return (Vocab(pinyin_vocab.tokens + added) if added else pinyin_vocab,
            Vocab.build((example.hanzi for example in train), min_count=min_char_count))


def grown(vocab: Vocab, tokens: Iterable[str]) -> Vocab:
    """``vocab`` with the ``tokens`` it lacks appended in their order: the ids of its own tokens stay."""
    return Vocab(vocab.tokens + [token for token in dict.fromkeys(tokens) if token not in vocab])


def save_vocab(vocab: Vocab, path: str | Path) -> None:
    """One token per line, in id order (tokens never contain a newline)."""
    Path(path).write_text("".join(token + "\n" for token in vocab.tokens), encoding="utf-8")


def load_vocab(path: str | Path) -> Vocab:
    return Vocab(Path(path).read_text(encoding="utf-8").split("\n")[:-1])
