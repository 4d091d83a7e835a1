"""The tables of the character n-gram model (lm/char_ngram.py) from its top-order counts, in bounded memory,
and the effective min counts that keep the model under a size cap.

Interpolated Kneser-Ney needs, from the counts of the highest order's n-grams: below it, each (k-1)-gram's
number of distinct left neighbours (the distinct k-grams that end with it), and at every order each
context's total count and number of distinct next characters. Over a large corpus there are more distinct
n-grams than memory should hold, so :func:`count_orders` derives them with sorted runs on disk
(lm/sorted_runs.py): the top order's counts come sorted, a chunk at a time; a context (key // v) is a
prefix of sorted keys, so contexts are summed as the chunks go by; the left neighbours' counts (key % v^k,
not sorted) are counted by another spilling counter, whose sorted output feeds the order below in turn.
Each order's full tables go to a file; what the model keeps is read back from them (:func:`kept_tables`)
once :func:`choose_min_counts` has chosen the min counts that fit ``decode.lm_max_ngrams``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from pinyin_hanzi.lm.sorted_runs import (
    RunWriter,
    SpillingCounter,
    add_up,
    read_run,
    whole_groups,
)

SPILL_KEYS = 1 << 22  # keys a counter holds before it spills a sorted run (16 bytes each, a few copies while sorting)

Histogram = tuple[np.ndarray, np.ndarray]  # (count values, ascending; how many n-grams have each)
Tables = dict[int, tuple[torch.Tensor, ...]]  # order -> columns, as CharNgramLM takes them


def progress(total: int | None, description: str, unit: str) -> tqdm:
    """A bar on stderr while it is a terminal (tqdm's disable=None), with rate and ETA."""
    return tqdm(total=total, desc=description, unit=unit, unit_scale=True, disable=None, mininterval=1.0,
                smoothing=0.05)


def histogram(counts: np.ndarray) -> Histogram:
    values, numbers = np.unique(np.asarray(counts, np.int64), return_counts=True)
    return values, numbers.astype(np.int64)


def _added(first: Histogram, second: Histogram) -> Histogram:
    return add_up(np.concatenate([first[0], second[0]]), np.concatenate([first[1], second[1]]))


def context_groups(keys: np.ndarray, counts: np.ndarray, vocab_size: int) -> tuple[np.ndarray, ...]:
    """(context keys, total count, distinct next characters) of sorted n-gram keys: a context is key // v."""
    contexts = keys // vocab_size
    if len(keys) == 0:
        return contexts, counts, counts
    starts = np.flatnonzero(np.concatenate(([True], contexts[1:] != contexts[:-1])))  # each context's first row
    return contexts[starts], np.add.reduceat(counts, starts), np.diff(np.append(starts, len(keys)))


@dataclass
class OrderFiles:
    """One order's full tables on disk: ``grams`` rows (key, count), ``contexts`` rows (key, total, distinct)."""

    grams: Path
    contexts: Path
    histogram: Histogram


def count_orders(top: SpillingCounter, vocab_size: int, order: int, folder: Path, budget: int = SPILL_KEYS
                 ) -> tuple[dict[int, OrderFiles], tuple[np.ndarray, np.ndarray]]:
    """Every order's tables (orders ``order`` .. 2, on disk in ``folder``) and the unigram (continuation)
    counts (keys, counts) of the top order's counts, as :meth:`CharNgramLM.from_top_counts` derives them."""
    files, counter = {}, top
    for k in range(order, 1, -1):
        lower = SpillingCounter(folder / f"order-{k - 1}", budget)
        grams, contexts = RunWriter(folder / f"grams-{k}.bin"), RunWriter(folder / f"contexts-{k}.bin", 3)
        counts_seen: Histogram = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        with progress(counter.rows or None, f"{k}-gram tables", " n-grams") as bar:
            for keys, counts in whole_groups(counter.chunks(progress=bar.update), vocab_size):
                grams.append(keys, counts)
                contexts.append(*context_groups(keys, counts, vocab_size))
                counts_seen = _added(counts_seen, histogram(counts))
                lower.add(keys % vocab_size ** (k - 1), np.ones(len(keys), np.int64))  # drop the oldest id
        files[k] = OrderFiles(grams.close(), contexts.close(), counts_seen)
        counter = lower
    chunks = list(counter.chunks())
    return files, (np.concatenate([keys for keys, _ in chunks]), np.concatenate([counts for _, counts in chunks]))


def kept_tables(files: dict[int, OrderFiles], min_counts: dict[int, int], vocab_size: int
                ) -> tuple[Tables, Tables]:
    """(grams: order -> (keys, counts int32), contexts: order -> (keys, totals, distinct int32)) of the
    n-grams seen at least ``min_counts[order]`` times, and the contexts that keep one of them."""
    grams, contexts = {}, {}
    for k, stored in files.items():
        minimum = min_counts[k]
        parts = [(keys[counts >= minimum], counts[counts >= minimum]) for keys, counts in read_run(stored.grams)]
        keys, counts = (np.concatenate(column) for column in zip(*parts)) if parts else (np.zeros(0, np.int64),) * 2
        with_gram = np.unique(keys // vocab_size)  # sorted already: unique is one pass
        context_parts = []
        for context_keys, totals, distinct in read_run(stored.contexts, 3):
            if minimum > 1:  # the contexts left without an n-gram of this order are dropped
                place = np.searchsorted(with_gram, context_keys).clip(max=max(len(with_gram) - 1, 0))
                keep = with_gram[place] == context_keys if len(with_gram) else np.zeros(len(context_keys), bool)
                context_keys, totals, distinct = context_keys[keep], totals[keep], distinct[keep]
            context_parts.append((context_keys, totals, distinct))
        columns = [np.concatenate(column) for column in zip(*context_parts)] if context_parts else [
            np.zeros(0, np.int64)] * 3
        grams[k] = (torch.from_numpy(keys), torch.from_numpy(counts).int())
        contexts[k] = (torch.from_numpy(columns[0]), torch.from_numpy(columns[1]).int(),
                       torch.from_numpy(columns[2]).int())
    return grams, contexts


def _kept(histogram_: Histogram, minimum: int) -> int:
    values, numbers = histogram_
    return int(numbers[values >= minimum].sum())


def _lowest_fitting(histogram_: Histogram, floor: int, room: int) -> int:
    """The smallest min count >= ``floor`` that keeps at most ``room`` n-grams: ``floor`` or one of the count
    values (keep those seen at least that often), else one past the largest (keep none)."""
    if _kept(histogram_, floor) <= room:
        return floor
    values, numbers = histogram_
    kept_from = numbers[::-1].cumsum()[::-1]  # n-grams seen at least values[i] times
    fitting = values[(values > floor) & (kept_from <= room)]
    return int(fitting[0]) if len(fitting) else int(values.max(initial=floor)) + 1


def choose_min_counts(histograms: dict[int, Histogram], max_ngrams: int, min_count: int) -> dict[int, int]:
    """Each order's min count (orders 2..n; ``histograms``: each order's count values): ``min_count`` at
    the top and 1 below, raised, rarest first, until the model holds at most ``max_ngrams`` n-grams (0: no
    cap). The top order's is raised first, as far as the orders below, kept whole, leave it room; where
    they take the whole cap by themselves, the top order keeps at most half of it and the order below is
    pruned in its turn, to what the orders below it leave, and so on down."""
    if not histograms:
        return {}
    top = max(histograms)
    min_counts = {k: min_count if k == top else 1 for k in histograms}
    if max_ngrams <= 0 or sum(_kept(histograms[k], min_counts[k]) for k in histograms) <= max_ngrams:
        return min_counts
    room = max_ngrams
    for k in range(top, 1, -1):
        below = sum(_kept(histograms[j], 1) for j in range(2, k))
        if below < room:  # the orders below fit whole: this one takes the room they leave
            min_counts[k] = _lowest_fitting(histograms[k], min_counts[k], room - below)
            break
        min_counts[k] = _lowest_fitting(histograms[k], min_counts[k], room // 2)
        room -= _kept(histograms[k], min_counts[k])
    return min_counts
