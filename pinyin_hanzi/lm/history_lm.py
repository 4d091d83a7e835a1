"""What the search learns from a user's history: a cache model of the committed text, fused into the search.

A user who typed 核武器 once types it again, ten clauses later. The static models have seen too little of
such words and convert them wrong again (和武器). A cache model, counted from the committed clauses alone
(lm/history.py), knows better. Two terms, both 0 for text the user never committed:

- In context: P_cache(c | h) is the interpolated (Witten-Bell) probability of character c after the
  characters h before it over the history's n-grams of orders 2..``order`` (0 where c never followed h's
  last character), fused as the change it makes to a static model of the text:

      log((1 - λ) P_ref(c | h) + λ P_cache(c | h)) - log P_ref(c | h)  (+ log(1 - λ), the same for every c)
        = log(1 + κ P_cache(c | h) / P_ref(c | h)),   κ = λ / (1 - λ)

  where P_ref is the checkpoint's character n-gram model (lm/char_ngram.py; 1/V without one): a character
  gains as much as the user's text makes it likelier than everyday text does there, so a rare term (武器
  after 核) gains much and a pair that is common anyway (我们) almost nothing.
- Provisional, for a word's first character, which has no committed context yet: the same ratio over
  unigrams, log(1 + κ P_cache(c) / P_ref(c)), taken back at the next character unless the two followed each
  other in the history (as a user dictionary credits a word's beginning: lm/user_words.py). Without it a
  beam search drops the word's first character before the word can be finished; kept, it turned 吗 into 妈
  after 妈妈 had been committed (at full weight learning cost 0.56 point of CER on held-out People's Daily
  1998 typed in order).

The sum is weighted by decode.history_weight. Its form, λ, the order and the weight were chosen on documents
the evaluation never types: docs/benchmarks.md, "Learning from the user".

Counts change as the history does (``added``, ``removed``: the history's listener calls), in time linear in
the clauses' length; lookups read Python dicts (the contexts a search step asks for, a handful of rows) and
the candidates that follow them.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np
import torch

from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.text.pinyin import is_hanzi

ORDER = 3  # n-grams of up to this many characters: contexts of up to ORDER - 1
INTERPOLATION = 0.1  # λ, the cache model's share of the mixture


class HistoryLM:
    """The cache model of a user's committed clauses over a hanzi vocabulary, with ``reference`` (a model of
    the next character with ``log_prob``, or None for 1/V) as P_ref. Listens to a
    :class:`~pinyin_hanzi.lm.history.History` (``history.listen(model)``)."""

    def __init__(self, hanzi_vocab: Vocab, reference=None, *, order: int = ORDER,
                 interpolation: float = INTERPOLATION):
        self.order, self.reference = order, reference
        self._credit: np.ndarray | None = None  # (V,) each character's provisional credit, while counts stay
        self.kappa = interpolation / (1 - interpolation)
        self.vocab_size = len(hanzi_vocab)
        self.ids = {token: index for token, index in hanzi_vocab.ids.items() if len(token) == 1 and is_hanzi(token)}
        self.uniform = 1 / max(len(self.ids), 1)
        self.unigrams = np.zeros(self.vocab_size, dtype=np.float64)  # counts
        # context length k (1..order-1) -> context key (ids in base V, oldest first) -> next id -> count
        self.followers: list[dict[int, dict[int, int]]] = [defaultdict(dict) for _ in range(order)]
        self.totals: list[dict[int, int]] = [defaultdict(int) for _ in range(order)]  # the same contexts' counts
        self.characters = 0
        self._lock = threading.Lock()  # counts change (learning) while searches on other threads read them

    def __len__(self) -> int:
        """Characters counted: 0 for an empty history, which the search then leaves out."""
        return self.characters

    # -------------------------------------------------------------------------------------------- counts

    def added(self, clauses: list[str]) -> None:
        self._count(clauses, 1)

    def removed(self, clauses: list[str]) -> None:
        self._count(clauses, -1)

    def _runs(self, clause: str) -> list[list[int]]:
        """The clause's runs of characters in the vocabulary, as ids (anything else ends a run)."""
        runs, run = [], []
        for char in clause:
            index = self.ids.get(char)
            if index is None:
                if len(run) > 0:
                    runs.append(run)
                run = []
            else:
                run.append(index)
        return runs + [run] if run else runs

    def _count(self, clauses: list[str], sign: int) -> None:
        size = self.vocab_size
        with self._lock:
            self._credit = None
            for clause in clauses:
                for run in self._runs(clause):
                    self.characters += sign * len(run)
                    np.add.at(self.unigrams, run, sign)
                    for k in range(1, self.order):
                        followers, totals = self.followers[k], self.totals[k]
                        for end in range(k, len(run)):
                            key = 0
                            for index in run[end - k : end]:
                                key = key * size + index
                            following = followers[key]
                            count = following.get(run[end], 0) + sign
                            if count > 0:
                                following[run[end]] = count
                            else:
                                following.pop(run[end], None)
                                if not following:
                                    del followers[key]
                            totals[key] += sign
                            if totals[key] <= 0:
                                del totals[key]

    # ------------------------------------------------------------------------------------------- lookups

    def cache_probs(self, context: torch.Tensor, candidates: torch.Tensor) -> np.ndarray:
        """P_cache(candidate | context) over the orders 2..order: context (n, m) hanzi ids, oldest first (<s>
        and other specials before a clause's start end the context); candidates (n, c) -> (n, c) float64."""
        candidates = candidates.numpy()
        with self._lock:
            probs = np.zeros(candidates.shape)  # (n, c): the orders above the unigrams (see _credit)
            rows = context[:, -(self.order - 1):].tolist() if self.order > 1 else [[]] * len(candidates)
            columns, columns_of = None, None
            for r, row in enumerate(rows):
                key = 0
                for k in range(1, len(row) + 1):
                    index = row[-k]
                    if index < 4 or index >= self.vocab_size:  # <pad> <s> </s> <unk>: the clause starts here
                        break
                    key = key + index * self.vocab_size ** (k - 1)  # the last k ids in base V, oldest first
                    following = self.followers[k].get(key)
                    if not following:
                        break  # a longer context holds this one: not seen either
                    count, distinct = self.totals[k][key], len(following)
                    probs[r] *= distinct / (count + distinct)
                    if columns is None or not np.array_equal(candidates[r], columns):
                        columns = candidates[r]
                        columns_of = {index: j for j, index in enumerate(columns.tolist())}
                    share = 1 / (count + distinct)
                    if len(following) <= len(columns_of):
                        for index, times in following.items():
                            if (j := columns_of.get(index)) is not None:
                                probs[r, j] += times * share
                    else:
                        for index, j in columns_of.items():
                            if times := following.get(index):
                                probs[r, j] += times * share
        return probs

    def log_prob(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """The fused terms of the module's docstring for candidates (n, c) after context (n, m) -> (n, c)
        float32: 0 for a character the history never holds."""
        probs = self.cache_probs(context, candidates)
        if self.reference is not None:
            probs /= np.exp(self.reference.log_prob(context, candidates).numpy().astype(np.float64))
        else:
            probs /= self.uniform
        scores = np.log1p(self.kappa * probs) + self._provisional(context, candidates.numpy())
        return torch.from_numpy(scores.astype(np.float32))

    def _provisional(self, context: torch.Tensor, candidates: np.ndarray) -> np.ndarray:
        """Each candidate's credit for being a character the user committed, log(1 + κ P_cache(c) / P_ref(c))
        over the unigrams alone, less the credit its predecessor got where the two never followed each other
        in the history: a committed word's first character is kept in the beam while its word may still
        come, and a character alone out of its word's context ends up with nothing."""
        with self._lock:
            if self._credit is None:
                reference = (np.exp(self.reference.unigram_log_probs.numpy().astype(np.float64))
                             if self.reference is not None else np.full(self.vocab_size, self.uniform))
                cache = self.unigrams / max(self.unigrams.sum(), 1.0)
                self._credit = np.log1p(self.kappa * cache / reference[: self.vocab_size])
            credit = self._credit
            last = context[:, -1].numpy().clip(0, self.vocab_size - 1)
            owed = np.where(last >= 4, credit.take(last), 0.0)  # (n,)
            result = credit.take(candidates) - owed[:, None]
            for r in np.flatnonzero(owed):
                following = self.followers[1].get(int(last[r]))
                if following:
                    continued = np.fromiter((index in following for index in candidates[r].tolist()), bool,
                                            len(candidates[r]))
                    result[r, continued] += owed[r]
        return result
