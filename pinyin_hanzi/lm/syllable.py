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

import numpy as np
import torch

from pinyin_hanzi.lm.stored import is_int, pack_integers, unpack_integers
from pinyin_hanzi.text.pinyin import syllables

START = "<s>"
MAX_COUNT = 2**53  # counts beyond this are no counts of text (and lose precision as floats)


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

    @classmethod
    def count_blocks(cls, blocks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], tokens: Sequence[str]
                     ) -> "SyllableBigrams":
        """:meth:`count` of token lists given a block at a time as ids into ``tokens`` ((ids, lengths, weights):
        the token lists one after another, their lengths, how often each counts), with array operations: the
        same counts, in memory that does not grow with the text."""
        names = list(tokens) + [START]
        start = len(tokens)
        is_syllable = np.array([token in syllables() for token in tokens] + [False])
        unigrams, bigrams = np.zeros(len(names), np.int64), Counter()
        for ids, lengths, weights in blocks:
            ids, lengths = np.asarray(ids, np.int64), np.asarray(lengths, np.int64)
            weight = np.repeat(np.asarray(weights, np.int64), lengths)
            first = np.zeros(len(ids), bool)
            first[np.cumsum(lengths) - lengths] = True  # each list's first token follows <s>
            previous = np.where(first, start, np.roll(ids, 1))
            previous = np.where(is_syllable[previous], previous, start)  # after a non-syllable: <s> again
            syllable = is_syllable[ids]
            unigrams += np.bincount(ids[syllable], weight[syllable], len(names)).astype(np.int64)
            unigrams[start] += int(np.asarray(weights, np.int64).sum()) + int(weight[~syllable].sum())
            pairs = previous[syllable] * len(names) + ids[syllable]
            keys, inverse = np.unique(pairs, return_inverse=True)
            for key, count in zip(keys.tolist(), np.bincount(inverse, weight[syllable]).tolist()):
                bigrams[f"{names[key // len(names)]} {names[key % len(names)]}"] += int(count)
        return cls({names[i]: int(c) for i, c in enumerate(unigrams.tolist()) if c},
                   {key: count for key, count in bigrams.items() if count})

    def state_dict(self) -> dict:
        """Compact form for the checkpoint: the counted syllables (``<s>`` among them) as a list; their counts;
        each bigram as the key ``index of previous * len(syllables) + index of next``, sorted and stored as
        differences, with its count; the integer columns packed by :func:`pinyin_hanzi.lm.stored.pack_integers`.
        As a dict of 100k strings the same counts cost torch.load's weights-only reader 0.4 s of every start
        and 2.3 MB of the file."""
        pairs = [key.split(" ") for key in self.bigrams]
        names = sorted(set(self.unigrams) | {name for pair in pairs for name in pair})
        index = {name: i for i, name in enumerate(names)}
        keys = torch.tensor([index[a] * len(names) + index[b] for a, b in pairs], dtype=torch.long)
        keys, order = keys.sort()
        counts = torch.tensor(list(self.bigrams.values()), dtype=torch.long)[order]
        unigram_counts = torch.tensor([self.unigrams.get(name, 0) for name in names], dtype=torch.long)
        return {"syllables": names, "unigram_counts": pack_integers(unigram_counts),
                "bigram_key_steps": pack_integers(torch.diff(keys, prepend=keys.new_zeros(1))),
                "bigram_counts": pack_integers(counts)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "SyllableBigrams":
        """The model of :meth:`state_dict`'s form, or of the two dicts ``{"unigrams", "bigrams"}`` (syllable or
        "previous syllable" -> count) that files written before it hold."""
        if "syllables" not in state:
            return cls(dict(state["unigrams"]), dict(state["bigrams"]))
        names, unigram_counts, keys, counts = packed_columns(state)
        n = len(names)
        unigrams = {name: count for name, count in zip(names, unigram_counts.tolist()) if count}
        bigrams = {f"{names[key // n]} {names[key % n]}": count for key, count in zip(keys.tolist(), counts.tolist())}
        return cls(unigrams, bigrams)

    @classmethod
    def state_problem(cls, state: dict, hanzi_vocab_size: int | None = None) -> str | None:
        """What is wrong with a stored state, in :meth:`state_dict`'s packed form or as the two dicts of
        counts that earlier files hold, as what follows "its syllable model" in a one-line error ("cannot be
        read (...)", "has no unigrams counts ..."), or None where :meth:`from_state_dict` may build from it.
        ``hanzi_vocab_size`` is not used (the model counts syllables): every stored model is asked alike."""
        if "syllables" in state:
            try:
                _, unigrams, _, counts = packed_columns(state)
            except ValueError as error:
                return f"cannot be read ({error})"
            if any(len(values) and (int(values.min()) < 0 or int(values.max()) > MAX_COUNT)
                   for values in (unigrams, counts)):
                return "has counts outside 0..2**53"
            return None
        for name in ("unigrams", "bigrams"):
            counts = state.get(name)
            if not (isinstance(counts, dict) and all(isinstance(key, str) and is_int(count) and 0 <= count <= MAX_COUNT
                                                     for key, count in counts.items())):
                return f"has no {name} counts (a dict of str -> int in 0..2**53)"
        return None

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


def packed_columns(state: dict) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(syllables, unigram counts, sorted bigram keys, bigram counts) of a packed state dict; ValueError
    (what is wrong) for one that :meth:`SyllableBigrams.state_dict` did not write."""
    names = state.get("syllables")
    if not (isinstance(names, list) and names and all(isinstance(name, str) and name and " " not in name
                                                      for name in names) and len(set(names)) == len(names)):
        raise ValueError("no list of distinct syllables")
    unigram_counts = unpack_integers(state.get("unigram_counts"), "unigram_counts")
    keys = unpack_integers(state.get("bigram_key_steps"), "bigram_key_steps").cumsum(0)
    counts = unpack_integers(state.get("bigram_counts"), "bigram_counts")
    if len(unigram_counts) != len(names) or len(keys) != len(counts):
        raise ValueError("counts that do not pair up with its syllables and bigrams")
    if len(keys) and (int(keys[0]) < 0 or bool((keys[1:] <= keys[:-1]).any()) or int(keys[-1]) >= len(names) ** 2):
        raise ValueError("bigram keys that are not sorted pairs of its syllables")
    return names, unigram_counts, keys, counts
