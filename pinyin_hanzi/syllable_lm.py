"""A syllable bigram model: the prior that ranks readings of run-together pinyin.

The Transformer gives log P(hanzi | syllables). Two readings of the same letters (``xian`` as xian or
xi'an) condition on different syllables, so those numbers are not comparable by themselves; the joint
log P(hanzi, syllables) = log P(hanzi | syllables) + log P(syllables) is. P(syllables) comes from syllable
bigram counts of the training split (interpolated with unigrams, add-one), kept in the checkpoint.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

from pinyin_hanzi.pinyin import syllables

START = "<s>"


class SyllableBigrams:
    def __init__(self, unigrams: dict[str, int], bigrams: dict[str, int], smoothing: float = 2.0):
        self.unigrams, self.bigrams, self.smoothing = unigrams, bigrams, smoothing
        self.total = sum(count for syllable, count in unigrams.items() if syllable != START)
        self.vocabulary = len(syllables())

    @classmethod
    def count(cls, token_lists: Iterable[Sequence[str]]) -> "SyllableBigrams":
        """Counts over the syllables of each token list; anything that is not a syllable (punctuation,
        digits) breaks the chain like a sentence start."""
        unigrams, bigrams = Counter(), Counter()
        for tokens in token_lists:
            previous = START
            unigrams[START] += 1
            for token in tokens:
                if token not in syllables():
                    previous = START
                    unigrams[START] += 1
                    continue
                unigrams[token] += 1
                bigrams[f"{previous} {token}"] += 1
                previous = token
        return cls(dict(unigrams), dict(bigrams))

    def state_dict(self) -> dict:
        return {"unigrams": self.unigrams, "bigrams": self.bigrams}

    @classmethod
    def from_state_dict(cls, state: dict) -> "SyllableBigrams":
        return cls(dict(state["unigrams"]), dict(state["bigrams"]))

    def bigram_log_prob(self, previous: str, syllable: str) -> float:
        """log P(syllable | previous syllable or "<s>"), natural log."""
        unigram = (self.unigrams.get(syllable, 0) + 1) / (self.total + self.vocabulary)
        count = self.bigrams.get(f"{previous} {syllable}", 0)
        return math.log((count + self.smoothing * unigram) / (self.unigrams.get(previous, 0) + self.smoothing))

    def log_prob(self, tokens: Sequence[str]) -> float:
        """log P(syllables of ``tokens``), natural log; non-syllables restart the chain and cost nothing."""
        total, previous = 0.0, START
        for token in tokens:
            if token not in syllables():
                previous = START
                continue
            total += self.bigram_log_prob(previous, token)
            previous = token
        return total
