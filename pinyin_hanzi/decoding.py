"""Pinyin-constrained greedy decoding, and the Converter that turns typed pinyin into hanzi.

Constraint: at position i only hanzi that have a reading equal to syllable i (pypinyin's per-character
tables, restricted to the hanzi vocabulary) may be chosen; a pass-through token (punctuation, digit,
Latin letter, hanzi typed as-is) may only become itself. So every output has exactly one character per
token and never an impossible one. Where the vocabulary has no candidate at all (a syllable whose
characters never occurred in training, a symbol never seen), the output is fixed without the model:
the first character of the reading table, or the symbol itself.
"""

from __future__ import annotations

from typing import Sequence

import torch

from pinyin_hanzi.data import BOS_ID, SPECIALS, UNK_ID, Vocab, pad
from pinyin_hanzi.model import Transformer
from pinyin_hanzi.pinyin import parse_pinyin, syllable_table


class CandidateTable:
    """Raw source token -> allowed hanzi ids, as rows of a boolean (n_tokens, v) table."""

    def __init__(self, hanzi_vocab: Vocab):
        self.hanzi_vocab = hanzi_vocab
        self.rows: dict[str, int] = {}
        self.fallbacks: list[str | None] = []  # per row: the fixed output when no candidate is in the vocab
        self._masks: list[torch.Tensor] = []
        self._table: torch.Tensor | None = None
        self.unconstrained = torch.ones(len(hanzi_vocab), dtype=torch.bool)
        self.unconstrained[: len(SPECIALS)] = False

    def candidates(self, token: str) -> tuple[str, ...]:
        """Characters that may stand for ``token`` (any, not only those in the vocabulary). A single-letter
        syllable (a, o, e, n, m) may also be that Latin letter passing through, as in ``P y t h o n``."""
        chars = syllable_table().get(token)
        if chars is None:
            return (token,)
        return chars + (token,) if len(token) == 1 else chars

    def row(self, token: str) -> int:
        if token not in self.rows:
            chars = self.candidates(token)
            mask = torch.zeros(len(self.hanzi_vocab), dtype=torch.bool)
            ids = [self.hanzi_vocab.ids[char] for char in chars if char in self.hanzi_vocab]
            mask[ids] = True
            self.rows[token] = len(self._masks)
            self._masks.append(mask)
            self.fallbacks.append(None if ids else chars[0])
            self._table = None
        return self.rows[token]

    def table(self) -> torch.Tensor:
        if self._table is None:
            self._table = torch.stack(self._masks)
        return self._table

    def for_vocab(self, pinyin_vocab: Vocab) -> torch.Tensor:
        """(pinyin vocab size, hanzi vocab size) bool: the candidates of each source id. Special ids and
        <unk> allow every character (their raw token is unknown)."""
        table = torch.stack([self._masks[self.row(token)] for token in pinyin_vocab.tokens])
        table[: len(SPECIALS)] = self.unconstrained
        return table


class Converter:
    """A trained model with its vocabularies: converts token lists or typed lines into hanzi."""

    def __init__(self, model: Transformer, pinyin_vocab: Vocab, hanzi_vocab: Vocab, device: torch.device | str = "cpu"):
        self.model = model.to(device).eval()
        self.pinyin_vocab, self.hanzi_vocab = pinyin_vocab, hanzi_vocab
        self.device = torch.device(device)
        self.candidates = CandidateTable(hanzi_vocab)

    @torch.inference_mode()
    def _greedy_batch(self, token_lists: Sequence[Sequence[str]], constrained: bool) -> list[str]:
        batch_size, length = len(token_lists), max(len(tokens) for tokens in token_lists)
        source = pad([self.pinyin_vocab.encode(tokens) for tokens in token_lists]).to(self.device)
        rows = torch.tensor([[self.candidates.row(t) for t in tokens] + [0] * (length - len(tokens))
                             for tokens in token_lists])  # (b, s) candidate-table row per position
        table = self.candidates.table()
        memory, padding_mask = self.model.encode(source)
        cache = self.model.new_cache()
        previous = torch.full((batch_size, 1), BOS_ID, dtype=torch.long, device=self.device)
        chosen = torch.empty(batch_size, length, dtype=torch.long)
        for position in range(length):
            logits = self.model.decode(previous, memory, padding_mask, cache, start=position)[:, -1].float().cpu()
            allowed = table[rows[:, position]] if constrained else self.candidates.unconstrained.expand_as(logits)
            chosen[:, position] = logits.masked_fill(~allowed, float("-inf")).argmax(dim=-1)
            # Positions with no candidate in the vocabulary: fixed output, fed back as <unk>.
            stuck = ~allowed.any(dim=-1)
            chosen[stuck, position] = UNK_ID
            previous = chosen[:, position : position + 1].to(self.device)
        outputs = []
        for row_index, tokens in enumerate(token_lists):
            chars = []
            for position, token in enumerate(tokens):
                fallback = self.candidates.fallbacks[rows[row_index, position]]
                if constrained and fallback is not None:
                    chars.append(fallback)
                else:
                    chars.append(self.hanzi_vocab.tokens[int(chosen[row_index, position])])
            outputs.append("".join(chars))
        return outputs

    def convert_tokens(self, token_lists: Sequence[Sequence[str]], *, constrained: bool = True,
                       batch_size: int = 256) -> list[str]:
        """One output string per token list (same order); an empty list gives an empty string.

        Batches are formed from inputs of similar length, so little work is spent on padding."""
        outputs = [""] * len(token_lists)
        order = sorted((i for i, tokens in enumerate(token_lists) if tokens), key=lambda i: len(token_lists[i]))
        max_len = self.model.config.max_positions
        for begin in range(0, len(order), batch_size):
            indices = order[begin : begin + batch_size]
            pieces = [(i, start, token_lists[i][start : start + max_len])
                      for i in indices for start in range(0, len(token_lists[i]), max_len)]
            for (i, _, _), text in zip(pieces, self._greedy_batch([p[2] for p in pieces], constrained)):
                outputs[i] += text
        return outputs

    def convert(self, lines: Sequence[str], *, constrained: bool = True, batch_size: int = 256) -> list[str]:
        """Typed pinyin lines (``ni hao``, ``nihao``, ``ni3 hao3``) -> hanzi lines."""
        return self.convert_tokens([parse_pinyin(line) for line in lines], constrained=constrained,
                                   batch_size=batch_size)
