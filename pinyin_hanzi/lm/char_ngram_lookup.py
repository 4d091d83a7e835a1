"""Decoding's lookup tables of the character n-gram model (lm/char_ngram.py): its counts in backoff form.

The model keeps counts; decoding looks up, for every (hypothesis, candidate) pair of a step, the
interpolated Kneser-Ney log-probability. So the counts are turned once into backoff form
(:func:`build_lookup`): each stored n-gram's full interpolated log-probability, and each context's log backoff
weight (D * distinct / total: what multiplies the lower order's probability of the characters not stored after
it; renormalised where counting pruned some of its n-grams). Every order goes into one sorted table each (keys
+ k * offset, offset = v ** order > any key), so that one ``searchsorted`` call serves every order: per decoding
step the lookups' cost is cache misses in these tables and per-call overhead, not arithmetic.

A stored model's tables are mapped from the lookup cache where it holds them (:func:`cached_lookup`,
lm/lookup_cache.py); a change to what :func:`build_lookup` derives bumps ``lookup_cache.FORMAT``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from pinyin_hanzi.lm import lookup_cache
from pinyin_hanzi.lm.char_ngram_state import stored_context_count, stored_size


class Lookup(NamedTuple):
    """What decoding's lookups search (:meth:`CharNgramLM.log_prob`): every order's n-grams in one sorted table
    and their log-probabilities, every order's contexts in another and their log backoff weights."""

    gram_keys: np.ndarray  # int64, sorted, a sentinel last
    gram_log_probs: np.ndarray  # float32
    context_keys: np.ndarray  # int64, sorted, a sentinel last
    context_log_backoffs: np.ndarray  # float32


def build_lookup(order: int, vocab_size: int, discount: float, unigram_log_probs: torch.Tensor,
                 grams: dict[int, tuple[torch.Tensor, torch.Tensor]],
                 contexts: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Lookup:
    """The lookup tables of a model's counts: ``unigram_log_probs`` (v,), ``grams`` (order k >= 2 -> sorted
    keys, counts) and ``contexts`` (k -> sorted context keys, totals, distinct next characters before any
    was pruned), with the Kneser-Ney ``discount``. Order k's keys carry k * v ** ``order`` on top."""
    offset = vocab_size**order
    gram_keys, gram_log_probs, context_keys, context_log_backoffs = [], [], [], []
    # order -> (keys, P_k, context keys, backoff weights); order 1 by character id
    lower_tables = {1: (None, unigram_log_probs.double().exp(), None, None)}
    for k in range(2, order + 1):
        keys, counts = grams[k]
        ctx_keys, totals, distinct = contexts[k]  # distinct: a context's n-grams before any was pruned
        context_index = _context_index(keys // vocab_size, ctx_keys)
        total, backoff = totals.double()[context_index], discount * distinct.double() / totals.double()
        suffix = keys % vocab_size ** (k - 1)  # the same n-gram without its oldest character
        lower_probs = _backed_off(lower_tables, k - 1, suffix, vocab_size)
        probs = (counts.double() - discount).clamp(min=0) / total + backoff[context_index] * lower_probs
        backoff = _pruned_backoffs(backoff, counts, lower_probs, context_index, totals, distinct, discount)
        gram_keys.append(keys + k * offset)
        gram_log_probs.append(probs.log().float())
        context_keys.append(ctx_keys + k * offset)
        context_log_backoffs.append(backoff.log().float())
        lower_tables[k] = (keys, probs, ctx_keys, backoff)
    # numpy arrays, each table ending in a sentinel key above every real one (with a dummy value), so that
    # a search never lands past the end, even in an empty table
    sentinel = np.array([np.iinfo(np.int64).max])
    return Lookup(np.concatenate([k.numpy() for k in gram_keys] + [sentinel]),
                  np.concatenate([p.numpy() for p in gram_log_probs] + [np.zeros(1, np.float32)]),
                  np.concatenate([k.numpy() for k in context_keys] + [sentinel]),
                  np.concatenate([b.numpy() for b in context_log_backoffs] + [np.zeros(1, np.float32)]))


def cached_lookup(state: dict, build: Callable[[], Lookup]) -> Lookup:
    """The lookup tables of a stored model (``state``, checked), mapped from the lookup cache where it holds
    them, else ``build()`` and kept there (lm/lookup_cache.py); small models are built."""
    size, context_count = stored_size(state), stored_context_count(state)
    if size < lookup_cache.MIN_NGRAMS:
        return build()
    digest = lookup_cache.state_digest(state)
    expected = {"gram_keys": (np.dtype(np.int64), size + 1), "gram_log_probs": (np.dtype(np.float32), size + 1),
                "context_keys": (np.dtype(np.int64), context_count + 1),
                "context_log_backoffs": (np.dtype(np.float32), context_count + 1)}
    arrays = lookup_cache.load(digest, expected)
    if arrays is not None:
        return Lookup(**arrays)
    lookup = build()
    lookup_cache.store(digest, lookup._asdict())
    return lookup


def _find(keys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """The index of each query (any shape) in the sorted ``keys``, -1 where it is not there."""
    if len(keys) == 0:
        return torch.full(queries.shape, -1, dtype=torch.long)
    index = torch.searchsorted(keys, queries).clamp_(max=len(keys) - 1)
    return torch.where(keys[index] == queries, index, -1)


def _context_index(starts: torch.Tensor, context_keys: torch.Tensor) -> torch.Tensor:
    """The index in the sorted ``context_keys`` of each of ``starts`` (sorted: an order's n-gram keys // v).
    Where the contexts are exactly the distinct starts, as counted and stored tables have them, the index is
    a run count, not a search: a tenth of the time, at every start of a converter."""
    distinct, index = torch.unique_consecutive(starts, return_inverse=True)
    if len(distinct) == len(context_keys) and bool((distinct == context_keys).all()):
        return index
    return torch.searchsorted(context_keys, starts)


def _pruned_backoffs(backoffs: torch.Tensor, counts: torch.Tensor, lower_probs: torch.Tensor,
                     context_index: torch.Tensor, totals: torch.Tensor, distinct: torch.Tensor, discount: float
                     ) -> torch.Tensor:
    """The backoff weights of contexts some of whose n-grams were pruned (min counts), so that P(. | context)
    still sums to 1: the stored n-grams keep the full model's probability, and the mass of the pruned ones,
    sum((c - D) / total), goes to the characters not stored after the context, in proportion to the order
    below: D * distinct / total + that mass / (1 - the stored n-grams' P_lower). Other contexts keep
    ``backoffs``. (As SRILM and KenLM renormalise a pruned model.)"""
    stored = torch.bincount(context_index, minlength=len(totals))
    pruned = distinct.long() - stored
    if not bool((pruned > 0).any()):
        return backoffs
    stored_counts = torch.zeros(len(totals), dtype=torch.long).index_add_(0, context_index, counts.long())
    pruned_mass = ((totals.long() - stored_counts).double() - discount * pruned.double()) / totals.double()
    lower_left = 1 - torch.zeros(len(totals), dtype=torch.float64).index_add_(0, context_index, lower_probs)
    return torch.where(pruned > 0, backoffs + pruned_mass / lower_left.clamp(min=1e-12), backoffs)


def _backed_off(tables: dict, k: int, keys: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """P_k of k-gram ``keys`` as the model gives it (tables: order -> (sorted keys, P_k of each, sorted
    context keys, their backoff weights); order 1: (None, P_1 by id, None, None)): a stored k-gram's own
    probability, else its context's backoff weight (1 for a context not stored) times P_{k-1} of its
    suffix. Where an order was pruned, a stored longer n-gram's suffix may be missing."""
    gram_keys, probs, context_keys, backoffs = tables[k]
    if gram_keys is None:
        return probs[keys]
    index = _find(gram_keys, keys)
    found = index >= 0
    if bool(found.all()):
        return probs[index]
    result = torch.empty(len(keys), dtype=torch.float64)
    result[found] = probs[index[found]]
    missing = keys[~found]
    context = _find(context_keys, missing // vocab_size)
    weight = torch.where(context >= 0, backoffs[context.clamp(min=0)], 1.0)
    result[~found] = weight * _backed_off(tables, k - 1, missing % vocab_size ** (k - 1), vocab_size)
    return result
