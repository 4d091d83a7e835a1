"""A character n-gram language model (interpolated Kneser-Ney), fused into decoding.

The Transformer learns P(hanzi | syllables) from the training pairs. A count-based model of the hanzi
alone, built from the same training split in seconds, knows which characters follow which; classic input
methods are built on one. Decoding adds it to the model's score ("shallow fusion"): each position's
characters are ranked by

    log P_model(c_i | syllables, c_<i) + lm_weight * log P_lm(c_i | c_{i-n+1} .. c_{i-1})

P_lm is interpolated Kneser-Ney with one discount D: at the highest order the counts of n-grams, below it
the number of distinct characters seen before an (n-1)-gram (how many contexts it continues), each order
interpolated with the one below it; add-one at the bottom, so no character has probability 0.

The training text has seen many idioms and terms once or never (仗势欺人, 心肌梗塞); ``count_for`` can add
a phrase table's entries (pypinyin-dict's, ``decode.lm_phrases``), each counted as a sentence of its own,
so that their n-grams are there when the typed syllables call for them.

The tables are sorted int64 keys (an n-gram's hanzi ids as digits in base v, the vocabulary size),
looked up with a binary search, so one call scores every (hypothesis, candidate) pair of a decoding step at
once. For lookups the counts are turned into backoff form once, at the first lookup: each stored n-gram's
interpolated log-probability and each context's log backoff weight (lm/char_ngram_lookup.py, kept between
processes by lm/lookup_cache.py). The model lives in the checkpoint (``char_lm``, its counts stored
compactly: lm/char_ngram_state.py) and counts ids of the checkpoint's hanzi vocabulary.

This module holds the model, :class:`CharNgramLM` (its Kneser-Ney tables from the top order's counts, and
the queries decoding makes), and its counting from text: :func:`count_for` (examples in memory),
:func:`count_store` and :func:`count_from_blocks` (a token store, a block at a time, in bounded memory).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from pinyin_hanzi.data.vocab import BOS_ID
from pinyin_hanzi.lm import char_ngram_state
from pinyin_hanzi.lm.char_ngram_lookup import Lookup, build_lookup, cached_lookup
from pinyin_hanzi.lm.ngram_tables import (
    SPILL_KEYS,
    choose_min_counts,
    context_groups,
    count_orders,
    histogram,
    kept_tables,
    progress,
)
from pinyin_hanzi.lm.sorted_runs import SpillingCounter

DISCOUNT = 0.75


def _unigram_log_probs(keys: torch.Tensor, counts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(v,) log P_1: continuation counts (raw counts for a unigram model), add-one."""
    unigram_counts = torch.zeros(vocab_size)
    unigram_counts.index_add_(0, keys, counts.float())
    return ((unigram_counts + 1) / (unigram_counts.sum() + vocab_size)).log()


def check_key_range(order: int, vocab_size: int) -> None:
    if order < 1 or (order + 1) * vocab_size**order >= 2**63:
        raise ValueError(f"order {order} over {vocab_size} characters does not fit in int64 keys")


def top_order_counts(id_lists: Iterable[Sequence[int]], vocab_size: int, order: int,
                     weights: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, counts) of the ``order``-grams of sentences given as hanzi id lists, each sentence after
    order - 1 ``<s>``: keys sorted and distinct, an n-gram's ids as base-v digits (oldest first); ``weights``:
    how often each sentence counts (None: once)."""
    check_key_range(order, vocab_size)
    pad = [BOS_ID] * (order - 1)
    flat, targets, repeats = [], [], []  # every sentence after order - 1 <s>; targets: positions of real characters
    for number, ids in enumerate(id_lists):
        start = len(flat) + order - 1
        flat += pad + list(ids)
        targets.append(torch.arange(start, start + len(ids)))
        if weights is not None:
            repeats.append(torch.full((len(ids),), int(weights[number]), dtype=torch.long))
    stream = torch.tensor(flat, dtype=torch.long)
    positions = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)
    key = torch.zeros_like(positions)
    for k in range(1, order + 1):
        key = key + stream[positions - (k - 1)] * vocab_size ** (k - 1)
    if weights is None:
        return torch.unique(key, return_counts=True)
    keys, inverse = torch.unique(key, return_inverse=True)
    counts = torch.zeros(len(keys), dtype=torch.long).index_add_(0, inverse, torch.cat(repeats) if repeats else
                                                                 torch.zeros(0, dtype=torch.long))
    return keys, counts


def block_counts(ids: np.ndarray, lengths: np.ndarray, weights: np.ndarray, vocab_size: int, order: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`top_order_counts` of sentences given flat: ``ids`` (tokens,) one after another, ``lengths``
    (sentences,) and ``weights`` (sentences,), computed with array operations (no Python loop per token)."""
    check_key_range(order, vocab_size)
    ids = np.asarray(ids, np.int64)
    starts = np.repeat(np.cumsum(lengths, dtype=np.int64) - lengths, lengths)
    within = np.arange(len(ids), dtype=np.int64) - starts  # each token's place in its sentence
    key = np.zeros(len(ids), np.int64)
    for back in range(order):  # the id `back` places before each token, <s> before the sentence's start
        earlier = np.where(within >= back, ids[np.maximum(np.arange(len(ids)) - back, 0)], BOS_ID)
        key += earlier * vocab_size**back
    keys, inverse = np.unique(key, return_inverse=True)
    counts = np.bincount(inverse, np.repeat(np.asarray(weights, np.int64), lengths), len(keys)).astype(np.int64)
    seen = counts > 0  # a sentence of weight 0 is not counted at all
    return torch.from_numpy(keys[seen]), torch.from_numpy(counts[seen])


def count_from_blocks(blocks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], vocab_size: int, order: int = 3,
                      min_count: int = 1, discount: float = DISCOUNT, max_ngrams: int = 0,
                      spill_keys: int = SPILL_KEYS, spill_dir: str | Path | None = None,
                      examples: int | None = None) -> "CharNgramLM":
    """The model of sentences read a block at a time ((ids, lengths, weights) as :func:`block_counts` takes
    them): the same model :meth:`CharNgramLM.count` makes of all of them at once (``max_ngrams``: see
    :meth:`CharNgramLM.from_top_counts`), in memory bounded by ``spill_keys``, not by the text or its
    distinct n-grams: past that many keys, counts go to sorted runs in a temporary folder in ``spill_dir``
    (default: the system's), removed afterwards (lm/ngram_tables.py). The kept model itself is as large as
    ``max_ngrams`` lets it be. ``examples``: how many sentences the blocks hold, for the progress bar."""
    check_key_range(order, vocab_size)
    with _spill_folder(spill_dir) as name:
        folder = Path(name)
        top = SpillingCounter(folder / f"order-{order}", spill_keys)
        with progress(examples, f"counting {order}-grams", " sentences") as bar:
            for ids, lengths, weights in blocks:
                keys, counts = block_counts(ids, lengths, weights, vocab_size, order)
                top.add(keys.numpy(), counts.numpy())
                bar.update(len(lengths))
        if not top.spilled:  # everything fit the budget: counted in memory
            keys, counts = top.in_memory()
            return CharNgramLM.from_top_counts(torch.from_numpy(keys), torch.from_numpy(counts), vocab_size, order,
                                               min_count, discount, max_ngrams)
        files, (unigram_keys, unigram_counts) = count_orders(top, vocab_size, order, folder, spill_keys)
        min_counts = choose_min_counts({k: files[k].histogram for k in files}, max_ngrams, min_count)
        grams, contexts = kept_tables(files, min_counts, vocab_size)
    unigrams = _unigram_log_probs(torch.from_numpy(unigram_keys), torch.from_numpy(unigram_counts), vocab_size)
    lm = CharNgramLM(order, vocab_size, unigrams, grams, contexts, discount)
    lm.min_counts = min_counts
    return lm


def _spill_folder(spill_dir: str | Path | None) -> tempfile.TemporaryDirectory:
    """A temporary folder in ``spill_dir`` (made if need be), or in the system's where that cannot be
    written (read-only data trains as well); removed when the ``with`` ends, however it ends."""
    if spill_dir is not None:
        try:
            Path(spill_dir).mkdir(parents=True, exist_ok=True)
            return tempfile.TemporaryDirectory(prefix=".ngram-runs-", dir=spill_dir)
        except OSError:
            pass
    return tempfile.TemporaryDirectory(prefix="ngram-runs-")


class CharNgramLM:
    """``order``-gram model over hanzi ids < ``vocab_size``; the context of a sentence's first characters
    is padded with ``<s>`` (BOS_ID)."""

    def __init__(self, order: int, vocab_size: int, unigrams: torch.Tensor, grams: dict[int, tuple],
                 contexts: dict[int, tuple], discount: float = DISCOUNT):
        self.order, self.vocab_size, self.discount = order, vocab_size, discount
        self.unigram_log_probs = unigrams  # (v,) log P_1
        self._unigrams = unigrams.numpy()  # the same, as decoding's lookups read it
        self._gram_tables, self._context_tables = grams, contexts  # the properties' (None: unpacked from _stored)
        self._stored: dict | None = None  # the state_dict a model read from a checkpoint was built from
        self.min_counts: dict[int, int] = {}  # each order's effective min count, where counting pruned it
        self._offset = vocab_size**order
        # order k's keys in the lookup tables carry k v^n on top, so that one sorted array holds every order;
        # column j of a lookup is order j + 2
        self._order_offsets = np.arange(2, order + 1, dtype=np.int64) * self._offset
        self._powers = vocab_size ** np.arange(order - 1, dtype=np.int64)  # digit j of a context: x v^j
        # The lookup tables are built at the first lookup: a model counted only to be stored (training, a
        # prepared store's counted/ folder) never needs them, and they take about as much memory again.
        self._lookup: Lookup | None = None
        self._lookup_lock = threading.Lock()  # the service's threads may look up at once

    def _lookup_tables(self) -> Lookup:
        """(n-gram keys, their log-probabilities, context keys, their log backoff weights), every order in one
        sorted table each, in backoff form (lm/char_ngram_lookup.py); built at the first lookup, once, however
        many threads look up at once."""
        if self._lookup is not None:  # built: read twice a search step, without the lock
            return self._lookup
        with self._lookup_lock:
            if self._lookup is None:
                self._lookup = (self._build_lookup() if self._stored is None
                                else cached_lookup(self._stored, self._build_lookup))
            return self._lookup

    @property
    def grams(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Order k >= 2 -> (sorted keys, counts): raw counts at the top, continuation counts below."""
        if self._gram_tables is None:
            self._unpack()
        return self._gram_tables

    @property
    def contexts(self) -> dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Order k >= 2 -> (sorted context keys, total count, distinct next characters)."""
        if self._context_tables is None:
            self._unpack()
        return self._context_tables

    def _unpack(self) -> None:
        self._gram_tables, self._context_tables = char_ngram_state.unpack_tables(self._stored["tables"],
                                                                                 self.vocab_size)

    def _build_lookup(self) -> Lookup:
        return build_lookup(self.order, self.vocab_size, self.discount, self.unigram_log_probs, self.grams,
                            self.contexts)

    @classmethod
    def count(cls, id_lists: Iterable[Sequence[int]], vocab_size: int, order: int = 3, min_count: int = 1,
              discount: float = DISCOUNT) -> "CharNgramLM":
        """Counts over sentences given as hanzi id lists. ``min_count``: highest-order n-grams seen fewer
        times are dropped from the table (their context keeps its totals, so their probability mass goes to
        the lower orders): a smaller model at some cost in accuracy."""
        keys, counts = top_order_counts(id_lists, vocab_size, order)
        return cls.from_top_counts(keys, counts, vocab_size, order, min_count, discount)

    @classmethod
    def from_top_counts(cls, top_keys: torch.Tensor, top_counts: torch.Tensor, vocab_size: int, order: int = 3,
                        min_count: int = 1, discount: float = DISCOUNT, max_ngrams: int = 0) -> "CharNgramLM":
        """The model of the highest-order n-grams' counts: ``top_keys`` (sorted, distinct n-gram keys, their ids
        as base-v digits, oldest first) and ``top_counts``, as :func:`top_order_counts` gives them; every
        lower order follows from those (Kneser-Ney counts distinct left neighbours). ``max_ngrams`` (0: none):
        the most n-grams the model keeps (:func:`~pinyin_hanzi.lm.ngram_tables.choose_min_counts`)."""
        # Kneser-Ney: raw counts at the top; below, the number of distinct left neighbours (continuations)
        grams = {order: (top_keys, top_counts)}
        for k in range(order - 1, 0, -1):
            distinct_longer = grams[k + 1][0]
            grams[k] = torch.unique(distinct_longer % vocab_size**k, return_counts=True)  # drop the oldest id
        unigrams = _unigram_log_probs(grams[1][0], grams[1][1], vocab_size)
        contexts = {}
        for k in range(2, order + 1):  # each order's keys are sorted: a context is a run of them
            context_keys, totals, distinct = context_groups(grams[k][0].numpy(), grams[k][1].numpy(), vocab_size)
            contexts[k] = (torch.from_numpy(context_keys), torch.from_numpy(totals).int(),
                           torch.from_numpy(distinct).int())
        histograms = {k: histogram(grams[k][1].numpy()) for k in range(2, order + 1)}
        min_counts = choose_min_counts(histograms, max_ngrams, min_count)
        for k, minimum in min_counts.items():
            if minimum > 1:  # drop the rarer n-grams, and the contexts left without one
                kept = grams[k][1] >= minimum
                grams[k] = (grams[k][0][kept], grams[k][1][kept])
                context_keys, totals, distinct = contexts[k]
                has_gram = torch.zeros(len(context_keys), dtype=torch.bool)
                has_gram[torch.searchsorted(context_keys, grams[k][0] // vocab_size)] = True
                contexts[k] = (context_keys[has_gram], totals[has_gram], distinct[has_gram])
        lm = cls(order, vocab_size, unigrams, {k: (g[0], g[1].int()) for k, g in grams.items() if k >= 2},
                 contexts, discount)
        lm.min_counts = min_counts
        return lm

    def log_prob(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """context (n, m): each row's preceding hanzi ids, oldest first (m >= order - 1; <s> before a
        sentence's start); candidates (n, c) hanzi ids -> (n, c) log P(candidate | context).

        In backoff form: the log-probability of the longest stored n-gram (context suffix + candidate), plus
        the log backoff weights of the longer contexts that were seen without this candidate after them. In
        numpy: a search step calls this with a few rows, where torch's per-operator cost made it 10x slower."""
        candidates = np.minimum(candidates.numpy(), self.vocab_size - 1)  # (ids past the counted vocabulary: none)
        if self.order == 1:
            return torch.from_numpy(self._unigrams[candidates])
        return torch.from_numpy(self._scores(*self._contexts(context), candidates))

    def log_prob_entries(self, context: torch.Tensor, rows: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """:meth:`log_prob` of single entries: candidate i (R,) after the context of row ``rows[i]`` (R,) of
        ``context`` (n, m) -> (R,). Each context is looked up once, however many entries it has (a search step's
        padded lists: see search.NgramFusion)."""
        candidates = np.minimum(candidates.numpy(), self.vocab_size - 1)[:, None]  # (R, 1)
        if self.order == 1:
            return torch.from_numpy(self._unigrams[candidates[:, 0]])
        rows = rows.numpy()
        return torch.from_numpy(self._scores(*(part[rows] for part in self._contexts(context)), candidates)[:, 0])

    def _contexts(self, context: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Per row of context (n, m): its suffixes' ids as base-v digits (column j: the context of order j + 2)
        and their log backoff weights (0 where unseen), each (n, order - 1)."""
        tables = self._lookup_tables()
        recent = context.numpy()[:, : -self.order : -1]  # (n, order - 1): the last id first
        histories = (recent * self._powers).cumsum(axis=1)  # column j: order j + 2's context
        keys = histories + self._order_offsets
        index = tables.context_keys.searchsorted(keys)  # (n, m)
        log_backoffs = np.where(tables.context_keys.take(index) == keys, tables.context_log_backoffs.take(index),
                                np.float32(0))
        return histories, log_backoffs

    def _scores(self, histories: np.ndarray, log_backoffs: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """log P of candidates (n, c) after contexts given as :meth:`_contexts` gives them -> (n, c). From the
        lowest order up, each order's stored n-gram replaces what the orders below give, and where it is not
        stored its context's backoff weight is added to it: the longest stored n-gram's log-probability plus
        the backoff weights of the contexts above it."""
        tables = self._lookup_tables()
        queries = (histories * self.vocab_size + self._order_offsets)[:, :, None] + candidates[:, None, :]  # (n, m, c)
        found = tables.gram_keys.searchsorted(queries)  # (n, m, c)
        stored = tables.gram_keys.take(found) == queries
        log_probs = tables.gram_log_probs.take(found)
        result = self._unigrams.take(candidates)
        for j in range(self.order - 1):
            result = np.where(stored[:, j], log_probs[:, j], result + log_backoffs[:, j, None])
        return result

    def sentence_log_prob(self, ids: Sequence[int]) -> float:
        """log P of a whole sentence of hanzi ids, character by character."""
        context = torch.full((1, self.order - 1 or 1), BOS_ID, dtype=torch.long)
        total = 0.0
        for id_ in ids:
            total += float(self.log_prob(context, torch.tensor([[id_]]))[0, 0])
            context = torch.cat([context[:, 1:], torch.tensor([[id_]])], dim=1) if self.order > 1 else context
        return total

    def size(self) -> int:
        """The number of n-grams in the tables (all orders >= 2)."""
        return sum(len(keys) for keys, _ in self.grams.values())

    @staticmethod
    def stored_size(state: dict) -> int:
        """:meth:`size` of the model a stored state (checked: :meth:`state_problem`) holds, without building it."""
        return char_ngram_state.stored_size(state)

    def state_dict(self) -> dict:
        """Compact tables for the checkpoint (lm/char_ngram_state.py): per order, the last ids and how many
        n-grams each context has, the sorted context keys as differences, every column packed."""
        return {"order": self.order, "vocab_size": self.vocab_size, "discount": self.discount,
                "unigrams": self.unigram_log_probs,
                "tables": char_ngram_state.pack_tables(self.grams, self.contexts, self.vocab_size)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "CharNgramLM":
        """The model of a stored state (:meth:`state_dict`'s form, checked: :meth:`state_problem`), its lookup
        tables ready: mapped from the lookup cache where it holds them, and then its counts left packed until
        something asks for them (:attr:`grams`, :attr:`contexts`)."""
        lm = cls(state["order"], state["vocab_size"], state["unigrams"].float(), None, None, state["discount"])
        lm._stored = state
        lm._lookup_tables()  # a stored model is read to be used: its first conversion should not wait for them
        return lm

    @classmethod
    def state_problem(cls, state: dict, hanzi_vocab_size: int) -> str | None:
        """What is wrong with a stored state (:meth:`state_dict`'s form, or an older one) over
        ``hanzi_vocab_size`` characters, as what follows "its character n-gram model" in a one-line error
        ("cannot be read (order 7: ...)"), or None where :meth:`from_state_dict` may build from it. A
        checkpoint may be crafted: this runs before anything is built."""
        return char_ngram_state.state_problem(state, hanzi_vocab_size)


def count_store(split, hanzi_vocab, order: int = 3, min_count: int = 1, phrases: Sequence[str] = (),
                phrase_copies: int = 0, block: int = 1 << 16, max_ngrams: int = 0,
                spill_dir: str | Path | None = None) -> CharNgramLM:
    """:func:`count_for` of a token store's training split (:class:`pinyin_hanzi.data.store.StoredSplit`, read
    in ``hanzi_vocab``'s ids: :meth:`~pinyin_hanzi.data.store.StoredSplit.in_vocabs`), each example as often
    as its copies say, read ``block`` examples at a time: the same model (at most ``max_ngrams`` n-grams, 0:
    no cap), in bounded memory (:func:`count_from_blocks`, spilling to ``spill_dir``)."""
    known = [hanzi_vocab.encode(phrase) for phrase in known_phrases(phrases, hanzi_vocab)] if phrase_copies else []

    def blocks():
        yield from split.blocks("target", block)
        if known:
            yield (np.array([i for ids in known for i in ids]), np.array([len(ids) for ids in known]),
                   np.full(len(known), phrase_copies))

    return count_from_blocks(blocks(), len(hanzi_vocab), order, min_count, max_ngrams=max_ngrams,
                             spill_dir=spill_dir, examples=len(split) + len(known))


def count_for(examples, hanzi_vocab, order: int = 3, min_count: int = 1, phrases: Sequence[str] = (),
              phrase_copies: int = 0) -> CharNgramLM:
    """The model of the hanzi of training examples, over ``hanzi_vocab``'s ids; each of ``phrases`` (a
    phrase table's entries) is counted ``phrase_copies`` more times, as a sentence of its own, except those
    with a character outside the vocabulary (see ``known_phrases``)."""
    id_lists = [hanzi_vocab.encode(example.hanzi) for example in examples]
    id_lists += [hanzi_vocab.encode(phrase) for phrase in known_phrases(phrases, hanzi_vocab)] * phrase_copies
    return CharNgramLM.count(id_lists, len(hanzi_vocab), order, min_count)


def known_phrases(phrases: Sequence[str], hanzi_vocab) -> list[str]:
    """The phrases whose every character is in ``hanzi_vocab``: a phrase with a character the model
    cannot write would only add counts of <unk>."""
    return [phrase for phrase in phrases if all(char in hanzi_vocab.ids for char in phrase)]
