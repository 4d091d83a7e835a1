"""The decoder's state between incremental decoding steps (torchtune's ``modules/kv_cache.py``, grown by
concatenation rather than preallocated: sentences are short and beams reorder the rows at every step).

Axes as in transformer.py: n rows (inputs, or an input's beam hypotheses), h heads, t positions decoded so
far, s source length, k head width.
"""

from __future__ import annotations

import torch


class KVCache:
    """One decoder layer's keys and values: self-attention over the positions decoded so far, (n, h, t, k),
    and cross-attention over the memory, (n, h, s, k), projected at the first step and reused after it.
    ``shared_memory``: the memory's keys/values stay one row per input whatever the rows decoded, shared by
    each input's consecutive rows (a beam's hypotheses: the InferenceDecoder's cache); else they follow the
    rows (the book's cache)."""

    def __init__(self, shared_memory: bool = False):
        self.shared_memory = shared_memory
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.memory_keys: torch.Tensor | None = None
        self.memory_values: torch.Tensor | None = None
        # the memory with the query and output projections folded in (models/inference.py), or None
        self.folded: tuple[torch.Tensor, ...] | None = None

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the newest positions' keys/values (n, h, t_new, k); returns all so far, (n, h, t, k)."""
        if self.keys is not None:
            keys, values = torch.cat([self.keys, keys], dim=2), torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values

    def reorder(self, order: torch.Tensor) -> None:
        """Keep the self-attention rows ``order`` (n,), in that order. The memory's keys/values stay where the
        number of rows does not change: a beam search reorders among the hypotheses of one input, which share
        their memory (as fairseq does). Where it does (a beam search's first step, from one row per input to
        several), the memory's rows follow ``order`` too, unless the memory is shared."""
        if self.keys is not None:
            rows = self.keys.shape[0]
            self.keys, self.values = self.keys.index_select(0, order), self.values.index_select(0, order)
            if self.memory_keys is not None and len(order) != rows and not self.shared_memory:
                self.memory_keys = self.memory_keys.index_select(0, order)
                self.memory_values = self.memory_values.index_select(0, order)

    def drop_front(self, inputs: int, rows: int) -> None:
        """Forget the first ``inputs`` inputs, ``rows`` rows each (finished ones: see search.beam_search)."""
        if self.keys is not None:
            self.keys, self.values = self.keys[inputs * rows :], self.values[inputs * rows :]
        if self.memory_keys is not None:
            kept = inputs if self.shared_memory else inputs * rows
            self.memory_keys, self.memory_values = self.memory_keys[kept:], self.memory_values[kept:]
        if self.folded is not None:  # one row per input, as a shared memory's
            self.folded = tuple(part[inputs:] for part in self.folded)


class DecoderCache:
    """The whole decoder's state: a :class:`KVCache` per layer and the number of positions decoded so far
    (the position of the next one)."""

    def __init__(self, n_layers: int, shared_memory: bool = False):
        self.layers = [KVCache(shared_memory) for _ in range(n_layers)]
        self.length = 0

    def reorder(self, order: torch.Tensor) -> None:
        """Continue from rows ``order`` (n,) of every layer (beam search); see :meth:`KVCache.reorder`."""
        for layer in self.layers:
            layer.reorder(order)

    def drop_front(self, inputs: int, rows: int) -> None:
        """Forget the first ``inputs`` inputs of every layer, ``rows`` rows each."""
        for layer in self.layers:
            layer.drop_front(inputs, rows)
