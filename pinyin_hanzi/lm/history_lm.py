"""What the search learns from a user's history: a cache model of the committed text, fused into the search.

A user who typed 核武器 once types it again, ten clauses later. The static models have seen too little of
such words and convert them wrong again (和武器). A cache model, counted from the committed clauses alone
(lm/history.py), knows better. Three terms, all nothing for text the user never committed:

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
- Read ahead, for a word's first character too: the typed syllables are known before the search starts, so
  the history's pairs and triples whose characters fit the lists of positions i, i+1 (, i+2) say which
  character the user wrote at i when they typed these syllables (匹 before 诺曹 for ``pi nuo cao``, 她 before
  说 for ``ta shuo``). Their share among the list's characters, P_span(c), is mixed into the network's own
  distribution over the list, (1 - μ) P_net(c) + μ P_span(c), with μ = N / (N + SPAN_PRIOR) for the N
  matching n-grams: one pair seen once moves little, a word committed again and again decides. Unlike the
  provisional credit it is never taken back: it is about the syllables, which do not change.

The first two are summed and weighted by decode.history_weight; the third is a mixture the search makes
(decoding/search.py, ReadAhead). Their forms, λ, the order, the weight and SPAN_PRIOR were chosen on documents
the evaluation never types: docs/benchmarks.md, "Learning from the user".

Counts change as the history does (``added``, ``removed``: the history's listener calls), in time linear in
the clauses' length (a file loaded at start: all at once, with numpy). They are kept in Python dicts keyed by
n-grams' ids as digits in base V, which a step looks up for its few rows' contexts and candidates.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from pinyin_hanzi.data.vocab import UNK_ID, Vocab
from pinyin_hanzi.text.pinyin import is_hanzi

ORDER = 3  # n-grams of up to this many characters: contexts of up to ORDER - 1
INTERPOLATION = 0.1  # λ, the cache model's share of the mixture
SPAN_PRIOR = 8.0  # the network's weight, in matching n-grams, against the history's read-ahead share
BULK_CHARACTERS = 4096  # clauses added at once with more characters than this are counted with numpy


class HistoryLM:
    """The cache model of a user's committed clauses over a hanzi vocabulary, with ``reference`` (a model of
    the next character with ``log_prob``, or None for 1/V) as P_ref. Listens to a
    :class:`~pinyin_hanzi.lm.history.History` (``history.listen(model)``)."""

    def __init__(self, hanzi_vocab: Vocab, reference=None, *, order: int = ORDER,
                 interpolation: float = INTERPOLATION):
        self.order, self.reference = order, reference
        self.kappa = interpolation / (1 - interpolation)
        self.vocab_size = len(hanzi_vocab)
        self.ids = {token: index for token, index in hanzi_vocab.ids.items() if len(token) == 1 and is_hanzi(token)}
        self.uniform = 1 / max(len(self.ids), 1)
        self.unigrams = np.zeros(self.vocab_size, dtype=np.float64)  # counts
        # per context length k (1..order-1; [0] unused): n-gram (k ids and the next, in base V, oldest first) ->
        # count; context -> its count (N) and the number of distinct characters seen after it (T)
        self.grams: list[dict[int, int]] = [{} for _ in range(order)]
        self.totals: list[dict[int, int]] = [{} for _ in range(order)]
        self.distinct: list[dict[int, int]] = [{} for _ in range(order)]
        self.characters = 0
        self._credit: np.ndarray | None = None  # (V,) each character's provisional credit, while counts stay
        self._followers: dict[int, dict[int, int]] | None = None  # pairs by first id (built when first read)
        self._lock = threading.Lock()  # counts change (learning) while searches on other threads read them

    def __len__(self) -> int:
        """Characters counted: 0 for an empty history, which the search then leaves out."""
        return self.characters

    # -------------------------------------------------------------------------------------------- counts

    def added(self, clauses: list[str]) -> None:
        if sum(map(len, clauses)) >= BULK_CHARACTERS:
            self._count_bulk(clauses)
        else:
            self._count(clauses, 1)

    def removed(self, clauses: list[str]) -> None:
        self._count(clauses, -1)

    def _runs(self, clause: str) -> list[list[int]]:
        """The clause's runs of characters in the vocabulary, as ids (anything else ends a run)."""
        runs, run = [], []
        for char in clause:
            index = self.ids.get(char)
            if index is None:
                if run:
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
                        for end in range(k, len(run)):
                            context = 0
                            for index in run[end - k : end]:
                                context = context * size + index
                            self._add(k, context, context * size + run[end], sign)

    def _add(self, k: int, context: int, gram: int, sign: int) -> None:
        grams, totals, distinct = self.grams[k], self.totals[k], self.distinct[k]
        count = grams.get(gram, 0) + sign
        if k == 1 and self._followers is not None:
            after = self._followers.setdefault(context, {})
            after[gram % self.vocab_size] = count
            if count <= 0:
                del after[gram % self.vocab_size]
                if not after:
                    del self._followers[context]
        if count > 0:
            grams[gram] = count
            if count == sign:  # a new one
                distinct[context] = distinct.get(context, 0) + 1
        else:
            del grams[gram]
            distinct[context] -= 1
        totals[context] = totals.get(context, 0) + sign
        if totals[context] <= 0:
            del totals[context], distinct[context]

    def _count_bulk(self, clauses: list[str]) -> None:
        """:meth:`added` for many clauses at once (a history file being loaded): the same counts, found with
        numpy (every n-gram of all the clauses at once) instead of a Python step per character."""
        size = self.vocab_size
        codes = np.frombuffer("\n".join(clauses).encode("utf-32-le"), dtype=np.uint32)  # "\n" ends every run
        distinct, inverse = np.unique(codes, return_inverse=True)
        ids = np.array([self.ids.get(chr(code), -1) for code in distinct.tolist()], dtype=np.int64)[inverse]
        valid = ids >= 0
        with self._lock:
            self._credit = self._followers = None
            self.characters += int(valid.sum())
            self.unigrams += np.bincount(ids[valid], minlength=size)
            context, whole = np.zeros(len(ids), dtype=np.int64), valid.copy()  # at i: the k ids before i
            for k in range(1, self.order):
                context[k:] = context[k:] + ids[: len(ids) - k].clip(0) * size ** (k - 1)  # k-th before: digit k - 1
                whole[k:] &= valid[: len(ids) - k]
                whole[:k] = False
                grams, counts = np.unique(context[whole] * size + ids[whole], return_counts=True)
                contexts = grams // size
                starts = np.flatnonzero(np.r_[True, contexts[1:] != contexts[:-1]]) if len(grams) else grams
                merged = [(self.grams[k], grams, counts),
                          (self.totals[k], contexts[starts], np.add.reduceat(counts, starts) if len(grams) else counts),
                          (self.distinct[k], contexts[starts], np.diff(np.r_[starts, len(grams)]))]
                for table, keys, values in merged:
                    if table:
                        for key, value in zip(keys.tolist(), values.tolist()):
                            table[key] = table.get(key, 0) + value
                    else:  # a file loaded into an empty history: in one call
                        table.update(zip(keys.tolist(), values.tolist()))

    # ------------------------------------------------------------------------------------------- lookups

    def _context_counts(self, context: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """P_cache(candidate | context) over the orders 2..order, (n, c) float64, and whether each candidate
        followed the context's last character in the history ((n, c) bool; None where no row's last character
        was committed)."""
        size, rows = self.vocab_size, len(candidates)
        probs, continued, committed = np.zeros(candidates.shape), None, None
        key, seen = np.zeros(rows, dtype=np.int64), np.ones(rows, dtype=bool)
        for k in range(1, self.order):
            index = context[:, -k]
            seen &= (index > UNK_ID) & (index < size)  # <pad> <s> </s> <unk> (ids up to UNK_ID): a clause's start
            key = key + index.clip(0, size - 1) * size ** (k - 1)  # the last k ids, oldest first
            totals = np.array([self.totals[k].get(x, 0) for x in key.tolist()], dtype=np.float64) * seen
            live = np.flatnonzero(totals)
            if not len(live):
                break  # a longer context holds a shorter one: none seen either
            distinct = np.array([self.distinct[k][x] for x in key[live].tolist()], dtype=np.float64)
            if committed is None:  # only a committed character can have followed anything: the rest count 0
                committed = self.unigrams.take(candidates.clip(0, size - 1)) > 0
            at, column = np.nonzero(committed[live])
            table, counts = self.grams[k], np.zeros((len(live), candidates.shape[1]))
            grams = (key[live][at] * size + candidates[live][at, column]).tolist()
            counts[at, column] = [table.get(gram, 0) for gram in grams]
            probs[live] = (probs[live] * distinct[:, None] + counts) / (totals[live] + distinct)[:, None]
            if k == 1:
                continued = np.zeros(candidates.shape, dtype=bool)
                continued[live] = counts > 0
        return probs, continued

    def cache_probs(self, context: torch.Tensor, candidates: torch.Tensor) -> np.ndarray:
        """P_cache(candidate | context) over the orders 2..order: context (n, m) hanzi ids, oldest first (<s>
        and other specials before a clause's start end the context); candidates (n, c) -> (n, c) float64."""
        with self._lock:
            return self._context_counts(context.numpy(), candidates.numpy())[0]

    def log_prob(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """The fused terms of the module's docstring for candidates (n, c) after context (n, m) -> (n, c)
        float32: 0 for a character the history never holds. P_ref is looked up only where P_cache is not 0,
        a few entries of a step (the reference's own lookups for all of them cost as much as its fusion)."""
        with self._lock:
            probs, continued = self._context_counts(context.numpy(), candidates.numpy())
            scores = self._provisional(context.numpy()[:, -1], candidates.numpy(), continued)
        rows, columns = probs.nonzero()
        if len(rows):
            found = probs[rows, columns]
            if self.reference is None:
                reference = self.uniform
            elif hasattr(self.reference, "log_prob_entries"):
                reference = np.exp(self.reference.log_prob_entries(context, torch.from_numpy(rows),
                                                                   candidates[rows, columns]).numpy().astype(np.float64))
            else:
                reference = np.exp(self.reference.log_prob(context, candidates).numpy().astype(np.float64))[rows, columns]
            scores[rows, columns] += np.log1p(self.kappa * found / reference)
        return torch.from_numpy(scores.astype(np.float32))

    def _provisional(self, last: np.ndarray, candidates: np.ndarray, continued: np.ndarray | None) -> np.ndarray:
        """Each candidate's credit for being a character the user committed, log(1 + κ P_cache(c) / P_ref(c))
        over the unigrams alone, less the credit of the character before it (``last``, (n,)) where the two
        never followed each other in the history (``continued`` False): a committed word's first character is
        kept in the beam while its word may still come, and a character alone out of its word's context ends up
        with nothing. Under the lock."""
        if self._credit is None:
            reference = (np.exp(self.reference.unigram_log_probs.numpy().astype(np.float64))
                         if self.reference is not None else np.full(self.vocab_size, self.uniform))
            cache = self.unigrams / max(self.unigrams.sum(), 1.0)
            self._credit = np.log1p(self.kappa * cache / reference[: self.vocab_size])
        last = last.clip(0, self.vocab_size - 1)
        owed = np.where(last > UNK_ID, self._credit.take(last), 0.0)  # (n,): nothing before a clause's start
        result = self._credit.take(candidates) - owed[:, None]
        if continued is not None:
            result += owed[:, None] * continued
        return result

    # ------------------------------------------------------------------------------------------ read-ahead

    def span_shares(self, ids: np.ndarray, real: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The read-ahead term of the module's docstring for a search's candidate lists ``ids`` (n, s, c) (``real``:
        where they are not padding): P_span (n, s, c) float64 and μ (n, s) float64 (0 where no n-gram of the
        history fits); None when nothing fits anywhere. Pairs count once and triples twice (a longer match is
        surer evidence)."""
        n, positions, _ = ids.shape
        shares, size = np.zeros(ids.shape), self.vocab_size
        with self._lock:
            if not self.characters or positions < 2:
                return None
            if self._followers is None:
                self._followers = {}
                for gram, count in self.grams[1].items():
                    first, second = divmod(gram, size)
                    self._followers.setdefault(first, {})[second] = count
            followers, triples = self._followers, self.grams[2] if self.order > 2 else {}
            committed = (self.unigrams.take(ids.clip(0, size - 1)) > 0) & real & (ids > UNK_ID)
            lists: dict[tuple[int, int], set[int]] = {}  # a position's committed characters: none other fits
            for b, i, j in zip(*np.nonzero(committed[:, :-1])):  # nothing to read ahead of the last position
                after = followers.get(int(ids[b, i, j]))
                if not after:
                    continue
                if (b, i + 1) not in lists:
                    lists[b, i + 1] = set(ids[b, i + 1][committed[b, i + 1]].tolist())
                fitting = _fitting(after, lists[b, i + 1])
                if fitting and i + 2 < positions:
                    if (b, i + 2) not in lists:
                        lists[b, i + 2] = set(ids[b, i + 2][committed[b, i + 2]].tolist())
                    pair = int(ids[b, i, j]) * size
                    total = sum(fitting.values()) + 2 * sum(triples.get((pair + x) * size + y, 0)
                                                            for x in fitting for y in lists[b, i + 2])
                else:
                    total = sum(fitting.values())
                shares[b, i, j] = total
        found = shares.sum(-1)
        if not found.any():
            return None
        return shares / np.maximum(found, 1)[..., None], found / (found + SPAN_PRIOR)


def _fitting(after: dict[int, int], allowed: set[int]) -> dict[int, int]:
    """The entries of ``after`` (id -> count) whose ids are in ``allowed``, walking the smaller of the two (a
    common character is followed by thousands of others in a long history; a list holds tens)."""
    if len(after) <= len(allowed):
        return {x: count for x, count in after.items() if x in allowed}
    return {x: after[x] for x in allowed if x in after}
